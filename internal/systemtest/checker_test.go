package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// checker is the independent checker of the tests that run real processes
// (process_test.go, soak_test.go, soak_tenants_test.go). From a connection of its own it
// publishes what the test gives it, remembering the sequence each publish returned, and
// watches every revision the results bucket ever holds (one watcher of the whole bucket,
// started before the first write). At the end it checks the invariants against what the
// NATS servers hold: the messages, every value, the events, the dead letters and the
// work queue. It asks the processes under test nothing, but for a tenant's checker
// (newCheckerOf with a tenant's client): it publishes and reads contexts as the tenant's
// producer does, the contexts through the tenant's service.
type checker struct {
	env    stackEnv
	cfg    jetstream.Config
	nc     *nats.Conn
	st     *jetstream.Store
	client *pipeline.Client
	llm    *fakellm.LLM

	// attemptsFailed counts publish and read attempts that failed, as they fail.
	attemptsFailed atomic.Int64

	mu    sync.Mutex
	convs []*checkedConv
	byID  map[string]*checkedConv
	revs  map[uint64]revision // by revision: what the watcher saw
	fig   checkFigures
	// stuck are the conversations settled found over their threshold, if it failed.
	stuck []string
}

// checkedConv is one conversation the checker publishes and checks.
type checkedConv struct {
	id   string
	msgs []schemas.Message
	// needles are the facts planted in msgs; planted is the index of the message that
	// plants each.
	needles []string
	planted map[string]int
	// marker, when not "", is a text of the pinned system prompt that tells this
	// conversation's summarizer inputs from the others'.
	marker string
	seqs   []uint64 // by message index: the sequence its publish returned
}

// revision is one revision of the results bucket.
type revision struct {
	key   string
	op    natsjs.KeyValueOp
	value *schemas.Result
	err   error // the value does not decode
}

// checkFigures are what the checker published and checked.
type checkFigures struct {
	Conversations  int
	Published      int // messages published, each checked stored once
	FailedAttempts int // publishes and reads that failed and were tried again
	Reads          int // contexts read back after a publish and checked
	Revisions      int // revisions of the results bucket, every one checked
	Generations    int // generations written, over every conversation
	MinGeneration  uint64
	MaxGeneration  uint64
	Declines       int
	DeclineReasons map[string]int // declined events by their reason
	Fallbacks      int
	Needles        int
	Requests       int // distinct requests seen started
	StartedAgain   int // requests started more than once (a redelivery)
	Failed         int // failed events, each with its cause
	DeadLetters    int // dead letters, each with its cause
	DeadCauses     []string
}

// newChecker waits until the processes provisioned the streams (failing at once when
// one of procs exits) and starts watching the results bucket.
func newChecker(t *testing.T, nc *nats.Conn, env stackEnv, llm *fakellm.LLM, procs ...*proctest.Proc) *checker {
	t.Helper()
	return newCheckerOf(t, nc, env, env.jetstream(), nil, llm, procs...)
}

// newCheckerOf is newChecker of the streams of cfg (a tenant's) that publishes and
// reads contexts with client (a tenant's producer in service mode; nil: a client of
// nc's store), and checks from nc, which may read every stream of cfg.
func newCheckerOf(t *testing.T, nc *nats.Conn, env stackEnv, cfg jetstream.Config, client *pipeline.Client, llm *fakellm.LLM, procs ...*proctest.Proc) *checker {
	t.Helper()
	c := &checker{env: env, cfg: cfg, nc: nc, llm: llm, byID: map[string]*checkedConv{}, revs: map[uint64]revision{}}
	proctest.WaitFor(t, time.Minute, "the processes to provision the streams", func() error {
		for _, p := range procs {
			if p.Exited() {
				t.Fatalf("%s exited at start: %v\n%s", p.Name, p.Err(), p.Logs.String())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		c.st, err = jetstream.Open(ctx, nc, c.cfg)
		return err
	})
	c.client = client
	if c.client == nil {
		c.client = pipeline.NewWithStore(nc, c.st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := resultsFor(t, nc, c.cfg).WatchAll(ctx, natsjs.IncludeHistory())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(); cancel() })
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue // the end of the values there were: none, before the first write
			}
			r := revision{key: e.Key(), op: e.Operation()}
			if r.op == natsjs.KeyValuePut {
				r.value, r.err = schemas.DecodeResult(e.Value())
			}
			c.mu.Lock()
			c.revs[e.Revision()] = r
			c.mu.Unlock()
		}
	}()
	return c
}

