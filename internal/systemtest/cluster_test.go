package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// The pipeline on a real 3-node JetStream cluster with every stream, bucket and
// consumer at 3 replicas: what a deployment with COMPACTOR_REPLICAS=3 relies on.

// clusterReplicas is what a production deployment sets COMPACTOR_REPLICAS to.
const clusterReplicas = 3

func TestClusterNeedlesSurviveManyGenerations(t *testing.T) {
	start := time.Now()
	cluster := jstest.StartCluster(t, 3)
	t.Logf("3-node cluster ready in %s", time.Since(start).Round(time.Millisecond))
	env := testEnv(t, 4000)
	env.Replicas = clusterReplicas
	llm := fakellm.New(t)
	nc := connectTo(t, cluster, nil, "compactor")
	st := provisionCluster(t, nc, env.jetstream())
	checkReplicas(t, nc, st.Config(), clusterReplicas)
	s := runStack(t, nc, st, env, llm)

	const conv = "cluster-needles"
	msgs, needles := fakellm.NeedleConversation(30)
	h := watchValues(t, s, conv)
	replayStart := time.Now()
	replay(t, s, conv, msgs, 0) // reads every publish back with AtLeastSeq (invariant 8)
	settle(t, s)
	var cx *pipeline.Context
	eventually(t, 30*time.Second, "the context to fall under the threshold", func() bool {
		var err error
		cx, err = s.client.Context(ctxFor(t, 10*time.Second), conv)
		return err == nil && cx.Tokens < env.budget().ThresholdTokens()
	})
	cur, _, err := st.Results().Get(ctxFor(t, 10*time.Second), conv, true)
	if err != nil || cur == nil {
		t.Fatalf("current value: %v, %v", cur, err)
	}
	eventually(t, 20*time.Second, "the value watcher to see the current value", func() bool {
		vs := h.snapshot()
		return len(vs) > 0 && vs[len(vs)-1].RequestSeq == cur.RequestSeq && vs[len(vs)-1].Generation == cur.Generation
	})
	values := h.snapshot()
	if cur.Generation < 3 {
		t.Fatalf("only %d generations for %d messages; the test needs several", cur.Generation, len(msgs))
	}
	invariants(t, s, conv, env, values, llm)
	checkNeedles(t, cx, needles, cur.Generation)
	t.Logf("%d messages, %d generations, replayed and settled in %s", len(msgs), cur.Generation, time.Since(replayStart).Round(time.Millisecond))
}

// The server that leads CHAT, the results bucket and the workers' consumer, and that
// both the compactor and a client are connected to, goes away mid-replay while a
// compaction is in flight: shut down (it hands its leaderships over first) or crashed
// (cut off first, so the others elect new leaders once its heartbeats stop). Publishing
// resumes, every publish is stored once and read back at once, compaction goes on, and
// no generation is lost or made twice.
func TestClusterLeaderFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(c *jstest.Cluster, s *server.Server)
		// workerAckWait, when set, replaces the default (1m): a request whose nak is
		// lost with the consumer's leader is redelivered only after it.
		workerAckWait time.Duration
	}{
		{name: "shutdown", kill: func(_ *jstest.Cluster, s *server.Server) { s.Shutdown(); s.WaitForShutdown() }},
		{name: "crash", kill: (*jstest.Cluster).Crash, workerAckWait: 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, 4000)
			env.Replicas = clusterReplicas
			cfg := env.jetstream()
			// The watchers must see every revision: one that resumes after the election
			// reads what the bucket still holds, so it keeps them all (a loaded machine
			// can take seconds to resume, while compactions go on).
			cfg.ResultHistory = 64
			if tc.workerAckWait > 0 {
				cfg.WorkerAckWait = tc.workerAckWait
			}
			testFailover(t, env, cfg, tc.kill)
		})
	}
}

