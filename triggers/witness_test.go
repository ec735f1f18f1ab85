package triggers_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/holes"
)

// TestRequestCarriesWhatTheTriggerSaw: the request's witness is the count and power
// sums of every message of the conversation stored from its tail start through
// up_to_seq, whoever published them: several producers at once, interleaved with
// other conversations, a client that sets none of Compactor's fields (a bare publish,
// no headers), an invalid message, and the messages a rebuild read from the stream
// before the trigger started.
func TestRequestCarriesWhatTheTriggerSaw(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	ctx := context.Background()
	subj, err := st.Config().ChatSubject("w")
	if err != nil {
		t.Fatal(err)
	}
	// Before the trigger runs: read by its rebuild.
	for range 3 {
		publish(t, st, "w", text(40))
	}
	if err := nc.Publish(subj, []byte(`{"role":"user","content":"from another client"}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(subj, []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start(t, st)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := range 12 {
				conv := "w"
				if i%3 == 0 {
					conv = fmt.Sprintf("other-%d", p)
				}
				m := text(400)
				b, _ := m.Encode()
				if _, err := st.Chat().Publish(ctx, conv, b, ""); err != nil {
					t.Error(err)
				}
				if i == 5 {
					if err := nc.Publish(subj, []byte(`{"role":"assistant","content":"bare"}`)); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	// Then past the threshold for sure.
	for range 40 {
		publish(t, st, "w", text(800))
	}
	waitFor(t, "a request for w", func() bool {
		return slices.ContainsFunc(reqs.all(), func(r schemas.Request) bool { return r.Conversation == "w" })
	})
	var req schemas.Request
	for _, r := range reqs.all() {
		if r.Conversation == "w" {
			req = r
			break
		}
	}
	if req.Witness == nil {
		t.Fatalf("request %+v carries no witness", req)
	}
	stored, err := st.Chat().Load(ctx, "w", 1, req.UpToSeq)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, m := range stored {
		seqs = append(seqs, m.Seq)
	}
	want := holes.Of(seqs[0], req.UpToSeq, seqs)
	if got := *req.Witness; got.FromSeq != want.FromSeq || got.ThroughSeq != want.ThroughSeq || got.Count != want.Count || !slices.Equal(got.Sums, want.Sums) {
		t.Fatalf("witness got %+v; want %+v (the %d messages stored through %d)", got, want, len(seqs), req.UpToSeq)
	}
	if r := holes.Compare(*req.Witness, seqs); r.Missing != 0 || r.Disagrees {
		t.Fatalf("compared with what is stored: %+v; want nothing missing", r)
	}
}
