package pipeline_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// The client keeps each conversation's open tool calls in place from round to round.
// Its verdict on every tool message of a random run of rounds (calls, plain assistant
// answers, results of the newest round's calls, of older rounds' and of no call,
// answered once or twice) is the rule's: a result answers an unanswered call of the
// newest assistant message. Several conversations are mixed, and a fresh client, which
// reads the stream instead, agrees on every refusal.
func TestToolPairingFollowsTheNewestRound(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		rnd := rand.New(rand.NewPCG(7, 19))
		newest := map[string]map[string]bool{} // conversation → call id → answered
		ids := map[string][]string{}           // conversation → every call id so far
		for step := range 400 {
			conv := fmt.Sprintf("pair-%d", rnd.IntN(3))
			if rnd.IntN(3) == 0 || len(ids[conv]) == 0 {
				m := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("thinking")}
				round := map[string]bool{}
				for k := range rnd.IntN(4) {
					id := fmt.Sprintf("%s-s%d-%d", conv, step, k)
					m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}})
					round[id] = false
					ids[conv] = append(ids[conv], id)
				}
				if _, err := c.Publish(ctx, conv, m); err != nil {
					t.Fatal(err)
				}
				newest[conv] = round
				continue
			}
			id := ids[conv][rnd.IntN(len(ids[conv]))]
			if rnd.IntN(8) == 0 {
				id = "never-called"
			}
			answered, open := newest[conv][id]
			want := open && !answered
			_, err := c.Publish(ctx, conv, result(id))
			if (err == nil) != want || (err != nil && !errors.Is(err, pipeline.ErrToolResultWithoutCall)) {
				t.Fatalf("step %d: result of %s in %s: %v; want accepted %v", step, id, conv, err, want)
			}
			if want {
				newest[conv][id] = true
				continue
			}
			if _, err := pipeline.NewWithStore(nc, st).Publish(ctx, conv, result(id)); !errors.Is(err, pipeline.ErrToolResultWithoutCall) {
				t.Fatalf("step %d: a client reading the stream took the result of %s in %s the client refused: %v", step, id, conv, err)
			}
		}
	})
}
