package summarizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
)

var errPoison = errors.New("400 content filter: the request was refused")

// poisonLLM refuses (permanently) any request whose messages hold POISON, and
// otherwise summarizes.
type poisonLLM struct{ refused, answered atomic.Int32 }

func (p *poisonLLM) Summarize(_ context.Context, in summarizer.Input) (summarizer.Output, error) {
	for _, m := range in.Messages {
		if strings.Contains(m.Content.String(), "POISON") {
			p.refused.Add(1)
			return summarizer.Output{}, errPoison
		}
	}
	p.answered.Add(1)
	return summarizer.Output{Summary: fmt.Sprintf("Facts: %d messages", len(in.Messages)), Model: "m"}, nil
}

// A fallback written because the LLM refused a message for good (a content filter:
// permanent) cannot be repaired: the fallback's own request ends with a declined event
// saying why (not a dead letter and a failed event after its completed), and a later
// compaction treats the repair's refusal as giving up on the repair: it compacts the
// new messages, built on the fallback. Before the fix the later compaction failed with
// the repair's error, dead letter after dead letter.
func TestPermanentRepairFailureDoesNotBlockLaterCompactions(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum := &poisonLLM{}
	// 10 messages of 400 tokens (past the hard limit of a 4000 window); the first ends
	// with the word the LLM refuses (past the fallback's excerpt of it).
	var last uint64
	for i := 0; i < 10; i++ {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		text := fmt.Sprintf("NEEDLE-p%d ", i) + strings.Repeat("w ", 790)
		if i == 0 {
			text += "POISON"
		}
		data, _ := (&schemas.Message{Role: role, Content: schemas.Text(text)}).Encode()
		var err error
		if last, err = st.Chat().Publish(ctx, "poison", data, ""); err != nil {
			t.Fatal(err)
		}
	}
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, 2, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, 10*time.Second
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{}, Retryable: func(err error) bool { return !errors.Is(err, errPoison) },
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	req := request(t, ctx, st, "poison", last)
	if ev, err := st.Events().WaitOutcome(ctx, "poison", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, _ := st.Results().Get(ctx, "poison", true)
	t.Logf("v1: generation %d fallback %v built_on_fallback %v tokens %d->%d", v1.Generation, v1.Fallback, v1.BuiltOnFallback, v1.TokensBefore, v1.TokensAfter)
	// Its own repair request ends, declined: it says why, and leaves the queue.
	for {
		p, err := st.Queue().Pending(ctx, "poison")
		if err == nil && p == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the fallback's request stays: %+v", p)
		case <-time.After(50 * time.Millisecond):
		}
	}
	evs, _, err := st.Events().History(ctx, "poison", time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ended []string
	for _, ev := range evs {
		if ev.RequestID == req.RequestID && ev.Type != schemas.EventStarted && ev.Type != schemas.EventRequested {
			ended = append(ended, ev.Type)
			if ev.Type == schemas.EventDeclined && !strings.Contains(ev.Error, "content filter") {
				t.Errorf("declined event %q; want it to say why the repair cannot be made", ev.Error)
			}
		}
	}
	if len(ended) != 2 || ended[0] != schemas.EventCompleted || ended[1] != schemas.EventDeclined {
		t.Fatalf("the fallback's request ended with %v; want completed, then declined (the repair cannot be made)", ended)
	}
	// New messages over the threshold (under the hard limit), clean ones.
	for i := 10; i < 16; i++ {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		data, _ := (&schemas.Message{Role: role, Content: schemas.Text(fmt.Sprintf("NEEDLE-p%d ", i) + strings.Repeat("w ", 790))}).Encode()
		var err error
		if last, err = st.Chat().Publish(ctx, "poison", data, ""); err != nil {
			t.Fatal(err)
		}
	}
	before := sum.answered.Load()
	req2 := request(t, ctx, st, "poison", last)
	ev, err := st.Events().WaitOutcome(ctx, "poison", req2.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	v2, _, _ := st.Results().Get(ctx, "poison", true)
	if ev.Type != schemas.EventCompleted || v2.Generation != v1.Generation+1 || v2.Fallback || !v2.BuiltOnFallback || sum.answered.Load() == before {
		t.Fatalf("a later compaction of clean messages on the fallback: %s (%s); LLM answered %d, refused %d; value generation %d fallback %v built_on_fallback %v; want an LLM summary built on the fallback",
			ev.Type, ev.Error, sum.answered.Load()-before, sum.refused.Load(), v2.Generation, v2.Fallback, v2.BuiltOnFallback)
	}
}