func testFailover(t *testing.T, env stackEnv, cfg jetstream.Config, kill func(*jstest.Cluster, *server.Server)) {
	start := time.Now()
	cluster := jstest.StartCluster(t, 3)
	t.Logf("3-node cluster ready in %s", time.Since(start).Round(time.Millisecond))
	llm := fakellm.New(t)
	// Slow enough that a compaction is in flight when the server goes.
	llm.Set(func(f *fakellm.LLM) { f.Delay = 300 * time.Millisecond })

	admin := cluster.Conn(t)
	adminSt := provisionCluster(t, admin, cfg)
	js := jsFor(t, admin)
	adminKV := resultsFor(t, admin, cfg)
	kvStream := "KV_" + cfg.ResultsBucket
	victimName := streamLeader(t, js, cfg.ChatStream)
	moveLeader(t, admin, kvStream, victimName, func() (string, error) { return currentLeader(js, kvStream) })
	moveLeader(t, admin, cfg.RequestsStream+"."+cfg.WorkerConsumer, victimName, func() (string, error) {
		return consumerLeader(js, cfg.RequestsStream, cfg.WorkerConsumer)
	})
	victim := cluster.Server(victimName)

	compNC := connectTo(t, cluster, victim, "compactor")
	runStack(t, compNC, provisionCluster(t, compNC, cfg), env, llm)
	clientNC := connectTo(t, cluster, victim, "client")
	clientSt, err := jetstream.Open(ctxFor(t, 10*time.Second), clientNC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := pipeline.NewWithStore(clientNC, clientSt)
	reader := &stack{nc: clientNC, st: clientSt, client: client} // runs no roles

	const conv = "cluster-failover"
	msgs, needles := fakellm.NeedleConversation(40)
	vlog := &valueLog{values: map[uint64]*schemas.Result{}}
	vlog.watch(t, adminKV, conv, natsjs.UpdatesOnly())
	generation := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, _, err := adminSt.Results().Get(ctx, conv, true)
		if err != nil || v == nil {
			return 0
		}
		return v.Generation
	}

	// Before: publish, every message read back at once, until two generations were
	// written. How many messages that takes depends on how fast the workers are next to
	// the publisher, so the test publishes until it sees them, not a fixed share.
	var seqs []uint64
	i := 0
	for ; i < len(msgs)/2 && generation() < 2; i++ {
		seq, _ := publishRetrying(t, clientSt, client, conv, i, msgs[i], 0)
		readBack(t, client, conv, seq, msgs[i], 0)
		seqs = append(seqs, seq)
	}
	proctest.WaitFor(t, 30*time.Second, "two generations before the failure", func() error {
		if g := generation(); g < 2 {
			return fmt.Errorf("generation %d after %d LLM calls and %d messages", g, llm.Calls(), i)
		}
		return nil
	})
	// Go on until the LLM works on a generation not written yet, then take the victim
	// down.
	inFlight := func() bool { return llm.Calls() > int(generation()) }
	for ; i < 2*len(msgs)/3 && !inFlight(); i++ {
		seq, _ := publishRetrying(t, clientSt, client, conv, i, msgs[i], 0)
		readBack(t, client, conv, seq, msgs[i], 0)
		seqs = append(seqs, seq)
	}
	genAtKill := generation()
	t.Logf("taking down %s (leader of %s, %s and %s, server of both connections) after %d of %d messages at generation %d, compaction in flight: %v",
		victimName, cfg.ChatStream, kvStream, cfg.WorkerConsumer, i, len(msgs), genAtKill, inFlight())
	killed := time.Now()
	kill(cluster, victim)
	// A second watcher, with the history the bucket keeps: the first one's consumer
	// lived on the bucket's leader and is gone with it.
	var stopWatch func()
	var watchErr error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		stopWatch, watchErr = vlog.tryWatch(adminKV, conv, natsjs.IncludeHistory())
	}()
	t.Cleanup(func() {
		<-watched
		if stopWatch != nil {
			stopWatch()
		}
	})

	// After: every publish is retried until it is stored, and read back at once.
	var resumed time.Duration
	var failed []error
	for ; i < len(msgs); i++ {
		seq, errs := publishRetrying(t, clientSt, client, conv, i, msgs[i], 30*time.Second)
		if resumed == 0 {
			resumed = time.Since(killed)
		}
		failed = append(failed, errs...)
		failed = append(failed, readBack(t, client, conv, seq, msgs[i], 15*time.Second)...)
		seqs = append(seqs, seq)
	}
	t.Logf("publishing resumed %s after the failure; %d publishes or reads failed on the way", resumed.Round(time.Millisecond), len(failed))
	for _, e := range failed {
		t.Logf("  %v", e)
	}
	newChat := streamLeader(t, js, cfg.ChatStream, victimName)
	newKV := streamLeader(t, js, kvStream, victimName)
	t.Logf("new leaders: %s on %s, %s on %s; compactor on %s, client on %s", cfg.ChatStream, newChat, kvStream, newKV,
		compNC.ConnectedServerName(), clientNC.ConnectedServerName())

	<-watched
	if watchErr != nil {
		t.Fatal(watchErr)
	}

	// Compaction goes on and converges.
	// A request whose nak or ack was lost with the consumer's leader comes back after
	// the ack wait.
	drained(t, js, cfg.RequestsStream, cfg.WorkerAckWait+30*time.Second)
	var cx *pipeline.Context
	eventually(t, 30*time.Second, "the context to fall under the threshold after the failover", func() bool {
		var err error
		cx, err = client.Context(ctxFor(t, 10*time.Second), conv)
		return err == nil && cx.Tokens < env.budget().ThresholdTokens()
	})
	converged := time.Since(killed)
	cur, rev, err := adminSt.Results().Get(ctxFor(t, 10*time.Second), conv, true)
	if err != nil || cur == nil {
		t.Fatalf("current value: %v, %v", cur, err)
	}
	if cur.Generation <= genAtKill {
		t.Fatalf("no generation after the failover: still %d", cur.Generation)
	}
	// Every revision the bucket ever held, in order, none missing: the generations go
	// up by one per request and no request made two (invariant 3), the rest as always.
	values := vlog.complete(t, rev)
	invariants(t, reader, conv, env, values, llm)
	checkNeedles(t, cx, needles, cur.Generation)

	// Every message stored exactly once (retried publishes were de-duplicated).
	all := mustEntries(t, reader, conv)
	if len(all) != len(msgs) {
		t.Fatalf("%d messages stored; want %d (a retried publish stored twice or one lost)", len(all), len(msgs))
	}
	for k, e := range all {
		if e.Seq != seqs[k] {
			t.Fatalf("stored message %d has seq %d; its publish returned %d", k, e.Seq, seqs[k])
		}
	}
	// No completed event names a generation the bucket never held.
	gens := map[uint64]bool{}
	for _, v := range values {
		gens[v.Generation] = true
	}
	for _, ev := range conversationEvents(t, clientNC, cfg, conv) {
		if ev.Type == schemas.EventCompleted && !gens[ev.Generation] {
			t.Fatalf("completed event for generation %d (request %s), which the bucket never held", ev.Generation, ev.RequestID)
		}
	}
	t.Logf("generation %d at the failure, %d at the end; converged %s after the failure, %s in all",
		genAtKill, cur.Generation, converged.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// drained waits until the work queue is empty: no request pending or being worked on.
// Unlike settle, every poll has its own deadline, so one lost request does not use up
// the wait.
func drained(t *testing.T, js natsjs.JetStream, queue string, within time.Duration) {
	t.Helper()
	proctest.WaitFor(t, within, "the work queue to drain", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		stream, err := js.Stream(ctx, queue)
		if err != nil {
			return err
		}
		if n := stream.CachedInfo().State.Msgs; n > 0 {
			return fmt.Errorf("%d requests in %s", n, queue)
		}
		return nil
	})
}

