package jetstream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

func TestConversationOf(t *testing.T) {
	n := jetstream.DefaultNames()
	for _, tc := range []struct {
		give string
		want string // "" when refused
	}{
		{give: "chat.abc.msg", want: "abc"},
		{give: "chat.a-b_C9.msg.4.2", want: "a-b_C9"},
		{give: "chat.abc.msg.4.0", want: "abc"},
		{give: "chat.abc.msg.256.255", want: "abc"},
		{give: "chat.abc.msg.4.4"},     // p ≥ N
		{give: "chat.abc.msg.1.0"},     // one partition has no suffix
		{give: "chat.abc.msg.04.2"},    // leading zero
		{give: "chat.abc.msg.4"},       // half a suffix
		{give: "chat.abc.msg.4.2.1"},   // one token too many
		{give: "chat.abc.msg.x.y"},     // not digits
		{give: "chat.abc.msg.-4.2"},    // sign
		{give: "chat.abc.msgx"},        // not the msg token
		{give: "chat.abc.msg."},        // empty tokens
		{give: "chat.abc.msg.257.1"},   // over the bound
		{give: "chat.a.b.msg"},         // id with a dot
		{give: "chat..msg"},            // empty id
		{give: "chat.*.msg.4.2"},       // wildcard id
		{give: "other.abc.msg.4.2"},    // another prefix
		{give: "chat.abc.msg.4.2.msg"}, // trailing junk
	} {
		got, ok := n.ConversationOf(tc.give)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ConversationOf(%q) = %q, %v; want %q", tc.give, got, ok, tc.want)
		}
	}
}

func TestPartitionOfSpreadsIDs(t *testing.T) {
	// The hash the server's partition() applies, computed here (checked against stored
	// subjects in TestPartitionedLayout): ids spread over every partition.
	seen := map[int]bool{}
	for i := range 200 {
		p := jetstream.PartitionOf(fmt.Sprintf("conv-%d", i), 4)
		if p < 0 || p >= 4 {
			t.Fatalf("partition %d of 4", p)
		}
		seen[p] = true
	}
	if len(seen) != 4 {
		t.Errorf("200 ids fell in %d of 4 partitions", len(seen))
	}
}

