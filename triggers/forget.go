package triggers

import (
	"context"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// removeForgotten removes a value the conversation's tombstone covers (the trigger met
// it while rebuilding the conversation's state): a value a writer left after a forget
// (its check gave up, its take-back failed, or it crashed between writing and
// checking) holds something of the forgotten conversation, and once the tombstone
// expires the next compaction would build on it. Readers do not serve it meanwhile;
// this removes it for good. Only the revisions up to rev go, never a newer one. A
// failure is logged: the worker of the conversation's next job removes it too.
//
// A value written before the forget began is the forget's to delete while it runs (it
// counts what it deleted): the trigger leaves it alone for forgetGrace after the
// tombstone (jetstream.ForgetGrace), and removes it after that only if the forget
// failed to.
func (t *Trigger) removeForgotten(ctx context.Context, id string, v *schemas.Result, rev uint64, tomb *schemas.Tombstone) {
	if v == nil || rev == 0 || !tomb.Covers(v.FirstSeq) {
		return
	}
	if !v.CreatedAt.After(tomb.ForgottenAt) && t.now().Sub(tomb.ForgottenAt) < jetstream.ForgetGrace {
		return
	}
	log := t.log.With().Str("conversation", id).Uint64("generation", v.Generation).Uint64("revision", rev).Logger()
	if err := t.store.Results().Remove(ctx, id, rev); err != nil {
		log.Warn().Err(err).Msg("a value of the forgotten conversation outlived its forget; removing it failed (readers do not serve it; the next job removes it)")
		return
	}
	log.Warn().Uint64("through_seq", tomb.ThroughSeq).Msg("a value of the forgotten conversation outlived its forget; removed")
}