// provisionCluster provisions the contract the way serve does.
func provisionCluster(t *testing.T, nc *nats.Conn, cfg jetstream.Config) *jetstream.Store {
	t.Helper()
	// A new stream at 3 replicas answers once its leader is elected, which on a loaded
	// machine can outlast one request: retry as serve does.
	fast := jetstream.Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	st, err := jetstream.ProvisionRetrying(ctxFor(t, 2*time.Minute), nc, cfg, fast, zerolog.Nop())
	if err != nil {
		t.Fatalf("provision at %d replicas: %v", cfg.Replicas, err)
	}
	return st
}

// connectTo dials every running server of the cluster the way serve does (jetstream.
// Connect: reconnect forever), first (when not nil) before the others.
func connectTo(t *testing.T, c *jstest.Cluster, first *server.Server, name string) *nats.Conn {
	t.Helper()
	urls := []string{}
	if first != nil {
		urls = append(urls, first.ClientURL())
	}
	for _, s := range c.Running() {
		if s != first {
			urls = append(urls, s.ClientURL())
		}
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Str("conn", name).Logger()
	nc, err := natsconn.Connect(strings.Join(urls, ","), name, log, nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if first != nil && nc.ConnectedServerName() != first.Name() {
		t.Fatalf("%s connected to %s; want %s", name, nc.ConnectedServerName(), first.Name())
	}
	return nc
}

// checkReplicas asserts that every stream (the buckets' too) and every durable
// consumer of the contract runs at want replicas.
func checkReplicas(t *testing.T, nc *nats.Conn, cfg jetstream.Config, want int) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	js := jsFor(t, nc)
	for _, name := range []string{cfg.ChatStream, cfg.RequestsStream, cfg.EventsStream, cfg.DeadStream,
		cfg.ActivityStream, "KV_" + cfg.ResultsBucket, "KV_" + cfg.PolicyBucket} {
		stream, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info := stream.CachedInfo()
		if info.Config.Replicas != want || info.Cluster == nil || len(info.Cluster.Replicas) != want-1 {
			t.Fatalf("stream %s: %d replicas configured, cluster %+v; want %d", name, info.Config.Replicas, info.Cluster, want)
		}
	}
	for _, c := range [][2]string{{cfg.ChatStream, cfg.TriggerConsumer}, {cfg.ActivityStream, cfg.IdleConsumer},
		{cfg.RequestsStream, cfg.WorkerConsumer}} {
		cons, err := js.Consumer(ctx, c[0], c[1])
		if err != nil {
			t.Fatalf("consumer %s on %s: %v", c[1], c[0], err)
		}
		if info := cons.CachedInfo(); info.Cluster == nil || len(info.Cluster.Replicas) != want-1 {
			t.Fatalf("consumer %s on %s: cluster %+v; want %d replicas", c[1], c[0], info.Cluster, want)
		}
	}
}

// streamLeader returns the name of a stream's leader once it has one and its followers
// (but those on the servers in gone) are current.
func streamLeader(t *testing.T, js natsjs.JetStream, name string, gone ...string) string {
	t.Helper()
	var leader string
	proctest.WaitFor(t, 20*time.Second, "a leader of "+name+" with current followers", func() error {
		var err error
		leader, err = currentLeader(js, name, gone...)
		return err
	})
	return leader
}

func currentLeader(js natsjs.JetStream, name string, gone ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return "", err
	}
	return leaderOf(stream.CachedInfo().Cluster, gone)
}

