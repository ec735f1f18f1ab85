package summarizer_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/llm"
)

// outageLLM is an OpenAI-compatible endpoint that answers 500 while down, and
// otherwise a summary that lists every needle of the request; it keeps the bodies of
// the requests it answered.
type outageLLM struct {
	down atomic.Bool

	mu       sync.Mutex
	answered []string
}

func newOutageLLM(t *testing.T) (*outageLLM, *llm.Summarizer) {
	t.Helper()
	o := &outageLLM{}
	o.down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if o.down.Load() {
			http.Error(w, `{"error":{"message":"upstream down","type":"server_error"}}`, http.StatusInternalServerError)
			return
		}
		o.mu.Lock()
		o.answered = append(o.answered, string(body))
		o.mu.Unlock()
		found := needleRE.FindAllString(string(body), -1)
		slices.Sort(found)
		summaryOf(w, "Facts: "+strings.Join(slices.Compact(found), " "))
	}))
	t.Cleanup(srv.Close)
	sum, err := llm.New(llm.Config{BaseURL: srv.URL, APIKey: "sk-test", Model: "m", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return o, sum
}

func (o *outageLLM) bodies() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.answered)
}

// needleMessages publishes n messages of 1,600 characters (400 tokens), user and
// assistant in turn, each starting with its needle NEEDLE-<tag><i>; it returns the
// last sequence and the needle of each sequence.
func needleMessages(t *testing.T, ctx context.Context, st *jetstream.Store, conv, tag string, first, n int, bySeq map[uint64]string) uint64 {
	t.Helper()
	var last uint64
	for i := first; i < first+n; i++ {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		needle := fmt.Sprintf("NEEDLE-%s%d", tag, i)
		text := needle + " " + strings.Repeat("w", 1600-len(needle)-1)
		m := schemas.Message{Role: role, Content: schemas.Text(text)}
		data, _ := m.Encode()
		var err error
		if last, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
		bySeq[last] = needle
	}
	return last
}

// repairReports keeps the pool's reports of deliveries that tried a repair.
type repairReports struct {
	mu   sync.Mutex
	reps []summarizer.JobReport
	at   []time.Time
}

func (r *repairReports) JobDone(rep summarizer.JobReport) {
	if rep.Repair == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reps = append(r.reps, rep)
	r.at = append(r.at, time.Now())
}

func (r *repairReports) snapshot() ([]summarizer.JobReport, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reps), slices.Clone(r.at)
}

