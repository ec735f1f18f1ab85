package pipeline_test

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Review of issue 12: RecallResponse.ScanComplete documents how to page through a long
// conversation: "ask again with to_seq below ScannedFromSeq to go on". A tool round
// whose call lies just below the scan's bound and whose result lies just above it is
// then returned by neither page: the first counts the result as incomplete (its call
// was not scanned), the second the call (its result is past to_seq). Paging as
// documented must return every round whole in one of the pages.
func TestRecallPagingKeepsARoundAcrossTheScanBound(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		var seqs []uint64
		for _, m := range []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("start")},
			call("c1"),
			result("c1"),
			{Role: schemas.RoleUser, Content: schemas.Text("next")},
		} {
			seq, err := c.Publish(ctx, "page", m)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		var returned []uint64
		opts := []pipeline.ContextOption{pipeline.ScanLimit(2), pipeline.MaxTokens(100_000)}
		for page := 0; page < 4; page++ {
			r, err := c.Recall(ctx, "page", opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range r.Messages {
				returned = append(returned, m.Seq)
			}
			if r.ScanComplete {
				break
			}
			opts = []pipeline.ContextOption{pipeline.ScanLimit(2), pipeline.MaxTokens(100_000), pipeline.ToSeq(r.ScannedFromSeq - 1)}
		}
		if !slices.Contains(returned, seqs[1]) || !slices.Contains(returned, seqs[2]) {
			t.Fatalf("paging with to_seq below scanned_from_seq returned seqs %v; the round %d-%d (call and result) is in no page",
				returned, seqs[1], seqs[2])
		}
	})
}