func consumerLeader(js natsjs.JetStream, stream, consumer string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return "", err
	}
	return leaderOf(c.CachedInfo().Cluster, nil)
}

func leaderOf(ci *natsjs.ClusterInfo, gone []string) (string, error) {
	if ci == nil || ci.Leader == "" {
		return "", errors.New("no leader")
	}
	for _, p := range ci.Replicas {
		if !slices.Contains(gone, p.Name) && (!p.Current || p.Offline) {
			return "", fmt.Errorf("leader %s, follower %s current %v offline %v", ci.Leader, p.Name, p.Current, p.Offline)
		}
	}
	return ci.Leader, nil
}

// moveLeader makes server "to" the leader of a stream ("NAME") or consumer
// ("STREAM.CONSUMER") with leader step-downs that name it the preferred successor.
func moveLeader(t *testing.T, nc *nats.Conn, asset, to string, leader func() (string, error)) {
	t.Helper()
	api := "$JS.API.STREAM.LEADER.STEPDOWN." + asset
	if strings.Contains(asset, ".") {
		api = "$JS.API.CONSUMER.LEADER.STEPDOWN." + asset
	}
	proctest.WaitFor(t, 20*time.Second, "the leader of "+asset+" to move to "+to, func() error {
		l, err := leader()
		switch {
		case err != nil:
			return err
		case l == to:
			return nil
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]any{"preferred": to}})
		resp, err := nc.Request(api, body, 2*time.Second)
		if err != nil {
			return fmt.Errorf("step down: %w", err)
		}
		return fmt.Errorf("leader still %s after step-down answer %s", l, resp.Data)
	})
}