// add makes a conversation known: msgs are what the test will publish to it, needles
// the facts planted in them, marker (or "") what tells its summarizer inputs apart.
func (c *checker) add(t *testing.T, conv string, msgs []schemas.Message, needles []string, marker string) {
	t.Helper()
	cv := &checkedConv{id: conv, msgs: msgs, needles: needles, planted: map[string]int{}, marker: marker,
		seqs: make([]uint64, len(msgs))}
	for _, n := range needles {
		i := slices.IndexFunc(msgs, func(m schemas.Message) bool { return strings.Contains(m.Content.String(), n) })
		if i < 0 {
			t.Fatalf("%s: needle %s is in no message", conv, n)
		}
		cv.planted[n] = i
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.convs = append(c.convs, cv)
	c.byID[conv] = cv
}

func (c *checker) conv(id string) *checkedConv {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

// msgID is the Nats-Msg-Id of message i of conv: unique across CHAT, and the same for
// every attempt at that message.
func msgID(conv string, i int) string { return fmt.Sprintf("%s-%d", conv, i) }

// publish publishes message i of conv, retrying for up to within what fails (a server
// down, a failover: the message id makes a retry stored once), then reads the
// conversation back at once with AtLeastSeq and checks that context: the message is
// in it (read-your-writes) and no tool pair is split. It returns how many attempts
// failed, and an error when the publish is refused for good, the time ran out, or the
// read broke an invariant. Safe for concurrent use, one publisher per conversation.
func (c *checker) publish(conv string, i int, within time.Duration) (int, error) {
	cv := c.conv(conv)
	m := cv.msgs[i]
	deadline := time.Now().Add(within)
	failed := 0
	var seq uint64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := c.client.Publish(ctx, conv, m, pipeline.MsgID(msgID(conv, i)))
		cancel()
		if err == nil {
			seq = s
			break
		}
		failed++
		c.attemptsFailed.Add(1)
		if errors.Is(err, schemas.ErrInvalid) {
			return failed, fmt.Errorf("publish %s message %d (%s) refused after %d failed attempts: %w", conv, i, m.Role, failed-1, err)
		}
		if time.Now().After(deadline) {
			return failed, fmt.Errorf("publish %s message %d still failing after %s (%d attempts): %w", conv, i, within, failed, err)
		}
		time.Sleep(100 * time.Millisecond) // a pause between attempts, not a wait for a condition
	}
	c.mu.Lock()
	cv.seqs[i] = seq
	c.fig.Published++
	c.mu.Unlock()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cx, err := c.client.Context(ctx, conv, pipeline.AtLeastSeq(seq))
		cancel()
		if err == nil {
			c.mu.Lock()
			c.fig.Reads++
			c.fig.FailedAttempts += failed
			c.mu.Unlock()
			if seq >= cx.TailStartSeq && !slices.Contains(cx.Seqs, seq) && !(m.HasToolCalls() || m.Role == schemas.RoleTool) {
				return failed, fmt.Errorf("read-your-writes: %s seq %d missing from the context (tail from %d)", conv, seq, cx.TailStartSeq)
			}
			if err := rounds.CheckPairs(cx.Messages); err != nil {
				return failed, fmt.Errorf("context of %s read after seq %d splits a tool pair: %w", conv, seq, err)
			}
			return failed, nil
		}
		failed++
		c.attemptsFailed.Add(1)
		if time.Now().After(deadline) {
			return failed, fmt.Errorf("read %s after seq %d still failing after %s: %w", conv, seq, within, err)
		}
		time.Sleep(100 * time.Millisecond) // a pause between attempts, not a wait for a condition
	}
}

