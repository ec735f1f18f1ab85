package jetstream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A range whose to_seq lies past the stream's last sequence (an agent asking "up to
// 1000" of a short conversation) recalls the messages up to the newest one, as a
// to_seq left out does: the server finds no message up to a sequence it does not hold
// yet, so the reader asks for the newest instead.
func TestRecallToSeqPastTheStreamEnd(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var seqs []uint64
		for _, data := range []string{`{"role":"user","content":"one"}`, `{"role":"assistant","content":"two"}`} {
			seq, err := st.Chat().Publish(ctx, "short", []byte(data), "")
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		for _, to := range []uint64{seqs[1], seqs[1] + 1, seqs[1] + 1000} {
			r, err := st.Recall(ctx, schemas.RecallRequest{Conversation: "short", FromSeq: 1, ToSeq: to}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := recalledSeqs(r); !slices.Equal(got, []uint64{seqs[1], seqs[0]}) || r.ScannedToSeq != seqs[1] {
				t.Fatalf("recall of 1 to %d = %v (scanned to %d); want %v, newest first", to, got, r.ScannedToSeq, seqs)
			}
		}
	})
}
