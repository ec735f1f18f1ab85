package pipeline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

func TestRecall(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		var seqs []uint64
		pub := func(m schemas.Message) {
			t.Helper()
			seq, err := c.Publish(ctx, "rc", m)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		pub(schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Read the deploy log"), Meta: map[string]string{"team": "x"}})
		pub(call("c1"))
		pub(bigOutput("c1", 3*maxPayload)) // stored as a stub; recall shows it whole
		pub(schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("The log is fine.")})
		pub(schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("thanks")})

		t.Run("a query matching a large tool result returns its round whole", func(t *testing.T) {
			got, err := c.Recall(ctx, "rc", pipeline.Query("needle-TAIL"), pipeline.MaxTokens(100_000))
			if err != nil {
				t.Fatal(err)
			}
			if got.Returned != 2 || got.Messages[0].Seq != seqs[1] || got.Messages[1].Seq != seqs[2] {
				t.Fatalf("recalled %+v; want the call %d and its result %d", got.Messages, seqs[1], seqs[2])
			}
			if s := got.Messages[1].Message.Content.String(); !strings.HasSuffix(s, "NEEDLE-tail") || got.Messages[1].Message.ContentRef != nil {
				t.Fatalf("the large result was not resolved: %q...", s[:min(40, len(s))])
			}
		})
		t.Run("the default budget leaves the large round out and names it", func(t *testing.T) {
			got, err := c.Recall(ctx, "rc")
			if err != nil {
				t.Fatal(err)
			}
			if got.MaxTokens != schemas.DefaultRecallMaxTokens || !got.CutByBudget || len(got.SkippedSeqs) != 1 || got.SkippedSeqs[0] != seqs[1] {
				t.Fatalf("got max %d cut %v skipped %v; want the round at %d skipped", got.MaxTokens, got.CutByBudget, got.SkippedSeqs, seqs[1])
			}
			want := []uint64{seqs[4], seqs[3], seqs[0]}
			if got.Returned != 3 || got.Messages[0].Seq != want[0] || got.Messages[1].Seq != want[1] || got.Messages[2].Seq != want[2] {
				t.Fatalf("recalled %+v; want seqs %v", got.Messages, want)
			}
			if got.Messages[2].Message.Meta != nil {
				t.Fatal("recalled message keeps meta")
			}
		})
		t.Run("a range", func(t *testing.T) {
			got, err := c.Recall(ctx, "rc", pipeline.FromSeq(seqs[3]), pipeline.ToSeq(seqs[3]))
			if err != nil {
				t.Fatal(err)
			}
			if got.Returned != 1 || got.Messages[0].Seq != seqs[3] || got.ScannedFromSeq != seqs[3] || got.ScannedToSeq != seqs[3] {
				t.Fatalf("got %+v; want only %d", got, seqs[3])
			}
		})
		t.Run("a range that cuts a round leaves it out", func(t *testing.T) {
			got, err := c.Recall(ctx, "rc", pipeline.FromSeq(seqs[2]), pipeline.ToSeq(seqs[3]), pipeline.MaxTokens(100_000))
			if err != nil {
				t.Fatal(err)
			}
			if got.Returned != 1 || got.Incomplete != 1 {
				t.Fatalf("returned %d, incomplete %d; want 1, 1 (the result without its call)", got.Returned, got.Incomplete)
			}
		})
		t.Run("invalid options name the rule", func(t *testing.T) {
			for _, tc := range []struct {
				conv string
				opts []pipeline.ContextOption
				want string
			}{
				{"a.b", nil, "conversation"},
				{"rc", []pipeline.ContextOption{pipeline.FromSeq(5), pipeline.ToSeq(2)}, "from_seq"},
				{"rc", []pipeline.ContextOption{pipeline.MaxTokens(-1)}, "max_tokens"},
				{"rc", []pipeline.ContextOption{pipeline.Query(strings.Repeat("q", schemas.MaxRecallQueryBytes+1))}, "query"},
			} {
				_, err := c.Recall(ctx, tc.conv, tc.opts...)
				var ve *schemas.ValidationError
				if !errors.As(err, &ve) || ve.Field != tc.want {
					t.Errorf("Recall(%s) error = %v; want a validation error of %s", tc.conv, err, tc.want)
				}
			}
		})
	})
}

func TestAnswerRecallTellsTheModelWhatWasWrong(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Publish(ctx, "ar", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ args, want string }{
			{`{"query":"HELLO"}`, `"returned":1`},
			{``, `"returned":1`},
			{`{"from_seq":5,"to_seq":1}`, `{"error":"from_seq: must not be after to_seq (5 \u003e 1)"}`},
			{`{"pattern":"x"}`, `{"error":"arguments: must be a JSON object of query, from_seq, to_seq and max_tokens (unknown field \"pattern\")"}`},
		} {
			got, err := c.AnswerRecall(ctx, "ar", tc.args)
			if err != nil || !strings.Contains(got, tc.want) {
				t.Errorf("AnswerRecall(%s) = %s, %v; want %s", tc.args, got, err, tc.want)
			}
		}
		if _, err := c.AnswerRecall(ctx, "a b", `{}`); err == nil {
			t.Error("a bad conversation id is an error of the caller, not an answer to the model")
		}
	})
}
