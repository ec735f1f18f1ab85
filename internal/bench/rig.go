package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

// rig is one measurement's namespace on the server: its own streams, buckets and
// consumers (every name prefixed), a connection, and the store over them.
type rig struct {
	ns    string
	url   string
	cfg   jetstream.Config
	nc    *nats.Conn
	js    natsjs.JetStream
	store *jetstream.Store
	conns []*nats.Conn
}

var rigs atomic.Int64

// newRig provisions a fresh namespace with the trigger unpartitioned.
func newRig(ctx context.Context, url string) (*rig, error) { return newRigParts(ctx, url, 1) }

// benchHeartbeat is a partitioned trigger's heartbeat in the bench: short, so the
// membership answers soon; long enough (a member lives 3 of them) that a busy two-core
// machine does not drop a member in the middle of a measurement.
const benchHeartbeat = 500 * time.Millisecond

// newRigParts provisions a fresh namespace whose trigger has partitions partitions:
// a stream-level setting (CHAT's and ACTIVITY's subject transforms, the consumers), so
// every layout measured gets a namespace of its own.
func newRigParts(ctx context.Context, url string, partitions int) (*rig, error) {
	// Fixed width and a terminator: no namespace is a substring of another, so close
	// deletes only its own streams.
	ns := fmt.Sprintf("bench%06d%03dx", time.Now().UnixNano()/1e3%1e6, rigs.Add(1)%1000)
	cfg := configFor(ns)
	cfg.TriggerPartitions, cfg.TriggerHeartbeat = partitions, benchHeartbeat
	r := &rig{ns: ns, url: url, cfg: cfg}
	nc, err := r.conn("bench")
	if err != nil {
		return nil, err
	}
	r.nc = nc
	if r.js, err = natsjs.New(nc); err != nil {
		r.close()
		return nil, err
	}
	if r.store, err = jetstream.Provision(ctx, nc, cfg); err != nil {
		r.close()
		return nil, fmt.Errorf("provision: %w", err)
	}
	return r, nil
}

// configFor is the jetstream config of namespace ns: every name of the contract
// prefixed with it.
func configFor(ns string) jetstream.Config {
	cfg := jetstream.DefaultConfig()
	cfg.Names = jetstream.NamespacedNames(ns)
	return cfg
}