// valueLog records every revision of a conversation's value that its watchers see.
type valueLog struct {
	mu     sync.Mutex
	values map[uint64]*schemas.Result // by revision
}

// watch adds a watcher of conv, or fails the test.
func (l *valueLog) watch(t *testing.T, kv natsjs.KeyValue, conv string, opts ...natsjs.WatchOpt) {
	t.Helper()
	stop, err := l.tryWatch(kv, conv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// tryWatch adds a watcher of conv and returns what stops it. Creating one is retried
// for up to 30s: a request that reaches the bucket while it has no leader is never
// answered, so each attempt is bounded.
func (l *valueLog) tryWatch(kv natsjs.KeyValue, conv string, opts ...natsjs.WatchOpt) (stop func(), err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The context is the watcher's lifetime, not only its creation's.
		ctx, cancel := context.WithCancel(context.Background())
		type made struct {
			w   natsjs.KeyWatcher
			err error
		}
		ch := make(chan made, 1)
		go func() {
			w, err := kv.Watch(ctx, conv, opts...)
			ch <- made{w, err}
		}()
		var m made
		select {
		case m = <-ch:
		case <-time.After(5 * time.Second):
			cancel()
			if m = <-ch; m.err == nil {
				_ = m.w.Stop()
			}
			m.err = errors.New("no answer within 5s")
		}
		if m.err == nil {
			go l.record(m.w)
			return func() { _ = m.w.Stop(); cancel() }, nil
		}
		cancel()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("watch %s: %w", conv, m.err)
		}
		time.Sleep(100 * time.Millisecond) // a pause between attempts, not a wait for a condition
	}
}

func (l *valueLog) record(w natsjs.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil || e.Operation() != natsjs.KeyValuePut {
			continue
		}
		v, err := schemas.DecodeResult(e.Value())
		if err != nil {
			continue
		}
		l.mu.Lock()
		l.values[e.Revision()] = v
		l.mu.Unlock()
	}
}

