package triggers_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/triggers"
)

// A 900 KB message its producer marks `tokens: 1` weighs what its bytes imply in the
// trigger's estimate, so the budget trigger fires (issue 18). It failed before: the
// estimate was 1 and nothing was asked for.
func TestDeclaredTokensDoNotHideContentFromTheTrigger(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st)
	m := schemas.Message{Role: schemas.RoleUser, Tokens: 1,
		Content: schemas.Text(strings.Repeat("log line 0123456789 abcdefghijklmnopqrstuvwxyz\n", 900_000/48))}
	seq := publish(t, st, "declared", m)
	handled(t, nc, st, seq)
	if got, _ := tr.b.TokensOf("declared"); got < 100_000 {
		t.Errorf("estimate %d tokens; want the content's weight (over 100,000), not the declared 1", got)
	}
	reqs.sync(t)
	if got := reqs.all(); len(got) != 1 || got[0].Trigger != schemas.TriggerBudget {
		t.Fatalf("requests %+v; want one budget request", got)
	}
}

// all returns a copy of the requests seen so far.
func (r *requests) all() []schemas.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schemas.Request(nil), r.got...)
}

// usageIgnored counts what a trigger tells its UsageObserver.
type usageIgnored struct{ n atomic.Int64 }

func (*usageIgnored) Counted(time.Duration)                    {}
func (*usageIgnored) Requested(string, triggers.RequestResult) {}
func (u *usageIgnored) UsageIgnored()                          { u.n.Add(1) }

// An agent that reports a tenth of the real usage every turn (Anthropic's input_tokens
// read as prompt_tokens, without the cache reads) no longer collapses the estimate:
// each such usage is ignored and counted, and the conversation is compacted when its
// content crosses the threshold (issue 18). It failed before: every reply reset the
// estimate to a tenth of it, and no request came.
func TestUsageFarBelowTheEstimateIsIgnored(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	obs := &usageIgnored{}
	cfg := testConfig()
	cfg.Observer = obs
	startWith(t, st, cfg)
	gen0 := uint64(0)
	user := text(1600)
	estimate := 0
	var last uint64
	const turns = 10 // 10 × (404 + 5) tokens: over the threshold of 3,000
	for range turns {
		publish(t, st, "low-usage", user)
		estimate += tokens.Message(&user)
		reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("ok"), ContextGeneration: &gen0}
		estimate += tokens.Message(&reply)
		reply.Usage = &schemas.Usage{PromptTokens: estimate / 10, CompletionTokens: 1}
		last = publish(t, st, "low-usage", reply)
	}
	handled(t, nc, st, last)
	reqs.sync(t)
	if got := reqs.all(); len(got) != 1 || got[0].Trigger != schemas.TriggerBudget {
		t.Fatalf("requests %+v; want one budget request", got)
	}
	if n := obs.n.Load(); n != turns {
		t.Errorf("%d usages ignored; want all %d", n, turns)
	}
}
