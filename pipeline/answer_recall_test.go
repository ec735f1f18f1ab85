package pipeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// AnswerRecall caps what a model's call may ask for (8000 tokens unless the application
// sets another cap) and says what was asked; a call that asks for nothing, or 0, gets
// the default budget. (Before, a model asking for 1,000,000 tokens got them all.)
func TestAnswerRecallCapsTheBudgetAndSaysWhatWasAsked(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		for i := range 6 { // about 1,500 tokens each: 9,000 in all
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("%d %s", i, strings.Repeat("w", 6000)))}
			if _, err := c.Publish(ctx, "cap", m); err != nil {
				t.Fatal(err)
			}
		}
		answer := func(args string, opts ...pipeline.ContextOption) schemas.RecallResponse {
			t.Helper()
			got, err := c.AnswerRecall(ctx, "cap", args, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var r schemas.RecallResponse
			if err := json.Unmarshal([]byte(got), &r); err != nil {
				t.Fatalf("answer %.200s: %v", got, err)
			}
			if r.Tokens > r.MaxTokens {
				t.Fatalf("answer of %d tokens over its budget %d", r.Tokens, r.MaxTokens)
			}
			if strings.Contains(got, "asked_max_tokens") != (r.AskedMaxTokens != 0) {
				t.Fatalf("asked_max_tokens encoded as %.300s", got)
			}
			return r
		}
		for _, tc := range []struct {
			args             string
			opts             []pipeline.ContextOption
			budget, asked, n int
		}{
			{args: `{"max_tokens":1000000}`, budget: schemas.DefaultAnswerRecallMaxTokens, asked: 1_000_000, n: 5},
			{args: `{"max_tokens":8001}`, budget: 8000, asked: 8001, n: 5},
			{args: `{"max_tokens":3000}`, budget: 3000, n: 1},
			{args: `{}`, budget: schemas.DefaultRecallMaxTokens, n: 2},
			{args: `{"max_tokens":0}`, budget: schemas.DefaultRecallMaxTokens, n: 2},
			{args: `{"max_tokens":5000}`, opts: []pipeline.ContextOption{pipeline.MaxTokens(2000)}, budget: 2000, asked: 5000, n: 1},
			{args: `{}`, opts: []pipeline.ContextOption{pipeline.MaxTokens(2000)}, budget: 2000, n: 1},
			{args: `{"max_tokens":20000}`, opts: []pipeline.ContextOption{pipeline.MaxTokens(0)}, budget: 8000, asked: 20000, n: 5},
		} {
			r := answer(tc.args, tc.opts...)
			if r.MaxTokens != tc.budget || r.AskedMaxTokens != tc.asked || r.Returned != tc.n {
				t.Errorf("AnswerRecall(%s, cap %d): budget %d asked %d returned %d; want %d, %d, %d", tc.args, len(tc.opts),
					r.MaxTokens, r.AskedMaxTokens, r.Returned, tc.budget, tc.asked, tc.n)
			}
		}
		if _, err := c.AnswerRecall(ctx, "cap", `{}`, pipeline.MaxTokens(-1)); !errors.Is(err, schemas.ErrInvalid) {
			t.Errorf("a negative cap: %v; want an error of the caller", err)
		}
		// Recall itself and the service take 0 as the default too.
		r, err := c.Recall(ctx, "cap", pipeline.MaxTokens(0))
		if err != nil || r.MaxTokens != schemas.DefaultRecallMaxTokens || r.AskedMaxTokens != 0 {
			t.Fatalf("Recall with MaxTokens(0): %+v, %v", r, err)
		}
	})
}