// conn opens one more connection, closed with the rig: a second worker pool or
// trigger gets its own, as a second process would.
func (r *rig) conn(name string) (*nats.Conn, error) {
	nc, err := natsconn.Connect(r.url, name, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	r.conns = append(r.conns, nc)
	return nc, nil
}

// storeOn opens the rig's store over another connection.
func (r *rig) storeOn(ctx context.Context, name string) (*nats.Conn, *jetstream.Store, error) {
	nc, err := r.conn(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := jetstream.Open(ctx, nc, r.cfg)
	return nc, st, err
}

// startRole builds a node of one role on its own connection, as a process of that role
// would be, with the bench's fixed policy, and runs it until the returned stop.
func (r *rig) startRole(ctx context.Context, name string, cfg node.Config) (*node.Node, func() error, error) {
	nc, st, err := r.storeOn(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	n, err := node.New(cfg, nc, st)
	if err != nil {
		return nil, nil, err
	}
	return n, n.Start(ctx), nil
}

// close deletes the namespace's streams (buckets are streams too) and closes the
// connections.
func (r *rig) close() {
	if r.js != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range r.cfg.Names.Streams() { // exactly its own, nothing that looks like them
			_ = r.js.DeleteStream(ctx, n)
		}
	}
	for _, nc := range r.conns {
		nc.Close()
	}
	r.js, r.conns = nil, nil // a second close does nothing
}

func (r *rig) client() *pipeline.Client { return pipeline.NewWithStore(r.nc, r.store) }

// fixedPolicy gives every conversation the same settings.
type fixedPolicy policy.Settings

func (f fixedPolicy) Settings(context.Context, string) (policy.Settings, error) {
	return policy.Settings(f), nil
}

// settings are the bench's policy: the defaults with a window of w tokens.
func settings(w int) policy.Settings {
	s := policy.Defaults()
	s.ContextWindow = w
	return s
}

// startTrigger runs a real trigger on its own connection until the returned stop.
func (r *rig) startTrigger(ctx context.Context, s policy.Settings) (*triggers.Trigger, func() error, error) {
	n, stop, err := r.startRole(ctx, "bench-trigger",
		node.Config{Roles: node.Roles{Trigger: true}, Trigger: triggerConfig(), Policies: fixedPolicy(s), Logger: zerolog.Nop()})
	if err != nil {
		return nil, nil, err
	}
	return n.Trigger().(*triggers.Trigger), stop, nil
}

func triggerConfig() triggers.Config {
	cfg := triggers.DefaultConfig()
	cfg.RetryDelay = 200 * time.Millisecond
	return cfg
}

// triggerLayout is how the trigger runs: its partitions, over how many processes.
type triggerLayout struct{ partitions, processes int }

func (l triggerLayout) String() string {
	return fmt.Sprintf("%d partition(s) in %d trigger process(es)", l.partitions, l.processes)
}

// triggerLayouts are the layouts the trigger figures are measured in: today's single
// partition, 4 partitions in one process, and the same 4 shared by two processes.
var triggerLayouts = []triggerLayout{{1, 1}, {4, 1}, {4, 2}}

// triggerSet is the trigger of one layout, running.
type triggerSet struct {
	one   *triggers.Trigger      // the unpartitioned trigger
	parts []*triggers.Partitions // else one per process
	stops []func() error
}

func (ts *triggerSet) stop() {
	for _, stop := range ts.stops {
		_ = stop()
	}
}

// ownedOnce reports whether every partition is owned by exactly one process.
func (ts *triggerSet) ownedOnce(n int) bool {
	owners := make([]int, n)
	for _, ps := range ts.parts {
		for _, p := range ps.Owned() {
			owners[p]++
		}
	}
	for _, c := range owners {
		if c != 1 {
			return false
		}
	}
	return true
}

// startTriggers runs the rig's trigger as processes processes, each on its own
// connection as separate processes would be: the trigger itself when the rig is
// unpartitioned, else one triggers.Partitions each. Their member ids are announced in
// the triggers bucket before they start, as processes already running would have, so
// each one's first heartbeat already reads every member and takes only its own share:
// no partition starts in one process and moves to the other. The set is returned once
// every partition is owned by exactly one of them.
func (r *rig) startTriggers(ctx context.Context, s policy.Settings, processes int) (*triggerSet, error) {
	ts := &triggerSet{}
	if r.cfg.TriggerPartitions == 1 {
		if processes != 1 {
			return nil, fmt.Errorf("an unpartitioned trigger is active in one process, not %d", processes)
		}
		t, stop, err := r.startTrigger(ctx, s)
		if err != nil {
			return nil, err
		}
		ts.one, ts.stops = t, []func() error{stop}
		return ts, nil
	}
	ms, err := r.store.Membership(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, processes)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-trigger-%d", r.ns, i)
		if err := ms.Announce(ctx, ids[i]); err != nil {
			return nil, err
		}
	}
	for i, id := range ids {
		n, stop, err := r.startRole(ctx, fmt.Sprintf("bench-trigger-%d", i), node.Config{Roles: node.Roles{Trigger: true},
			Trigger: triggerConfig(), Policies: fixedPolicy(s), MemberID: id, Logger: zerolog.Nop()})
		if err != nil {
			ts.stop()
			return nil, err
		}
		ts.parts = append(ts.parts, n.Trigger().(*triggers.Partitions))
		ts.stops = append(ts.stops, stop)
	}
	if err := wait(ctx, time.Minute, "every trigger partition to be owned by one process", func() bool {
		return ts.ownedOnce(r.cfg.TriggerPartitions)
	}); err != nil {
		ts.stop()
		return nil, err
	}
	return ts, nil
}

// triggerConsumers are the trigger's consumers on CHAT, one per partition.
func (r *rig) triggerConsumers(ctx context.Context) ([]natsjs.Consumer, error) {
	var out []natsjs.Consumer
	for _, p := range r.cfg.Partitions() {
		c, err := r.js.Consumer(ctx, r.cfg.ChatStream, r.cfg.TriggerConsumerOf(p))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// drained reports whether the trigger acknowledged every message stored so far: no
// partition's consumer has any left to deliver or any delivered and unacknowledged. It
// stops at the first that has, so a poll while the trigger works costs one request.
func drained(ctx context.Context, cons []natsjs.Consumer) bool {
	for _, c := range cons {
		ci, err := c.Info(ctx)
		if err != nil || ci.NumPending > 0 || ci.NumAckPending > 0 {
			return false
		}
	}
	return true
}

// lag is the messages stored that the trigger has not acknowledged yet, over every
// partition.
func lag(ctx context.Context, cons []natsjs.Consumer) (int, error) {
	n := 0
	for _, c := range cons {
		ci, err := c.Info(ctx)
		if err != nil {
			return 0, err
		}
		n += int(ci.NumPending) + ci.NumAckPending
	}
	return n, nil
}

// startPool runs a real summarizer pool of slots workers on its own connection,
// summarizing with sum.
func (r *rig) startPool(ctx context.Context, s policy.Settings, slots int, sum summary.Summarizer) (func() error, error) {
	_, stop, err := r.startRole(ctx, "bench-worker", poolConfig(s, slots, sum))
	return stop, err
}

// poolConfig is the bench's worker node: slots workers summarizing with sum.
func poolConfig(s policy.Settings, slots int, sum summary.Summarizer) node.Config {
	cfg := summarizer.DefaultConfig()
	cfg.Workers = slots
	cfg.BackoffBase = 100 * time.Millisecond
	cfg.BackoffMax = time.Second
	cfg.DrainTimeout = 10 * time.Second
	return node.Config{Roles: node.Roles{Worker: true}, Summarizer: cfg, Policies: fixedPolicy(s),
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil },
		Logger:      zerolog.Nop()}
}

// fakeLLM is an OpenAI-compatible endpoint that answers after delay with a summary of
// about summaryTokens tokens, spoken to by the real go-openai client (llm.Summarizer).
type fakeLLM struct {
	srv   *httptest.Server
	delay time.Duration
	reply string
	calls atomic.Int64
}

func newFakeLLM(delay time.Duration, summaryTokens int) *fakeLLM {
	f := &fakeLLM{delay: delay}
	var b strings.Builder
	b.WriteString("## Goal\nContinue the task.\n## Facts and identifiers\n")
	for b.Len() < summaryTokens*4 {
		b.WriteString("- the build of service api passed after fixing the import path in parser.go\n")
	}
	f.reply = b.String()
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.calls.Add(1)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return
		}
	}
	resp := map[string]any{
		"id": "cmpl-bench", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": f.reply}}},
		"usage": map[string]int{"prompt_tokens": 1000, "completion_tokens": len(f.reply) / 4, "total_tokens": 1000 + len(f.reply)/4},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *fakeLLM) close() { f.srv.Close() }

// summarizer is the real go-openai summarizer against f, timed: llmTime adds up the
// time spent in its calls.
func (f *fakeLLM) summarizer() (*timedSummarizer, error) { return llmSummarizer(f.srv.URL) }

// llmSummarizer is the real go-openai summarizer against the endpoint at url, timed.
func llmSummarizer(url string) (*timedSummarizer, error) {
	s, err := llm.New(llm.Config{BaseURL: url + "/v1", APIKey: "bench", Model: "bench-model", Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	return &timedSummarizer{next: s}, nil
}

type timedSummarizer struct {
	next  summary.Summarizer
	nanos atomic.Int64
	calls atomic.Int64
}

func (t *timedSummarizer) Summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	start := time.Now()
	out, err := t.next.Summarize(ctx, in)
	t.nanos.Add(int64(time.Since(start)))
	t.calls.Add(1)
	return out, err
}

func (t *timedSummarizer) llmTime() time.Duration { return time.Duration(t.nanos.Load()) }