// With 4 partitions, CHAT and ACTIVITY store each conversation under its partition,
// and every reader (batched reads, leader reads, the last sequence, pinned messages,
// forget) still finds its messages; each partition's consumer gets only its own
// conversations.
func TestPartitionedLayout(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 4
	st, err := jetstream.Provision(ctxT(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	convs := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
	seqs := map[string][]uint64{}
	for round := range 3 {
		for _, c := range convs {
			seq, err := st.Chat().Publish(ctxT(t), c, fmt.Appendf(nil, `{"role":"user","content":"%s %d"}`, c, round), "")
			if err != nil {
				t.Fatal(err)
			}
			seqs[c] = append(seqs[c], seq)
		}
	}
	js := testJS(t, nc)
	chat, err := js.Stream(ctxT(t), "CHAT")
	if err != nil {
		t.Fatal(err)
	}
	parts := map[int]bool{}
	for _, c := range convs {
		p := jetstream.PartitionOf(c, 4)
		parts[p] = true
		m, err := chat.GetMsg(ctxT(t), seqs[c][0])
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("chat.%s.msg.4.%d", c, p); m.Subject != want {
			t.Errorf("message of %s stored on %s; want %s", c, m.Subject, want)
		}
		es, err := st.Chat().LoadEntries(ctxT(t), c, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 3 || es[0].Seq != seqs[c][0] || es[2].Seq != seqs[c][2] || es[1].Message.Content.String() != c+" 1" {
			t.Errorf("%s read back as %+v; want its 3 messages", c, es)
		}
		lead, err := st.Chat().LoadLeader(ctxT(t), c, 0, 0)
		if err != nil || len(lead) != 3 {
			t.Errorf("%s from the leader: %d messages, %v; want 3", c, len(lead), err)
		}
		last, err := st.Chat().LastSeq(ctxT(t), c)
		if err != nil || last != seqs[c][2] {
			t.Errorf("last sequence of %s: %d, %v; want %d", c, last, err, seqs[c][2])
		}
		pinned, err := st.Chat().LoadPinned(ctxT(t), c, []uint64{seqs[c][1], seqs[convs[0]][0] + 0})
		if err != nil {
			t.Fatal(err)
		}
		if pinned[0].Err != nil || pinned[0].Seq != seqs[c][1] {
			t.Errorf("pinned message of %s: %+v", c, pinned[0])
		}
		if c != convs[0] && !errors.Is(pinned[1].Err, jetstream.ErrMissingMessage) {
			t.Errorf("another conversation's message pinned in %s: %+v; want ErrMissingMessage", c, pinned[1])
		}
		if err := st.Activity().ArmIdle(c, time.Hour, last); err != nil {
			t.Fatal(err)
		}
	}
	if len(parts) < 2 {
		t.Fatalf("the test's ids fall in %d partition(s); want several", len(parts))
	}
	act, err := js.Stream(ctxT(t), "ACTIVITY")
	if err != nil {
		t.Fatal(err)
	}
	m, err := act.GetLastMsgForSubject(ctxT(t), "activity.alpha.>")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("activity.alpha.4.%d", jetstream.PartitionOf("alpha", 4)); m.Subject != want {
		t.Errorf("idle timer of alpha stored on %s; want %s", m.Subject, want)
	}

	// Each partition's consumer delivers its own conversations, with their ids.
	for _, part := range cfg.Partitions() {
		var mu sync.Mutex
		got := map[string]int{}
		done := make(chan struct{})
		want := 0
		for _, c := range convs {
			if jetstream.PartitionOf(c, 4) == part.P {
				want += 3
			}
		}
		if want == 0 {
			continue
		}
		cons, err := st.Chat().ConsumePartition(ctxT(t), part, func(d *jetstream.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			got[d.Conversation]++
			_ = d.Ack()
			if n := sum(got); n == want {
				close(done)
			}
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("partition %s: got %v, want %d messages", part, got, want)
		}
		cons.Drain()
		for c := range got {
			if jetstream.PartitionOf(c, 4) != part.P || c == "" {
				t.Errorf("partition %s delivered %q of partition %d", part, c, jetstream.PartitionOf(c, 4))
			}
		}
	}

	// Forget finds and deletes the partitioned messages and idle timer.
	out, err := st.Forget(ctxT(t), "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if out.Deleted.ChatMessages != 3 || out.Deleted.ActivityMarkers != 1 {
		t.Errorf("forget alpha deleted %d messages and %d idle timers; want 3 and 1", out.Deleted.ChatMessages, out.Deleted.ActivityMarkers)
	}
	if es, err := st.Chat().LoadEntries(ctxT(t), "alpha", 0, 0); err != nil || len(es) != 0 {
		t.Errorf("alpha after forget: %d messages, %v", len(es), err)
	}
	if es, err := st.Chat().LoadEntries(ctxT(t), "beta", 0, 0); err != nil || len(es) != 3 {
		t.Errorf("beta after forgetting alpha: %d messages, %v; want 3", len(es), err)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// A process with another partition count than the streams refuses to start, naming
// the subject transform; with UpdateExisting it changes the layout.
func TestPartitionCountConflict(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	four := jetstream.DefaultConfig()
	four.TriggerPartitions = 4
	if _, err := jetstream.Provision(ctxT(t), nc, four); err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.Provision(ctxT(t), nc, four); err != nil {
		t.Fatalf("provision again with the same count: %v", err)
	}
	for _, n := range []int{1, 6} {
		other := jetstream.DefaultConfig()
		other.TriggerPartitions = n
		_, err := jetstream.Provision(ctxT(t), nc, other)
		if !errors.Is(err, jetstream.ErrConflict) {
			t.Fatalf("provision with %d partitions on a 4-partition layout: %v; want ErrConflict", n, err)
		}
		for _, want := range []string{"stream CHAT", "stream ACTIVITY", "subject_transform", "chat.{{wildcard(1)}}.msg.4.{{partition(4,1)}}"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	}
	st, err := jetstream.Provision(ctxT(t), nc, four)
	if err != nil {
		t.Fatal(err)
	}
	one := jetstream.DefaultConfig()
	one.UpdateExisting = true
	st1, err := jetstream.Provision(ctxT(t), nc, one)
	if err != nil {
		t.Fatalf("provision with one partition and UpdateExisting: %v", err)
	}
	seq, err := st1.Chat().Publish(ctxT(t), "c", []byte(`{"role":"user","content":"x"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := testJS(t, nc).Stream(ctxT(t), "CHAT")
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.GetMsg(ctxT(t), seq)
	if err != nil || got.Subject != "chat.c.msg" {
		t.Errorf("after going back to one partition, stored on %v (%v); want chat.c.msg", got, err)
	}
	_ = st
}

// Members are the live trigger processes: announced, gone when they leave or stop
// announcing.
func TestMembership(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 2
	cfg.TriggerHeartbeat = 200 * time.Millisecond
	st, err := jetstream.Provision(ctxT(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Membership(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Members(ctxT(t)); err != nil || len(got) != 0 {
		t.Fatalf("members of an empty bucket: %v, %v", got, err)
	}
	for _, id := range []string{"b-2", "a-1", "c-3"} {
		if err := m.Announce(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Announce(ctxT(t), "bad.id"); !errors.Is(err, jetstream.ErrMember) {
		t.Errorf("announce bad.id: %v; want ErrMember", err)
	}
	if got, err := m.Members(ctxT(t)); err != nil || !slices.Equal(got, []string{"a-1", "b-2", "c-3"}) {
		t.Fatalf("members: %v, %v; want a-1 b-2 c-3", got, err)
	}
	// A process with another partition count (an operator changing it) is not a member
	// of this layout, nor the other way round.
	other := cfg
	other.TriggerPartitions = 5
	other.UpdateExisting = true
	st5, err := jetstream.Open(ctxT(t), nc, other)
	if err != nil {
		t.Fatal(err)
	}
	m5, err := st5.Membership(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m5.Announce(ctxT(t), "d-4"); err != nil {
		t.Fatal(err)
	}
	if got, err := m5.Members(ctxT(t)); err != nil || !slices.Equal(got, []string{"d-4"}) {
		t.Fatalf("members of 5 partitions: %v, %v; want d-4", got, err)
	}
	if got, err := m.Members(ctxT(t)); err != nil || !slices.Equal(got, []string{"a-1", "b-2", "c-3"}) {
		t.Fatalf("members of 2 partitions with one of 5: %v, %v; want a-1 b-2 c-3", got, err)
	}
	// Status shows each partition's consumers with the member that owns them.
	status := st.Status(ctxT(t))
	if !slices.Equal(status.TriggerMembers, []string{"a-1", "b-2", "c-3"}) {
		t.Errorf("status members: %v (%s)", status.TriggerMembers, status.TriggerMembersError)
	}
	owners := jetstream.AssignPartitions(status.TriggerMembers, 2)
	parts := 0
	for _, c := range status.Consumers {
		if c.Partition == "" {
			continue
		}
		parts++
		var p int
		if _, err := fmt.Sscanf(c.Partition, "%d/2", &p); err != nil || c.Owner != owners[p] || c.Error != "" {
			t.Errorf("status of consumer %s: partition %q, owner %q (want %q), error %q", c.Name, c.Partition, c.Owner, owners[p], c.Error)
		}
	}
	if parts != 4 {
		t.Errorf("status shows %d partition consumers; want 4 (trigger and idle of 2 partitions)", parts)
	}
	if err := m.Leave(ctxT(t), "b-2"); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Members(ctxT(t)); err != nil || !slices.Equal(got, []string{"a-1", "c-3"}) {
		t.Fatalf("members after b-2 left: %v, %v; want a-1 c-3", got, err)
	}
	// a-1 keeps announcing, c-3 stops: c-3 expires after 3 heartbeats.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := m.Announce(ctxT(t), "a-1"); err != nil {
			t.Fatal(err)
		}
		got, err := m.Members(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, []string{"a-1"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members long after c-3 stopped announcing: %v", got)
		}
		time.Sleep(cfg.TriggerHeartbeat)
	}
}

// A conversation's messages are read by their literal subjects, one per layout that
// holds any, merged in stream order. A read of the wildcard chat.<conv>.> from a later
// sequence makes nats-server scan every block in between once the stream holds 64Ki
// subjects (measured: 7–9 ms against 0.15–0.2 ms a read at 100,000 conversations; the
// full bench's 100,000-conversation trigger run went from about a minute to over six).
func TestReadsUseLiteralSubjectsAcrossLayouts(t *testing.T) {
	st1, st4, want, spy := twoLayouts(t, 3)
	// Every direct get the reads send, as the server receives them.
	sub := spy("$JS.API.DIRECT.GET.CHAT")
	for _, st := range []*jetstream.Store{st1, st4} {
		for _, from := range []int{0, 1, 4} {
			msgs, err := st.Chat().Load(ctxT(t), "mixed", want[from], 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for _, m := range msgs {
				got = append(got, m.Seq)
			}
			if !slices.Equal(got, want[from:]) {
				t.Fatalf("read from %d: sequences %v; want %v", want[from], got, want[from:])
			}
		}
	}
	var filters []string
	for _, req := range sub.requests(t) {
		if req.Next != "" {
			filters = append(filters, req.Next)
		}
	}
	if len(filters) == 0 {
		t.Fatal("no batched read seen")
	}
	for _, f := range filters {
		if strings.ContainsAny(f, "*>") {
			t.Fatalf("a batched read filtered on %q; want literal subjects only", f)
		}
	}
}

// A read bounded by a sequence (a trigger's first sight of a conversation reads through
// the message before the one delivered) asks for one message first when the subject holds
// messages past the bound: a batch goes on past the bound, and each message costs the
// server a walk over the messages stored in between. (Measured in compactor bench: the
// trigger drained 6,200 msgs/s with batches of 25, 43,500 with this.)
func TestABoundedReadStartsSmall(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st, err := jetstream.Provision(ctxT(t), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Chat().Publish(ctxT(t), "y", []byte(`{"role":"user","content":"y"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := st.Chat().Publish(ctxT(t), "x", fmt.Appendf(nil, `{"role":"user","content":"x%d"}`, i), ""); err != nil {
			t.Fatal(err)
		}
	}
	sub := seeRequests(t, nc, "$JS.API.DIRECT.GET.CHAT")
	es, err := st.Chat().LoadEntriesThrough(ctxT(t), "x", 1, first)
	if err != nil || len(es) != 0 {
		t.Fatalf("x through %d: %d entries, %v; want none", first, len(es), err)
	}
	var batches []int
	for _, req := range sub.requests(t) {
		if req.Next != "" {
			batches = append(batches, req.Batch)
		}
	}
	if !slices.Equal(batches, []int{1}) {
		t.Fatalf("batches asked for %v; want one batch of 1", batches)
	}
	// Unbounded, the whole conversation comes in full batches.
	msgs, err := st.Chat().Load(ctxT(t), "x", 1, 0)
	if err != nil || len(msgs) != 30 {
		t.Fatalf("x: %d messages, %v; want 30", len(msgs), err)
	}
}

// requestSpy sees the direct get requests the server receives on a subject.
type requestSpy struct {
	nc  *nats.Conn
	sub *nats.Subscription
}

type directRequest struct {
	Next  string   `json:"next_by_subj"`
	Last  []string `json:"multi_last"`
	Batch int      `json:"batch"`
}

func seeRequests(t *testing.T, nc *nats.Conn, subject string) *requestSpy {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &requestSpy{nc: nc, sub: sub}
}

// count returns how many requests were seen so far (see requests).
func (r *requestSpy) count(t *testing.T) int {
	t.Helper()
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, err := r.sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stop ends the spying.
func (r *requestSpy) stop() { _ = r.sub.Unsubscribe() }

// requests returns the requests seen so far: after the flush's round trip every copy
// the server sent before it is in the subscription's queue (the connection reads in
// order).
func (r *requestSpy) requests(t *testing.T) []directRequest {
	t.Helper()
	n := r.count(t)
	out := make([]directRequest, 0, n)
	for range n {
		m, err := r.sub.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var req directRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("request %q: %v", m.Data, err)
		}
		out = append(out, req)
	}
	return out
}