// complete waits until the watchers saw revision last and returns every value in
// revision order, failing when a revision is missing: the bucket only ever holds this
// conversation, so its revisions are 1, 2, ... last.
func (l *valueLog) complete(t *testing.T, last uint64) []*schemas.Result {
	t.Helper()
	proctest.WaitFor(t, 20*time.Second, fmt.Sprintf("the watchers to see revision %d", last), func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.values[last] == nil {
			return fmt.Errorf("%d revisions seen", len(l.values))
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*schemas.Result
	for rev := uint64(1); rev <= last; rev++ {
		v := l.values[rev]
		if v == nil {
			t.Fatalf("revision %d of %d never seen by the watchers", rev, last)
		}
		out = append(out, v)
	}
	return out
}

func checkNeedles(t *testing.T, cx *pipeline.Context, needles []string, gen uint64) {
	t.Helper()
	var text strings.Builder
	for _, m := range cx.Messages {
		text.WriteString(m.Content.String())
		text.WriteString("\n")
	}
	for _, n := range needles {
		if !strings.Contains(text.String(), n) {
			t.Errorf("needle %s lost after %d generations", n, gen)
		}
	}
	if len(cx.Messages) == 0 || cx.Messages[0].Role != schemas.RoleSystem || !strings.Contains(text.String(), "You are Ada") {
		t.Error("the pinned system prompt does not lead the context")
	}
}

// publishRetrying publishes message i with a Nats-Msg-Id, retrying what fails for up to
// within, as a producer does while the cluster fails over. It returns the sequence and
// the errors of the attempts that failed.
func publishRetrying(t *testing.T, st *jetstream.Store, c *pipeline.Client, conv string, i int, m schemas.Message, within time.Duration) (uint64, []error) {
	t.Helper()
	id := fmt.Sprintf("%s-%d", conv, i)
	deadline := time.Now().Add(within)
	var errs []error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		seq, err := c.Publish(ctx, conv, m, pipeline.MsgID(id))
		cancel()
		if err == nil {
			return seq, errs
		}
		if errors.Is(err, pipeline.ErrToolResultWithoutCall) && len(errs) > 0 {
			// Known issue: a tool message whose first attempt was stored but not acked is
			// refused on retry ("already answered") before the stream's de-duplication
			// of the same Nats-Msg-Id can answer with its sequence. Find it there.
			if seq := storedWithID(t, st, conv, id); seq > 0 {
				t.Logf("KNOWN ISSUE: retry of stored tool message %d (seq %d, Nats-Msg-Id %s) refused: %v", i, seq, id, err)
				return seq, append(errs, err)
			}
		}
		errs = append(errs, err)
		if errors.Is(err, schemas.ErrInvalid) {
			t.Fatalf("publish of message %d (%s) refused after %d failed attempts: %v (earlier: %v)", i, m.Role, len(errs)-1, err, errs[:len(errs)-1])
		}
		if time.Now().After(deadline) {
			t.Fatalf("publishing did not resume within %s: message %d failed %d times, last: %v", within, i, len(errs), err)
		}
		time.Sleep(50 * time.Millisecond) // a pause between attempts, not a wait for a condition
	}
}

// storedWithID returns the sequence of the conversation's message published with
// Nats-Msg-Id id, 0 when there is none.
func storedWithID(t *testing.T, st *jetstream.Store, conv, id string) uint64 {
	t.Helper()
	msgs, err := st.Chat().LoadLeader(ctxFor(t, 10*time.Second), conv, 1, 0)
	if err != nil {
		t.Fatalf("look for Nats-Msg-Id %s: %v", id, err)
	}
	for _, m := range msgs {
		if m.Header.Get(nats.MsgIdHdr) == id {
			return m.Seq
		}
	}
	return 0
}

// readBack reads the conversation with AtLeastSeq(seq), retrying a read that fails for
// up to within (never one that succeeds without seq: that breaks read-your-writes).
func readBack(t *testing.T, c *pipeline.Client, conv string, seq uint64, m schemas.Message, within time.Duration) []error {
	t.Helper()
	deadline := time.Now().Add(within)
	var errs []error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cx, err := c.Context(ctx, conv, pipeline.AtLeastSeq(seq))
		cancel()
		if err == nil {
			if seq >= cx.TailStartSeq && !slices.Contains(cx.Seqs, seq) && !(m.HasToolCalls() || m.Role == schemas.RoleTool) {
				t.Fatalf("read-your-writes: seq %d missing from the context (tail from %d)", seq, cx.TailStartSeq)
			}
			return errs
		}
		errs = append(errs, fmt.Errorf("read seq %d: %w", seq, err))
		if time.Now().After(deadline) {
			t.Fatalf("read of seq %d still failing after %s (%d attempts), last: %v", seq, within, len(errs), err)
		}
		time.Sleep(50 * time.Millisecond) // a pause between attempts, not a wait for a condition
	}
}

// conversationEvents reads every event of a conversation from COMPACT_EVENTS.
func conversationEvents(t *testing.T, nc *nats.Conn, cfg jetstream.Config, conv string) []schemas.Event {
	t.Helper()
	var out []schemas.Event
	// Right after a failover the events stream may still be electing its leader, or the
	// ordered consumer may land on a server that then loses it: read again from the
	// start until one read gets them all.
	proctest.WaitFor(t, 60*time.Second, "the events of "+conv, func() error {
		var err error
		out, err = readConversationEvents(nc, cfg, conv)
		return err
	})
	return out
}

// readConversationEvents reads every event of conv once, or says why it could not.
func readConversationEvents(nc *nats.Conn, cfg jetstream.Config, conv string) ([]schemas.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	subj, err := cfg.EventSubject(conv)
	if err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, cfg.EventsStream)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx, natsjs.WithSubjectFilter(subj))
	if err != nil {
		return nil, err
	}
	want := int(info.State.Subjects[subj])
	oc, err := stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, err
	}
	var out []schemas.Event
	for len(out) < want {
		batch, err := oc.Fetch(want-len(out), natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read events of %s: %w", conv, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev schemas.Event
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				return nil, fmt.Errorf("undecodable event: %w", err)
			}
			out = append(out, ev)
		}
		if n == 0 {
			return nil, fmt.Errorf("read %d of %d events of %s: %v", len(out), want, conv, batch.Error())
		}
	}
	return out, nil
}
