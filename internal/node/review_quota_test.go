package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
)

// Review of issue 21: the tokens of summaries the worker throws away are never counted
// against the tenant's quota. An endpoint whose summaries stay over their cap (a model
// that ignores the length asked for; a tenant's messages can ask it to) is called
// twice (the first answer and the firmer one), errSummaryTooLong falls back, and
// charge sees a fallback without usage: the endpoint was paid for both calls, and the
// tenant's count of tokens today stays at 0, so its summarizer_tokens_per_day never
// declines anything.
func TestReviewQuotaCountsTokensOfDiscardedSummaries(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Pad = 40000 }) // every summary far over its cap
	file := filepath.Join(t.TempDir(), "tenants.json")
	body := fmt.Sprintf(`{"tenants": {"acme": {"policy": {"llm_base_url": %q, "llm_api_key_env": "ACME_KEY"},
		"quotas": {"summarizer_tokens_per_day": 1000000}}}}`, llm.URL()+"/v1")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := map[string]string{"ACME_KEY": "k-acme"}
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, &logLines{t: t}, func(k string) (string, bool) { v, ok := keys[k]; return v, ok })
	defer func() { _ = stop() }()
	acme := tenantStore(ctx, t, nc, "acme")
	cl := pipeline.NewWithStore(nc, acme)
	publishTurns(ctx, t, cl, "c1", 40, 10)
	waitFor(ctx, t, "acme's c1 compacted (by the fallback)", func() bool {
		v, _, err := acme.Results().Get(ctx, "c1", false)
		return err == nil && v != nil && v.Generation > 0
	})
	calls := llm.Calls()
	used, _, err := acme.TokensUsed(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("LLM calls %d, tokens counted against acme's quota %d", calls, used)
	if calls > 0 && used == 0 {
		t.Fatalf("acme's endpoint answered %d calls (each with usage, over 10000 completion tokens each), and acme's quota counted %d tokens", calls, used)
	}
}

// Review of issue 21: the token quota is read before a compaction and written after
// it, so compactions that run at once are each allowed against the same count. With
// 4 workers (per tenant and process) and a quota that one compaction fits and two do
// not, two compactions of two conversations are both let through, and the day's count
// ends over the quota by a whole other compaction, not a compaction "by its own tokens"
// (docs/tenants.md). Across processes it is workers × processes compactions at once.
func TestReviewQuotaConcurrentCompactionsOvershoot(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	block := make(chan struct{})
	llm.Set(func(f *fakellm.LLM) { f.Block = block })
	const quota = 5000 // one compaction's ~3800 tokens fit; a second's estimate after it does not
	file := filepath.Join(t.TempDir(), "tenants.json")
	body := fmt.Sprintf(`{"tenants": {"acme": {"policy": {"llm_base_url": %q, "llm_api_key_env": "ACME_KEY"},
		"quotas": {"summarizer_tokens_per_day": %d}}}}`, llm.URL()+"/v1", quota)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := map[string]string{"ACME_KEY": "k-acme"}
	logs := &logLines{t: t}
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, logs, func(k string) (string, bool) { v, ok := keys[k]; return v, ok })
	defer func() { _ = stop() }()
	acme := tenantStore(ctx, t, nc, "acme")
	cl := pipeline.NewWithStore(nc, acme)
	convs := []string{"c1", "c2"}
	for _, conv := range convs {
		publishTurns(ctx, t, cl, conv, 40, 10)
	}
	// One compaction reserves its tokens and waits at the endpoint; the other does not
	// fit beside that reservation: past its hard limit, it gets the free fallback.
	waitFor(ctx, t, "one compaction at the endpoint and the other on a fallback", func() bool {
		if llm.Held() < 1 {
			return false
		}
		for _, conv := range convs {
			if v, _, err := acme.Results().Get(ctx, conv, false); err == nil && v != nil && v.Fallback {
				return true
			}
		}
		return false
	})
	if held := llm.Held(); held != 1 {
		t.Fatalf("%d compactions at the endpoint at once; the quota fits one", held)
	}
	close(block)
	llm.Set(func(f *fakellm.LLM) { f.Block = nil })
	waitFor(ctx, t, "both conversations compacted", func() bool {
		for _, conv := range convs {
			v, _, err := acme.Results().Get(ctx, conv, false)
			if err != nil || v == nil || v.Generation == 0 {
				return false
			}
		}
		return true
	})
	used, _, err := acme.TokensUsed(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	per := used / int64(len(convs))
	t.Logf("tokens counted %d (about %d a compaction), quota %d", used, per, quota)
	if used > quota {
		t.Fatalf("acme's quota of %d tokens let %d compactions of about %d tokens each start at once (one after the other, the "+
			"second would have been declined): %d tokens spent today", quota, len(convs), per, used)
	}
}