// waitValue polls the conversation's value until ok says it is the one awaited.
func waitValue(t *testing.T, ctx context.Context, st *jetstream.Store, conv, what string, ok func(*schemas.Result) bool) *schemas.Result {
	t.Helper()
	for {
		v, _, err := st.Results().Get(ctx, conv, true)
		if err == nil && v != nil && ok(v) {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never came; the value is %+v (%v)", what, v, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// repairPool runs a pool of one worker with short backoffs and two attempts.
func repairPool(t *testing.T, st *jetstream.Store, sum summarizer.Summarizer, obs summarizer.Observer) {
	t.Helper()
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, 2, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, 10*time.Second
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{}, Observer: obs,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
}

// Issue 18: a fallback summary written while the LLM was down is repaired once it
// answers again, with no new message: the request stays queued and is tried again with
// a growing backoff (past the attempts of a plain request, never dead-lettered); a
// fallback on top of a fallback (a second outage past the hard limit) is repaired as a
// whole; the repair has the LLM summarize the raw messages, never the fallback's text,
// and writes a new generation that says what it repaired.
func TestFallbackIsRepairedOnceTheLLMAnswers(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, sum := newOutageLLM(t)
	obs := &repairReports{}
	needles := map[uint64]string{}
	last := needleMessages(t, ctx, st, "heal", "a", 0, 10, needles) // past the hard limit
	repairPool(t, st, sum, obs)
	req := request(t, ctx, st, "heal", last)
	if ev, err := st.Events().WaitOutcome(ctx, "heal", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "heal", true)
	if err != nil || v1 == nil {
		t.Fatal(v1, err)
	}
	b, _ := window4000{}.Settings(ctx, "heal")
	if !v1.Fallback || !v1.BuiltOnFallback || v1.RepairOf != 0 {
		t.Fatalf("first value fallback %v built_on_fallback %v repair_of %d; want a fallback that says so", v1.Fallback, v1.BuiltOnFallback, v1.RepairOf)
	}
	// The fallback keeps the bound: the context shrinks, below the hard limit.
	if hard := b.Budget().HardLimitTokens(); v1.TokensAfter >= v1.TokensBefore || v1.TokensAfter >= hard {
		t.Fatalf("fallback context %d tokens from %d; want it smaller, and under the hard limit %d", v1.TokensAfter, v1.TokensBefore, hard)
	}

	// A second outage past the hard limit: the pending repair's next delivery keeps the
	// bound with a fallback built on the first.
	needleMessages(t, ctx, st, "heal", "b", 10, 8, needles)
	v2 := waitValue(t, ctx, st, "heal", "a second fallback", func(v *schemas.Result) bool { return v.Generation == v1.Generation+1 })
	if !v2.Fallback || !v2.BuiltOnFallback || v2.CoveredThroughSeq <= v1.CoveredThroughSeq {
		t.Fatalf("second value %+v; want a fallback beyond the first, built on it", v2)
	}

	// While the LLM is down the repair is retried with a growing backoff, past the two
	// attempts a plain request has, and only one request waits for the conversation.
	for {
		reps, _ := obs.snapshot()
		if len(reps) >= 6 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d repair attempts while the LLM was down; want at least 6", len(reps))
		case <-time.After(20 * time.Millisecond):
		}
	}
	waitQueued(t, ctx, st, "heal", req.RequestID)
	up := time.Now()
	o.down.Store(false)
	ev, err := st.Events().WaitOutcome(ctx, "heal", req.RequestID, up)
	if err != nil || ev.Type != schemas.EventCompleted || ev.RepairOf != v2.Generation || ev.Error != "" {
		t.Fatalf("repair outcome %+v, %v; want completed, repair_of %d, no error", ev, err, v2.Generation)
	}
	v3, _, err := st.Results().Get(ctx, "heal", true)
	if err != nil || v3 == nil {
		t.Fatal(v3, err)
	}
	// The LLM wrote it, and the value says so.
	if v3.Generation != v2.Generation+1 || v3.RepairOf != v2.Generation || v3.Fallback || v3.BuiltOnFallback ||
		v3.Model != "m" || v3.LLMBaseGeneration != v3.Generation {
		t.Fatalf("repaired value generation %d repair_of %d fallback %v built_on_fallback %v model %q llm_base %d; want generation %d repairing %d, by the LLM",
			v3.Generation, v3.RepairOf, v3.Fallback, v3.BuiltOnFallback, v3.Model, v3.LLMBaseGeneration, v2.Generation+1, v2.Generation)
	}
	// Every message it covers is back, from both fallbacks, not only the oldest.
	for seq, needle := range needles {
		if seq <= v3.CoveredThroughSeq && !slices.Contains(v3.PinnedSeqs, seq) && !strings.Contains(v3.Summary, needle) {
			t.Errorf("the repaired summary lacks %s (seq %d): %s", needle, seq, v3.Summary)
		}
	}
	// No prompt held the fallback's text.
	for _, body := range o.bodies() {
		if strings.Contains(body, extractive.HeaderPrefix) {
			t.Fatalf("a request to the LLM holds the fallback's text: %.300s", body)
		}
	}
	// The report follows the outcome's event.
	reps, _ := obs.snapshot()
	for reps[len(reps)-1].Repair == summarizer.RepairFailed {
		select {
		case <-ctx.Done():
			t.Fatal("no report of the repair")
		case <-time.After(20 * time.Millisecond):
		}
		reps, _ = obs.snapshot()
	}
	// Each failed repair is handed back for the backoff of its attempt, doubling from
	// the base (100 ms) up to 8 × the base, jittered by ±25%: past MaxAttempts (2) too,
	// and never dead-lettered.
	var waits []time.Duration
	for _, r := range reps {
		if r.Repair != summarizer.RepairFailed || r.Outcome != summarizer.OutcomeRetried {
			continue
		}
		waits = append(waits, r.RetryIn)
		want := 100 * time.Millisecond << (min(r.Attempt, 4) - 1)
		if r.RetryIn < want*3/4 || r.RetryIn > want*5/4 {
			t.Errorf("attempt %d handed back for %s; want %s ±25%%", r.Attempt, r.RetryIn, want)
		}
	}
	if n := len(waits); n < 4 || reps[len(reps)-2].Attempt < 4 {
		t.Fatalf("waits after the failed repairs %v; want at least 4, up to the cap", waits)
	}
	if r := reps[len(reps)-1]; r.Repair != summarizer.RepairRepaired || r.Outcome != summarizer.OutcomeCompleted || r.Fallback {
		t.Fatalf("last report %+v; want a completed repair", r)
	}
	if p, err := st.Queue().Pending(ctx, "heal"); err != nil || p != nil && p.RequestID == req.RequestID {
		t.Fatalf("pending after the repair: %+v, %v; want the request done", p, err)
	}
}

// Issue 18: where the messages a fallback covers left CHAT, the repair keeps the
// fallback and says so (repair_gap on the value and its declined event), and its
// request is done.
func TestFallbackWithAGapStays(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, sum := newOutageLLM(t)
	obs := &repairReports{}
	last := needleMessages(t, ctx, st, "gap", "a", 0, 10, map[uint64]string{})
	repairPool(t, st, sum, obs)
	req := request(t, ctx, st, "gap", last)
	if ev, err := st.Events().WaitOutcome(ctx, "gap", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "gap", true)
	if err != nil || v1 == nil || !v1.BuiltOnFallback {
		t.Fatalf("value %+v, %v; want a fallback", v1, err)
	}
	waitQueued(t, ctx, st, "gap", req.RequestID)
	deleted := time.Now()
	js := testJetStream(t, nc)
	chat, err := js.Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.DeleteMsg(ctx, v1.FirstSeq); err != nil { // as the age limit would
		t.Fatal(err)
	}
	o.down.Store(false)
	ev, err := st.Events().WaitOutcome(ctx, "gap", req.RequestID, deleted)
	if err != nil || ev.Type != schemas.EventDeclined || !ev.RepairGap {
		t.Fatalf("repair outcome %+v, %v; want declined with repair_gap", ev, err)
	}
	v2, _, err := st.Results().Get(ctx, "gap", true)
	if err != nil || v2 == nil {
		t.Fatal(v2, err)
	}
	if !v2.RepairGap || !v2.BuiltOnFallback || v2.Generation != v1.Generation || v2.Summary != v1.Summary || v2.NeedsRepair() {
		t.Fatalf("value after the gap %+v; want the fallback kept, marked repair_gap", v2)
	}
	if len(o.bodies()) != 0 {
		t.Fatalf("%d LLM calls for a repair that cannot be made", len(o.bodies()))
	}
	reps, _ := obs.snapshot()
	for len(reps) == 0 || reps[len(reps)-1].Repair == summarizer.RepairFailed { // the report follows the event
		select {
		case <-ctx.Done():
			t.Fatal("no report of the gap")
		case <-time.After(20 * time.Millisecond):
		}
		reps, _ = obs.snapshot()
	}
	if r := reps[len(reps)-1]; r.Repair != summarizer.RepairGap || r.Outcome != summarizer.OutcomeDeclined {
		t.Fatalf("last report %+v; want repair gap", r)
	}
	if p, err := st.Queue().Pending(ctx, "gap"); err != nil || p != nil {
		t.Fatalf("pending after the gap: %+v, %v; want none", p, err)
	}
}

// A summary that is extractive because no LLM is configured is not a fallback to
// repair: its request is done.
func TestExtractiveWithoutAnLLMNeedsNoRepair(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := compactWith(t, ctx, st, "plain", extractive.New())
	if !v.Fallback || v.BuiltOnFallback || v.NeedsRepair() {
		t.Fatalf("value fallback %v built_on_fallback %v; want extractive, nothing to repair", v.Fallback, v.BuiltOnFallback)
	}
	if p, err := st.Queue().Pending(ctx, "plain"); err != nil || p != nil {
		t.Fatalf("pending %+v, %v; want none", p, err)
	}
}

// compactWith compacts ten messages of conv with sum and returns the value.
func compactWith(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, sum summarizer.Summarizer) *schemas.Result {
	t.Helper()
	last := needleMessages(t, ctx, st, conv, "a", 0, 10, map[uint64]string{})
	repairPool(t, st, sum, nil)
	req := request(t, ctx, st, conv, last)
	if ev, err := st.Events().WaitOutcome(ctx, conv, req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed", ev, err)
	}
	v, _, err := st.Results().Get(ctx, conv, true)
	if err != nil || v == nil {
		t.Fatal(v, err)
	}
	return v
}

// waitQueued waits until the work queue holds request id of conv: a request done with
// a fallback stays queued to repair it.
func waitQueued(t *testing.T, ctx context.Context, st *jetstream.Store, conv, id string) {
	t.Helper()
	for {
		p, err := st.Queue().Pending(ctx, conv)
		if err == nil && p != nil && p.RequestID == id {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pending request %+v, %v; want %s, kept for its repair", p, err, id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A repair summarizes the range its fallback covers again from CHAT: a message of that
// range lost since (a corrupted block, a delete on the stream) is a hole, not
// summarized over. The repair is declined naming it, the LLM is not called, and the
// fallback stays, with the hole recorded.
func TestARepairIsNotMadeAcrossAHole(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, sum := newOutageLLM(t)
	last := needleMessages(t, ctx, st, "holed-repair", "a", 0, 10, map[uint64]string{})
	repairPool(t, st, sum, &repairReports{})
	req := request(t, ctx, st, "holed-repair", last)
	if ev, err := st.Events().WaitOutcome(ctx, "holed-repair", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "holed-repair", true)
	if err != nil || v1 == nil || !v1.BuiltOnFallback || len(v1.Witnessed) == 0 || v1.CoveredThroughSeq < v1.FirstSeq+2 {
		t.Fatalf("value %+v, %v; want a fallback covering 3 messages or more, with what it read", v1, err)
	}
	waitQueued(t, ctx, st, "holed-repair", req.RequestID)
	lost := v1.FirstSeq + 2
	if slices.Contains(v1.PinnedSeqs, lost) {
		t.Fatalf("seq %d is pinned", lost)
	}
	chat, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.SecureDeleteMsg(ctx, lost); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	o.down.Store(false)
	ev, err := st.Events().WaitOutcome(ctx, "holed-repair", req.RequestID, deleted)
	if err != nil || ev.Type != schemas.EventDeclined || len(ev.Holes) != 1 || !slices.Equal(ev.Holes[0].Seqs, []uint64{lost}) {
		t.Fatalf("repair outcome %+v, %v; want declined naming the hole at seq %d", ev, err, lost)
	}
	if n := len(o.bodies()); n != 0 {
		t.Fatalf("%d LLM calls for a repair across a hole", n)
	}
	v2, _, err := st.Results().Get(ctx, "holed-repair", true)
	if err != nil || v2 == nil || v2.Generation != v1.Generation || v2.Summary != v1.Summary || len(v2.Holes) != 1 {
		t.Fatalf("value after the hole %+v, %v; want the fallback kept, the hole recorded", v2, err)
	}
}
