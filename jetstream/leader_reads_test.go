package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// twoLayouts is a conversation ("mixed") with n messages on the unpartitioned layout,
// then n on the 4-partition one, among the messages of another; it returns the stores
// of both configurations and mixed's sequences.
func twoLayouts(t *testing.T, n int) (st1, st4 *jetstream.Store, want []uint64, spy func(subject string) *requestSpy) {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st1, err := jetstream.Provision(ctxT(t), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	publish := func(st *jetstream.Store, conv string, i int) uint64 {
		t.Helper()
		seq, err := st.Chat().Publish(ctxT(t), conv, fmt.Appendf(nil, `{"role":"user","content":"m%d"}`, i), "")
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	for i := range n {
		want = append(want, publish(st1, "mixed", i))
		publish(st1, "other", i)
	}
	four := jetstream.DefaultConfig()
	four.TriggerPartitions = 4
	four.UpdateExisting = true
	if st4, err = jetstream.Provision(ctxT(t), nc, four); err != nil {
		t.Fatal(err)
	}
	for i := n; i < 2*n; i++ {
		want = append(want, publish(st4, "mixed", i))
		publish(st4, "other", i)
	}
	return st1, st4, want, func(subject string) *requestSpy { return seeRequests(t, nc, subject) }
}

func seqsOf(msgs []jetstream.StoredMsg) []uint64 {
	out := make([]uint64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

// LoadLeader reads a range as the leader has it with one leader request (the
// conversation's newest message) and batched direct gets of literal subjects, not one
// leader request a message filtered on the conversation's wildcard; it returns what the
// one-message-a-request read returns, across two partition layouts. Before, a read of
// 80 messages sent 81 leader requests. A conversation on two layouts (while the
// partition count changes) is read from the leader whole: the batched answers for its two
// subjects may come from two replicas, and a message of one says nothing of what the
// other lacks (a review found a lagging replica's gap left unread).
func TestLoadLeaderReadsInBatches(t *testing.T) {
	st1, st4, want, spy := twoLayouts(t, 40)
	var single []uint64 // a conversation on the 4-partition layout only
	for i := range 40 {
		seq, err := st4.Chat().Publish(ctxT(t), "single", fmt.Appendf(nil, `{"role":"user","content":"s%d"}`, i), "")
		if err != nil {
			t.Fatal(err)
		}
		single = append(single, seq)
	}
	ranges := [][2]uint64{{0, 0}, {want[0], 0}, {want[5], want[60]}, {want[39], want[40]}, {want[41], 0}, {want[79], 0},
		{want[79] + 1, 0}, {want[10], want[10]}, {want[10] + 1, want[11] - 1}}
	for _, st := range []*jetstream.Store{st1, st4} {
		leader := spy("$JS.API.STREAM.MSG.GET.CHAT")
		for _, r := range [][2]uint64{{0, 0}, {single[5], single[30]}, {single[39], 0}} {
			if _, err := st.Chat().LoadLeader(ctxT(t), "single", r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
		if n := leader.count(t); n != 3 {
			t.Fatalf("%d leader requests for 3 reads of a conversation on one layout; want one a read", n)
		}
		leader.stop()
		leader = spy("$JS.API.STREAM.MSG.GET.CHAT")
		direct := spy("$JS.API.DIRECT.GET.CHAT")
		got := make([][]jetstream.StoredMsg, len(ranges))
		for i, r := range ranges {
			var err error
			if got[i], err = st.Chat().LoadLeader(ctxT(t), "mixed", r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
		for _, req := range direct.requests(t) {
			if strings.ContainsAny(req.Next, "*>") {
				t.Fatalf("a batched read filtered on %q; want literal subjects only", req.Next)
			}
		}
		leader.stop()
		direct.stop()
		for i, r := range ranges {
			ref, err := jetstream.LeaderTail(st.Chat(), ctxT(t), "mixed", r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seqsOf(got[i]), seqsOf(ref)) {
				t.Fatalf("range %v: LoadLeader %v; the leader one by one %v", r, seqsOf(got[i]), seqsOf(ref))
			}
			for j, m := range got[i] {
				if m.Subject != ref[j].Subject || string(m.Data) != string(ref[j].Data) {
					t.Fatalf("range %v, message %d: %s %q; the leader has %s %q", r, m.Seq, m.Subject, m.Data, ref[j].Subject, ref[j].Data)
				}
			}
		}
		if len(got[0]) != len(want) {
			t.Fatalf("the whole conversation: %d messages; want %d", len(got[0]), len(want))
		}
	}
}

// A forget finds the messages it erases and the objects they name with batched reads of
// the conversation's literal subjects, never a read filtered on its wildcard (which the
// server answers, from a later sequence, by walking every block in between once the
// stream holds 64Ki subjects), across two partition layouts. Before, both paged on
// chat.<conv>.>.
func TestForgetReadsLiteralSubjects(t *testing.T) {
	st1, _, want, spy := twoLayouts(t, 300) // over a batch on each layout
	direct := spy("$JS.API.DIRECT.GET.CHAT")
	out, err := st1.Forget(ctxT(t), "mixed")
	if err != nil {
		t.Fatal(err)
	}
	if d := out.Deleted; d.ChatMessagesErased != uint64(len(want)) || d.ChatMessages != uint64(len(want)) {
		t.Fatalf("deleted %+v; want all %d messages erased", d, len(want))
	}
	reads := 0
	for _, req := range direct.requests(t) {
		if strings.ContainsAny(req.Next, "*>") {
			t.Fatalf("a batched read filtered on %q; want literal subjects only", req.Next)
		}
		if req.Next != "" {
			reads++
		}
	}
	if reads == 0 {
		t.Fatal("no batched read seen")
	}
	if msgs, err := st1.Chat().Load(ctxT(t), "other", 1, 0); err != nil || len(msgs) != len(want) {
		t.Fatalf("the other conversation: %d messages, %v; want %d", len(msgs), err, len(want))
	}
}

// LoadPinned reads each pinned message by its sequence, never with a filter on the
// conversation's wildcard (from a pinned message gone by age, the server would walk
// every block after it), across two layouts; a sequence of another conversation, one
// past the end and 0 are missing. Before, each was a batched read filtered on
// chat.<conv>.>.
func TestLoadPinnedReadsBySequence(t *testing.T) {
	_, st4, want, spy := twoLayouts(t, 5)
	direct := spy("$JS.API.DIRECT.GET.CHAT")
	leader := spy("$JS.API.STREAM.MSG.GET.CHAT")
	other := want[2] + 1 // "other" was published right after each of mixed's
	seqs := []uint64{want[1], want[7], other, want[9] + 100, 0, want[3]}
	es, err := st4.Chat().LoadPinned(ctxT(t), "mixed", seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		missing := seqs[i] == other || seqs[i] == want[9]+100 || seqs[i] == 0
		if missing != errors.Is(e.Err, jetstream.ErrMissingMessage) || e.Seq != seqs[i] {
			t.Fatalf("pinned %d: entry %d, %v; missing: %v", seqs[i], e.Seq, e.Err, missing)
		}
		if !missing && (e.Err != nil || e.Message.Role == "") {
			t.Fatalf("pinned %d: %+v", seqs[i], e)
		}
	}
	for _, req := range direct.requests(t) {
		if req.Next != "" {
			t.Fatalf("a pinned read filtered on %q; want a read by sequence", req.Next)
		}
	}
	if n := leader.count(t); n != 2 { // the two missing ones are confirmed by the leader
		t.Fatalf("%d leader requests; want 2", n)
	}
}

// BenchmarkLoadLeader reads a 200-message conversation spread over a stream of 70,000
// conversations (past the 64Ki subjects where the server stops skipping ahead on a
// wildcard filter) as the leader has it: LoadLeader against the read of one message a
// request on the conversation's wildcard that LoadLeader was before.
func BenchmarkLoadLeader(b *testing.B) {
	srv := jstest.Server(b)
	st := jstest.Provision(b, jstest.Conn(b, srv))
	const others, mine = 70_000, 200
	data := []byte(`{"role":"user","content":"` + strings.Repeat("w", 100) + `"}`)
	for i := range others {
		if i%(others/mine) == 0 {
			if _, err := st.Chat().PublishAsync("target", data, ""); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := st.Chat().PublishAsync(fmt.Sprintf("c%d", i), data, ""); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 0 {
			<-st.Chat().PublishAsyncComplete()
		}
	}
	<-st.Chat().PublishAsyncComplete()
	ctx := context.Background()
	reads := []struct {
		name string
		read func() ([]jetstream.StoredMsg, error)
	}{
		{"batched", func() ([]jetstream.StoredMsg, error) { return st.Chat().LoadLeader(ctx, "target", 1, 0) }},
		{"one-by-one", func() ([]jetstream.StoredMsg, error) { return jetstream.LeaderTail(st.Chat(), ctx, "target", 1, 0) }},
	}
	for _, tc := range reads {
		if _, err := tc.read(); err != nil { // the server's blocks loaded for both alike
			b.Fatal(err)
		}
	}
	for _, tc := range reads {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				msgs, err := tc.read()
				if err != nil || len(msgs) != mine {
					b.Fatalf("%d messages, %v; want %d", len(msgs), err, mine)
				}
			}
		})
	}
}