// Review of issue 21: a tenant over its summarizer_tokens_per_day loses the hard limit.
// guarantees.md promises that past the hard limit a fallback summary (deterministic,
// no LLM, no tokens) keeps the bound at once; the quota declines before the worker gets
// to choose between the LLM and the fallback, so a declined conversation past its hard
// limit is not compacted at all, and its context grows with every message until
// midnight UTC. docs/tenants.md does not say so.
func TestReviewQuotaDeclineKeepsTheHardLimit(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	body := fmt.Sprintf(`{"tenants": {"acme": {"policy": {"llm_base_url": %q, "llm_api_key_env": "ACME_KEY"},
		"quotas": {"summarizer_tokens_per_day": 100}}}}`, llm.URL()+"/v1")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := map[string]string{"ACME_KEY": "k-acme"}
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, &logLines{t: t}, func(k string) (string, bool) { v, ok := keys[k]; return v, ok })
	defer func() { _ = stop() }()
	acme := tenantStore(ctx, t, nc, "acme")
	cl := pipeline.NewWithStore(nc, acme)
	publishTurns(ctx, t, cl, "c1", 40, 10)
	// Over its quota and past its hard limit, the conversation gets the extractive
	// fallback (no tokens), repaired once the quota allows it.
	waitFor(ctx, t, "acme's c1 on a fallback", func() bool {
		v, _, err := acme.Results().Get(ctx, "c1", true)
		return err == nil && v != nil && v.Generation > 0 && v.Fallback
	})
	hard := resolver(t, 2000).Base().Budget().HardLimitTokens()
	c, err := cl.Context(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokens > hard {
		t.Fatalf("acme's c1 after a quota decline: a context of %d tokens, over its hard limit of %d; a fallback costs no tokens "+
			"and would have kept the bound (guarantees.md)", c.Tokens, hard)
	}
}

// Review of issue 21: a fallback's request stays queued until the LLM repairs the value
// (guarantees.md: "No new message is needed"). The quota declines that repair like any
// compaction, and a decline acks its request: the repair is dropped, and the value stays
// an extractive fallback until the conversation gets a new message, also after the
// quota resets at midnight. Here the fallback is written while the endpoint fails, then
// acme's quota is lowered in the file so the repair does not fit.
func TestReviewQuotaDeclineKeepsTheRepairQueued(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Status = 500 })
	file := filepath.Join(t.TempDir(), "tenants.json")
	write := func(quota int) {
		body := fmt.Sprintf(`{"tenants": {"acme": {"policy": {"llm_base_url": %q, "llm_api_key_env": "ACME_KEY"},
			"quotas": {"summarizer_tokens_per_day": %d}}}}`, llm.URL()+"/v1", quota)
		writeFile(t, file, body)
	}
	write(1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := map[string]string{"ACME_KEY": "k-acme"}
	logs := &logLines{t: t}
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, logs, func(k string) (string, bool) { v, ok := keys[k]; return v, ok })
	defer func() { _ = stop() }()
	acme := tenantStore(ctx, t, nc, "acme")
	cl := pipeline.NewWithStore(nc, acme)
	publishTurns(ctx, t, cl, "c1", 40, 10)
	waitFor(ctx, t, "acme's c1 on a fallback", func() bool {
		v, _, err := acme.Results().Get(ctx, "c1", false)
		return err == nil && v != nil && v.Generation > 0 && v.NeedsRepair()
	})
	write(100)
	llm.Set(func(f *fakellm.LLM) { f.Status = 0 })
	// The repair over the quota is handed back to the queue (logged as a failed attempt
	// naming the quota), not declined.
	waitFor(ctx, t, "the repair held by the quota", func() bool { return logs.has("quota: tenant acme used") })
	if v, _, err := acme.Results().Get(ctx, "c1", true); err != nil || v == nil || !v.NeedsRepair() {
		t.Fatalf("acme's c1 after its repair was held: %+v, %v; want the fallback, still to repair", v, err)
	}
	p, err := acme.Queue().Pending(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		v, _, _ := acme.Results().Get(ctx, "c1", false)
		t.Fatalf("acme's c1 is on a fallback (needs repair %v) and its repair request is gone: the quota's decline acked it; "+
			"nothing repairs the value until a new message", v.NeedsRepair())
	}
}

// Review of issue 21: the day's token count lives in the deployment bucket, which
// provisioning treats as optional (a user that may not create it leaves it missing,
// "what it holds is off until an admin provisions"). Without it the quota is silently
// off: TokensUsed reads no count as 0, AddTokensUsed's failure is only logged ("not
// counted"), and a tenant over its summarizer_tokens_per_day compacts on.
func TestReviewQuotaWithoutTheDeploymentBucket(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	// One compaction (~3800 tokens) fits; a second after it does not.
	body := fmt.Sprintf(`{"tenants": {"acme": {"policy": {"llm_base_url": %q}, "quotas": {"summarizer_tokens_per_day": 5000}}}}`, llm.URL()+"/v1")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, &logLines{t: t}, nil)
	defer func() { _ = stop() }()
	acme := tenantStore(ctx, t, nc, "acme")
	waitFor(ctx, t, "acme's service", func() bool { return answers(nc, "compactor.acme.status") })
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "KV_"+acme.Config().DeploymentBucket); err != nil {
		t.Fatal(err)
	}
	cl := pipeline.NewWithStore(nc, acme)
	for _, conv := range []string{"c1", "c2"} {
		publishTurns(ctx, t, cl, conv, 40, 10)
		waitFor(ctx, t, "acme's "+conv+" compacted or declined", func() bool {
			v, _, err := acme.Results().Get(ctx, conv, false)
			return err == nil && v != nil && (v.Generation > 0 || v.DeclinedAtSeq > 0)
		})
	}
	v, _, err := acme.Results().Get(ctx, "c2", false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Generation > 0 && !v.Fallback { // a fallback past the hard limit spends no token
		t.Fatalf("acme's quota of 5000 tokens a day compacted c1 (~3800 tokens) and then c2 too: without the (optional) deployment " +
			"bucket no token is counted and the quota is off, said only in a warning")
	}
}
