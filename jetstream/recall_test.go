package jetstream_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

func recalledSeqs(r *schemas.RecallResponse) []uint64 {
	out := []uint64{}
	for _, m := range r.Messages {
		out = append(out, m.Seq)
	}
	return out
}

// Recall reads in windows newest to oldest; whatever the windows, it answers what one
// selection over the whole range answers, with rounds that cross windows kept whole.
func TestRecallMatchesOneSelectionOverTheRange(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		// One context for the publishes and every case: under -race on a loaded machine
		// they take more than ctxT's 20 s together.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pub := func(conv, data string) uint64 {
			t.Helper()
			seq, err := st.Chat().Publish(ctx, conv, []byte(data), "")
			if err != nil {
				t.Fatal(err)
			}
			return seq
		}
		// Conversation a: 1500 rounds of user, parallel calls, results (one result
		// after a message of b, so a's rounds straddle sequences of others), reply.
		// Conversation b is dense in between, so a is sparse in the stream.
		var first uint64
		for i := range 1500 {
			s := pub("a", fmt.Sprintf(`{"role":"user","content":"question %d"}`, i))
			if first == 0 {
				first = s
			}
			pub("a", fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[`+
				`{"id":"x%d","type":"function","function":{"name":"read","arguments":"{\"n\":%d}"}},`+
				`{"id":"y%d","type":"function","function":{"name":"grep","arguments":"{}"}}]}`, i, i, i))
			pub("a", fmt.Sprintf(`{"role":"tool","tool_call_id":"x%d","content":"file %d"}`, i, i))
			for j := range 4 { // a period of 9 sequences: windows of 1024 start at every phase
				pub("b", fmt.Sprintf(`{"role":"user","content":"b %d %d"}`, i, j))
			}
			pub("a", fmt.Sprintf(`{"role":"tool","tool_call_id":"y%d","content":"needle-%d"}`, i, i%7))
			pub("a", `{"role":"assistant","content":"ok"}`)
		}
		all, err := st.Chat().LoadEntries(ctx, "a", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := all[len(all)-1].Seq
		for _, tc := range []struct {
			name     string
			req      schemas.RecallRequest
			from, to int // indexes into all of the range
		}{
			{name: "everything, small budget", req: schemas.RecallRequest{MaxTokens: 300}, from: 0, to: len(all)},
			{name: "query over everything", req: schemas.RecallRequest{Query: "NEEDLE-3", MaxTokens: 1_000_000}, from: 0, to: len(all)},
			{name: "range cutting rounds at both ends", req: schemas.RecallRequest{
				FromSeq: all[1002].Seq, ToSeq: all[6003].Seq, MaxTokens: 1_000_000}, from: 1002, to: 6004},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := tc.req
				req.Conversation = "a"
				got, err := st.Recall(ctx, req, jetstream.MaxRecallScanLimit)
				if err != nil {
					t.Fatal(err)
				}
				want := recall.Select(all[tc.from:tc.to], recall.Options{Query: req.Query, MaxTokens: req.MaxTokens})
				if !reflect.DeepEqual(recalledSeqs(got), recalledSeqs(&want)) {
					t.Fatalf("recalled %d messages; want %d (first %v)", len(got.Messages), len(want.Messages),
						recalledSeqs(got)[:min(6, len(got.Messages))])
				}
				if got.Matched != want.Matched || got.Incomplete != want.Incomplete || got.CutByBudget != want.CutByBudget {
					t.Errorf("matched, incomplete, cut = %d, %d, %v; want %d, %d, %v", got.Matched, got.Incomplete,
						got.CutByBudget, want.Matched, want.Incomplete, want.CutByBudget)
				}
				if !got.ScanComplete || got.ScannedToSeq != all[tc.to-1].Seq || got.ScannedFromSeq != max(req.FromSeq, 1) {
					t.Errorf("scan = [%d, %d] complete %v; want [%d, %d] complete", got.ScannedFromSeq, got.ScannedToSeq,
						got.ScanComplete, max(req.FromSeq, 1), all[tc.to-1].Seq)
				}
			})
		}
		t.Run("the scan stops at its bound and says where", func(t *testing.T) {
			got, err := st.Recall(ctx, schemas.RecallRequest{Conversation: "a", Query: "question", MaxTokens: 1_000_000}, 100)
			if err != nil {
				t.Fatal(err)
			}
			if got.ScanComplete || got.ScannedToSeq != last || got.ScannedFromSeq <= first {
				t.Fatalf("scan = [%d, %d] complete %v; want an incomplete scan ending at %d", got.ScannedFromSeq,
					got.ScannedToSeq, got.ScanComplete, last)
			}
			for _, m := range got.Messages {
				if m.Seq < got.ScannedFromSeq {
					t.Fatalf("message %d is older than the scanned range [%d, %d]", m.Seq, got.ScannedFromSeq, last)
				}
			}
			if got.Returned == 0 || got.Returned > 100/5+1 {
				t.Fatalf("returned %d questions from a scan of 100 messages", got.Returned)
			}
		})
		t.Run("nothing in range", func(t *testing.T) {
			got, err := st.Recall(ctx, schemas.RecallRequest{Conversation: "nobody"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Messages) != 0 || !got.ScanComplete || got.ScannedToSeq != 0 {
				t.Fatalf("got %+v; want nothing, a complete scan", got)
			}
		})
		t.Run("invalid requests are refused", func(t *testing.T) {
			for _, req := range []schemas.RecallRequest{{Conversation: "a.b"}, {Conversation: "a", FromSeq: 9, ToSeq: 3}, {Conversation: "a", MaxTokens: -1}} {
				if _, err := st.Recall(ctx, req, 0); err == nil {
					t.Errorf("Recall(%+v) succeeded; want an error", req)
				}
			}
			if _, err := st.Recall(ctx, schemas.RecallRequest{Conversation: "a"}, -1); err == nil {
				t.Error("scan limit -1 accepted")
			}
		})
	})
}

// A conversation stored on two layouts (the partition count changed between a tool call
// and its result) is recalled in stream order, the round whole across them.
func TestRecallAcrossLayouts(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st1, err := jetstream.Provision(ctxT(t), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pub := func(st *jetstream.Store, data string) uint64 {
		t.Helper()
		seq, err := st.Chat().Publish(ctxT(t), "mixed", []byte(data), "")
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	u := pub(st1, `{"role":"user","content":"list the files"}`)
	c := pub(st1, `{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"ls","arguments":"{}"}}]}`)
	four := jetstream.DefaultConfig()
	four.TriggerPartitions = 4
	four.UpdateExisting = true
	st4, err := jetstream.Provision(ctxT(t), nc, four)
	if err != nil {
		t.Fatal(err)
	}
	r := pub(st4, `{"role":"tool","tool_call_id":"t1","content":"main.go README.md"}`)
	a := pub(st4, `{"role":"assistant","content":"Two files."}`)
	for _, st := range []*jetstream.Store{st1, st4} {
		got, err := st.Recall(ctxT(t), schemas.RecallRequest{Conversation: "mixed"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{a, c, r, u}; !reflect.DeepEqual(recalledSeqs(got), want) {
			t.Fatalf("recalled %v; want %v", recalledSeqs(got), want)
		}
		got, err = st.Recall(ctxT(t), schemas.RecallRequest{Conversation: "mixed", Query: "readme"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{c, r}; !reflect.DeepEqual(recalledSeqs(got), want) {
			t.Fatalf("recalled %v; want the round %v", recalledSeqs(got), want)
		}
	}
}

// A tool result far from its call (other conversations' messages in between): the scan
// skips the stretch and finds the call; with from_seq past the call, the result is
// counted as incomplete, not lost.
func TestRecallARoundAcrossAGap(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		pub := func(conv, data string) uint64 {
			t.Helper()
			seq, err := st.Chat().Publish(ctx, conv, []byte(data), "")
			if err != nil {
				t.Fatal(err)
			}
			return seq
		}
		c := pub("g", `{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"wait","arguments":"{}"}}]}`)
		for i := range 3000 {
			pub("noise", fmt.Sprintf(`{"role":"user","content":"%d"}`, i))
		}
		r := pub("g", `{"role":"tool","tool_call_id":"t1","content":"waited"}`)
		a := pub("g", `{"role":"assistant","content":"done"}`)
		got, err := st.Recall(ctx, schemas.RecallRequest{Conversation: "g"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{a, c, r}; !reflect.DeepEqual(recalledSeqs(got), want) || got.Incomplete != 0 || !got.ScanComplete {
			t.Fatalf("recalled %v (incomplete %d); want %v", recalledSeqs(got), got.Incomplete, want)
		}
		got, err = st.Recall(ctx, schemas.RecallRequest{Conversation: "g", FromSeq: c + 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{a}; !reflect.DeepEqual(recalledSeqs(got), want) || got.Incomplete != 1 || got.ScannedFromSeq != c+1 {
			t.Fatalf("from %d: recalled %v (incomplete %d, scanned from %d); want %v and the result counted", c+1,
				recalledSeqs(got), got.Incomplete, got.ScannedFromSeq, want)
		}
	})
}