// settled waits until nothing is left to do: the trigger has handled every chat
// message, the work queue is empty, and every conversation's context is under its
// threshold. It fails t naming what is still pending after within.
func (c *checker) settled(t *testing.T, within time.Duration) {
	t.Helper()
	js := jsFor(t, c.nc)
	threshold := c.env.budget().ThresholdTokens()
	c.mu.Lock()
	convs := slices.Clone(c.convs)
	c.mu.Unlock()
	var stuck []string
	defer func() {
		if t.Failed() && len(stuck) > 0 {
			c.explainStuck(t, stuck)
			c.mu.Lock()
			c.stuck = stuck
			c.mu.Unlock()
		}
	}()
	start, logged := time.Now(), time.Now()
	proctest.WaitFor(t, within, "nothing left to do", func() error {
		err := c.pending(js, threshold, convs, &stuck)
		if err != nil && time.Since(logged) > 5*time.Second {
			logged = time.Now()
			t.Logf("%s settling: %v", time.Since(start).Round(time.Second), err)
		}
		return err
	})
}

// pending says what is left to do, nil when nothing is: a chat message the trigger has
// not handled, a request in the queue, a conversation over its threshold (these are
// stuck).
func (c *checker) pending(js natsjs.JetStream, threshold int, convs []*checkedConv, stuck *[]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, part := range c.cfg.Partitions() {
		trig, err := js.Consumer(ctx, c.cfg.ChatStream, c.cfg.TriggerConsumerOf(part))
		if err != nil {
			return err
		}
		if ci := trig.CachedInfo(); ci.NumPending > 0 || ci.NumAckPending > 0 {
			return fmt.Errorf("the trigger (partition %s) has %d chat messages to read and %d unacknowledged", part, ci.NumPending, ci.NumAckPending)
		}
	}
	queue, err := js.Stream(ctx, c.cfg.RequestsStream)
	if err != nil {
		return err
	}
	if n := queue.CachedInfo().State.Msgs; n > 0 {
		return fmt.Errorf("%d requests in %s", n, c.cfg.RequestsStream)
	}
	var over []string
	*stuck = (*stuck)[:0]
	for _, cv := range convs {
		cx, err := c.client.Context(ctx, cv.id)
		if err != nil {
			return err
		}
		if cx.Tokens >= threshold {
			over = append(over, fmt.Sprintf("%s (%d tokens, generation %d)", cv.id, cx.Tokens, cx.Generation))
			*stuck = append(*stuck, cv.id)
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("%d conversations at or over the threshold of %d tokens with nothing queued: %s", len(over), threshold, strings.Join(over, ", "))
	}
	return nil
}

// explainStuck logs what the bucket and the events say of conversations left over
// their threshold.
func (c *checker) explainStuck(t *testing.T, ids []string) {
	t.Helper()
	for _, id := range ids {
		v, rev, err := c.st.Results().Get(ctxFor(t, 10*time.Second), id, true)
		if err == nil && v != nil {
			t.Logf("%s: value revision %d: generation %d, tail_start_seq %d, declined_at_seq %d, loaded_through_seq %d, request %s, created %s",
				id, rev, v.Generation, v.TailStartSeq, v.DeclinedAtSeq, v.LoadedThroughSeq, v.RequestID, v.CreatedAt.Format(time.StampMilli))
		}
		for _, ev := range conversationEvents(t, c.nc, c.cfg, id) {
			t.Logf("%s: event %s %s generation %d at %s: %s %s", id, ev.Type, ev.RequestID, ev.Generation, ev.At.Format(time.StampMilli), ev.Reason, ev.Error)
		}
	}
}

// verify checks every invariant once publishing stopped and the pipeline settled,
// failing t at the first one broken, and returns the figures.
func (c *checker) verify(t *testing.T) checkFigures {
	t.Helper()
	c.mu.Lock()
	convs := slices.Clone(c.convs)
	c.mu.Unlock()
	stored := map[string][]schemas.Entry{}
	for _, cv := range convs {
		stored[cv.id] = c.checkStored(t, cv)
	}
	values := c.checkRevisions(t)
	c.checkEvents(t, values)
	for _, cv := range convs {
		c.checkConversation(t, cv, stored[cv.id], values[cv.id])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fig.Conversations = len(convs)
	return c.fig
}

// checkStored checks that every message of cv is stored exactly once, at the sequence
// its publish returned, with its message id and content, and returns the entries.
// Read from the stream leader: what it holds is what every reader may be given.
func (c *checker) checkStored(t *testing.T, cv *checkedConv) []schemas.Entry {
	t.Helper()
	var msgs []jetstream.StoredMsg
	read(t, "the stored messages of "+cv.id, func(ctx context.Context) (err error) {
		msgs, err = c.st.Chat().LoadLeader(ctx, cv.id, 1, 0)
		return err
	})
	if len(msgs) != len(cv.msgs) {
		t.Fatalf("%s: %d messages stored; %d published (a retried publish stored twice, or one lost)", cv.id, len(msgs), len(cv.msgs))
	}
	es := make([]schemas.Entry, len(msgs))
	for k, m := range msgs {
		es[k] = m.Entry()
		switch {
		case cv.seqs[k] == 0:
			t.Fatalf("%s: message %d was never published", cv.id, k)
		case m.Seq != cv.seqs[k]:
			t.Fatalf("%s: stored message %d has seq %d; its publish returned %d", cv.id, k, m.Seq, cv.seqs[k])
		case m.Header.Get(nats.MsgIdHdr) != msgID(cv.id, k):
			t.Fatalf("%s: seq %d has message id %q; want %q", cv.id, m.Seq, m.Header.Get(nats.MsgIdHdr), msgID(cv.id, k))
		case es[k].Err != nil:
			t.Fatalf("%s: seq %d does not decode: %v", cv.id, m.Seq, es[k].Err)
		}
		got, _ := es[k].Message.Encode()
		want, _ := cv.msgs[k].Encode()
		if string(got) != string(want) {
			t.Fatalf("%s: seq %d holds %s; message %d is %s", cv.id, m.Seq, got, k, want)
		}
	}
	return es
}

// checkRevisions checks that the watcher saw every revision the results bucket ever
// held, 1 to its last, each a value of a known conversation that decodes, and returns
// the values of each conversation in revision order.
func (c *checker) checkRevisions(t *testing.T) map[string][]*schemas.Result {
	t.Helper()
	var last uint64
	read(t, "the last revision of the results bucket", func(ctx context.Context) error {
		stream, err := jsFor(t, c.nc).Stream(ctx, "KV_"+c.cfg.ResultsBucket)
		if err == nil {
			last = stream.CachedInfo().State.LastSeq
		}
		return err
	})
	proctest.WaitFor(t, 30*time.Second, fmt.Sprintf("the watcher to see revision %d", last), func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.revs[last]; !ok && last > 0 {
			return fmt.Errorf("%d revisions seen", len(c.revs))
		}
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*schemas.Result{}
	for rev := uint64(1); rev <= last; rev++ {
		r, ok := c.revs[rev]
		switch {
		case !ok:
			t.Fatalf("revision %d of %d of the results bucket never seen by the watcher", rev, last)
		case c.byID[r.key] == nil:
			t.Fatalf("revision %d is of key %q, no conversation of the test", rev, r.key)
		case r.op != natsjs.KeyValuePut:
			t.Fatalf("revision %d of %s is a %s", rev, r.key, r.op)
		case r.err != nil:
			t.Fatalf("revision %d of %s does not decode: %v", rev, r.key, r.err)
		case r.value.Conversation != r.key:
			t.Fatalf("revision %d of %s names conversation %q", rev, r.key, r.value.Conversation)
		}
		out[r.key] = append(out[r.key], r.value)
	}
	c.fig.Revisions = int(last)
	return out
}

// checkEvents checks the events and dead letters against the values: a completed
// event names a generation the bucket held, made by its request; every request that
// was started has an outcome (a value that holds it, an outcome event or a dead
// letter); every failed event and dead letter names its cause.
func (c *checker) checkEvents(t *testing.T, values map[string][]*schemas.Result) {
	t.Helper()
	made := map[string]map[uint64]string{} // conv → generation → request id
	done := map[string]bool{}              // request ids a value holds
	for conv, vs := range values {
		made[conv] = map[uint64]string{}
		for _, v := range vs {
			if v.Generation > 0 {
				made[conv][v.Generation] = v.RequestID
				done[v.RequestID] = true
			}
		}
	}
	started := map[string]int{}
	for _, m := range streamMessages(t, c.nc, c.cfg.EventsStream) {
		var ev schemas.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatalf("event on %s does not decode: %v", m.Subject(), err)
		}
		switch ev.Type {
		case schemas.EventStarted:
			started[ev.RequestID]++
		case schemas.EventCompleted:
			if id, ok := made[ev.Conversation][ev.Generation]; !ok || id != ev.RequestID {
				t.Fatalf("%s: completed event of request %s for generation %d, which the bucket never held from it (held: %q)",
					ev.Conversation, ev.RequestID, ev.Generation, id)
			}
			done[ev.RequestID] = true
		case schemas.EventDeclined:
			done[ev.RequestID] = true
			if c.fig.DeclineReasons == nil {
				c.fig.DeclineReasons = map[string]int{}
			}
			c.fig.DeclineReasons[ev.Error]++
		case schemas.EventFailed:
			if ev.Error == "" {
				t.Fatalf("%s: failed event of request %s names no cause", ev.Conversation, ev.RequestID)
			}
			done[ev.RequestID] = true
			c.fig.Failed++
		}
	}
	for _, m := range streamMessages(t, c.nc, c.cfg.DeadStream) {
		var d schemas.DeadLetter
		if err := json.Unmarshal(m.Data(), &d); err != nil {
			t.Fatalf("dead letter on %s does not decode: %v", m.Subject(), err)
		}
		if d.Error == "" {
			t.Fatalf("dead letter of request %s names no cause", d.Request.RequestID)
		}
		done[d.Request.RequestID] = true
		c.fig.DeadLetters++
		c.fig.DeadCauses = append(c.fig.DeadCauses, fmt.Sprintf("%s request %s after %d attempts: %s", d.Request.Conversation, d.Request.RequestID, d.Attempts, d.Error))
	}
	var open []string
	for id, n := range started {
		if n > 1 {
			c.fig.StartedAgain++
		}
		if !done[id] {
			open = append(open, id)
		}
	}
	sort.Strings(open)
	if len(open) > 0 {
		t.Fatalf("%d requests were started and have no outcome (no value holds them, no outcome event, no dead letter): %v", len(open), open)
	}
	c.fig.Requests = len(started)
}

// checkConversation checks one conversation's values (invariants 1–3, 5, 6 and 9 over
// every revision, every planted fact the values cover in their summary) and the
// context a reader is given at the end: under the threshold, tool pairs whole, the
// pinned system prompt first, every planted fact there.
func (c *checker) checkConversation(t *testing.T, cv *checkedConv, stored []schemas.Entry, values []*schemas.Result) {
	t.Helper()
	var inputs *string
	if c.llm != nil {
		in := c.llm.AllInputs()
		if cv.marker != "" {
			in = c.llm.InputsWith(cv.marker)
		}
		inputs = &in
	}
	checkValues(t, stored, c.env, values, inputs)
	var last *schemas.Result
	for _, v := range values {
		if last != nil && v.Generation == last.Generation {
			c.fig.Declines++
		} else if v.Generation == 0 {
			c.fig.Declines++
		}
		last = v
		if v.Fallback {
			c.fig.Fallbacks++
			continue // an extractive summary keeps excerpts, not every fact
		}
		for n, i := range cv.planted {
			seq := cv.seqs[i]
			if seq < v.TailStartSeq && !slices.Contains(v.PinnedSeqs, seq) && !strings.Contains(v.Summary, n) {
				t.Fatalf("%s: generation %d covers seq %d but its summary lost the fact %s", cv.id, v.Generation, seq, n)
			}
		}
	}
	gen := uint64(0)
	if last != nil {
		gen = last.Generation
	}
	var cx *pipeline.Context
	read(t, "the context of "+cv.id, func(ctx context.Context) (err error) {
		cx, err = c.client.Context(ctx, cv.id)
		return err
	})
	if cx.Generation != gen {
		t.Fatalf("%s: the context is of generation %d; the last value the watcher saw is %d", cv.id, cx.Generation, gen)
	}
	if threshold := c.env.budget().ThresholdTokens(); cx.Tokens >= threshold {
		t.Fatalf("%s: the context ends at %d tokens, over its threshold %d", cv.id, cx.Tokens, threshold)
	}
	if err := rounds.CheckPairs(cx.Messages); err != nil {
		t.Fatalf("%s: the final context splits a tool pair: %v", cv.id, err)
	}
	if first := cv.msgs[0]; first.Role == schemas.RoleSystem &&
		(len(cx.Messages) == 0 || cx.Messages[0].Content.String() != first.Content.String()) {
		t.Fatalf("%s: the pinned system prompt does not lead the context", cv.id)
	}
	var text strings.Builder
	for _, m := range cx.Messages {
		text.WriteString(m.Content.String())
		text.WriteString("\n")
	}
	for _, n := range cv.needles {
		if !strings.Contains(text.String(), n) {
			t.Fatalf("%s: the fact %s is neither in the summary nor in the tail after %d generations", cv.id, n, gen)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fig.Generations += int(gen)
	c.fig.Needles += len(cv.needles)
	if c.fig.MinGeneration == 0 || gen < c.fig.MinGeneration {
		c.fig.MinGeneration = gen
	}
	c.fig.MaxGeneration = max(c.fig.MaxGeneration, gen)
}

// streamMessages reads every message of a stream with an ordered consumer, started
// again from the next sequence when a fetch fails.
func streamMessages(t *testing.T, nc *nats.Conn, name string) []natsjs.Msg {
	t.Helper()
	var stream natsjs.Stream
	read(t, "the stream "+name, func(ctx context.Context) (err error) {
		stream, err = jsFor(t, nc).Stream(ctx, name)
		return err
	})
	want := int(stream.CachedInfo().State.Msgs)
	var out []natsjs.Msg
	next := uint64(1)
	read(t, fmt.Sprintf("the %d messages of %s", want, name), func(ctx context.Context) error {
		oc, err := stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{
			DeliverPolicy: natsjs.DeliverByStartSequencePolicy, OptStartSeq: next})
		if err != nil {
			return err
		}
		for len(out) < want {
			batch, err := oc.Fetch(min(want-len(out), 256), natsjs.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			n := 0
			for m := range batch.Messages() {
				meta, err := m.Metadata()
				if err != nil {
					return err
				}
				next = meta.Sequence.Stream + 1
				out = append(out, m)
				n++
			}
			if n == 0 {
				return fmt.Errorf("%d of %d read: %v", len(out), want, batch.Error())
			}
		}
		return nil
	})
	return out
}

// read runs a read of the checker's until it succeeds, each attempt with 10 s, and
// fails t after 30 s: on a cluster whose servers were just killed and started again, a
// read may find a leader being elected.
func read(t *testing.T, what string, fn func(ctx context.Context) error) {
	t.Helper()
	proctest.WaitFor(t, 30*time.Second, "a read of "+what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return fn(ctx)
	})
}
