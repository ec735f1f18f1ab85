package systemtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas"
)

// viewGet asks the view at addr for path with the test token.
func viewGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, 30*time.Second), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+viewToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func viewJSON(t *testing.T, addr, path string, out any) {
	t.Helper()
	code, body := viewGet(t, addr, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// compactedConversation publishes a synthetic agent run into conv until the triggers
// have compacted it at least gens times with the fake LLM.
func compactedConversation(t *testing.T, s *stack, conv string, turns int, gens uint64) {
	t.Helper()
	msgs, _ := fakellm.NeedleConversation(turns)
	replay(t, s, conv, msgs, 0)
	eventually(t, time.Minute, fmt.Sprintf("generation %d of %s", gens, conv), func() bool {
		v, err := s.client.Result(ctxFor(t, 10*time.Second), conv)
		return err == nil && v != nil && v.Generation >= gens
	})
	settle(t, s)
}

// The api role serves the view with what the pipeline wrote: compactions by the real
// worker with the fake LLM show in the timeline with their model and duration, and the
// gauge is the context the Go client reads.
func TestViewServedByTheAPIRole(t *testing.T) {
	env := testEnv(t, 4000)
	env.ViewListen = "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	env.ViewToken = viewToken
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	compactedConversation(t, s, "viewed", 24, 2)

	var c view.Conversation
	viewJSON(t, env.ViewListen, "/api/c/viewed", &c)
	v, err := s.client.Result(ctxFor(t, 10*time.Second), "viewed")
	if err != nil {
		t.Fatal(err)
	}
	if c.Value == nil || c.Value.Generation != v.Generation {
		t.Fatalf("value %+v; want generation %d", c.Value, v.Generation)
	}
	compactions := 0
	for _, e := range c.Timeline {
		if e.Kind != view.KindCompaction {
			continue
		}
		compactions++
		if e.Model != "gpt-4o-mini-fake" || e.Fallback || e.DurationMS == nil || e.Trigger == "" || e.TokensAfter >= e.TokensBefore {
			t.Errorf("compaction entry %+v; want the fake model, a duration and fewer tokens after", e)
		}
		if e.Folded == nil || e.Folded.Through != e.TailStartSeq-1 {
			t.Errorf("generation %d folded %+v; want a range ending at %d", e.Generation, e.Folded, e.TailStartSeq-1)
		}
	}
	if compactions < 2 {
		t.Errorf("%d compactions in the timeline: %+v", compactions, c.Timeline)
	}
	cx, err := s.client.Context(ctxFor(t, 10*time.Second), "viewed", pipeline.Raw())
	if err != nil {
		t.Fatal(err)
	}
	if c.Gauge.Tokens != cx.Tokens || c.Gauge.ContextWindow != 4000 || c.Gauge.ThresholdTokens != 3000 {
		t.Errorf("gauge %+v; want %d tokens of 4000, threshold 3000", c.Gauge, cx.Tokens)
	}
	if c.Context.Summary == nil || !strings.Contains(c.Context.Summary.Text, "NEEDLE-000x") {
		t.Errorf("summary %+v; want the fake LLM's, with the first needle", c.Context.Summary)
	}
	code, page := viewGet(t, env.ViewListen, "/c/viewed")
	if code != http.StatusOK || !strings.Contains(page, `id="gauge"`) || !strings.Contains(page, "gpt-4o-mini-fake") {
		t.Errorf("page: %d\n%.2000s", code, page)
	}
	var l view.List
	viewJSON(t, env.ViewListen, "/api/conversations", &l)
	if len(l.Conversations) != 1 || l.Conversations[0].Conversation != "viewed" || l.Conversations[0].Gauge == nil ||
		l.Conversations[0].Gauge.Tokens != cx.Tokens {
		t.Errorf("list %+v", l)
	}
}

// The view reads with the api user of deploy/nats/accounts.conf only: every page
// answers, and the server reports no permissions violation.
func TestViewAsTheAPIUserOfAccountsConf(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	ctx := ctxFor(t, time.Minute)
	admin := connect("admin")
	ast, err := jetstream.Provision(ctx, admin.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline's writes, made by the admin here: messages, two generations and a
	// decline, their events, a failure.
	var seqs []uint64
	for i := range 10 {
		seq, err := ast.Chat().Publish(ctx, "acct", fmt.Appendf(nil, `{"role":"user","content":"message %d"}`, i), "")
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	rev := uint64(0)
	for gen := uint64(1); gen <= 2; gen++ {
		r := &schemas.Result{SchemaVersion: 1, Conversation: "acct", Generation: gen, Summary: fmt.Sprint("summary ", gen),
			TailStartSeq: seqs[gen*3], CoveredThroughSeq: seqs[gen*3] - 1, RequestID: fmt.Sprint("r", gen), Model: "m",
			CreatedAt: time.Now().UTC()}
		if rev, err = ast.Results().Put(ctx, r, rev); err != nil {
			t.Fatal(err)
		}
		if err := ast.Events().Publish(ctx, schemas.Event{Type: schemas.EventCompleted, Conversation: "acct", RequestID: r.RequestID,
			Generation: gen, DurationMS: 1234, At: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ast.Events().Publish(ctx, schemas.Event{Type: schemas.EventFailed, Conversation: "acct", RequestID: "r3",
		Generation: 2, Error: "down", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	// The proxy's ledger: one exchange, sent and done.
	for _, phase := range []string{schemas.LedgerSent, schemas.LedgerDone} {
		e := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: "acct-exchange-0001", Phase: phase, At: time.Now().UTC(), Conversation: "acct",
			Mode: schemas.LedgerShadow, API: "openai", Model: "m", ClientTokens: 9000, CompactedTokens: 3000}
		if phase == schemas.LedgerDone {
			e.Status, e.Usage = 200, &schemas.LedgerUsage{Input: 9000, Output: 10}
		}
		if err := ast.Ledger().Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}

	api := connect("api")
	st, err := jetstream.Provision(ctx, api.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, 8000)
	env.Roles = "api"
	env.ViewListen = "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	env.ViewToken = viewToken
	runStack(t, api.NC, st, env, nil)

	var l view.List
	viewJSON(t, env.ViewListen, "/api/conversations", &l)
	if len(l.Conversations) != 1 || l.Conversations[0].Generation != 2 || l.Conversations[0].Gauge == nil {
		t.Errorf("list as api: %+v", l)
	}
	var c view.Conversation
	viewJSON(t, env.ViewListen, "/api/c/acct", &c)
	var kinds []string
	for _, e := range c.Timeline {
		kinds = append(kinds, e.Kind)
		if e.DurationMS == nil {
			t.Errorf("entry %+v has no duration: the events were not read", e)
		}
	}
	if strings.Join(kinds, ",") != "failed,compaction,compaction" || len(c.Notes) != 0 || c.Context.Summary == nil {
		t.Errorf("conversation as api: timeline %v notes %v", kinds, c.Notes)
	}
	var m view.Messages
	viewJSON(t, env.ViewListen, fmt.Sprintf("/api/c/acct/messages?from=1&through=%d", seqs[5]), &m)
	if len(m.Messages) != 6 {
		t.Errorf("messages as api: %+v", m)
	}
	var sv struct {
		ByDay *savings.Report `json:"by_day"`
	}
	viewJSON(t, env.ViewListen, "/api/savings", &sv)
	if sv.ByDay.Total.Exchanges != 1 || sv.ByDay.Total.SavedTokens != 6000 {
		t.Errorf("savings as api: %+v", sv.ByDay.Total)
	}
	for _, path := range []string{"/", "/c/acct", "/c/acct/messages?from=1", "/savings"} {
		if code, body := viewGet(t, env.ViewListen, path); code != http.StatusOK {
			t.Errorf("%s as api: %d\n%.500s", path, code, body)
		}
	}
	if v := api.Violations(); v != "" {
		t.Errorf("the api user was refused:\n%s", v)
	}
}
