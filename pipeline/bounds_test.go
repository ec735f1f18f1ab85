package pipeline_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// declaredOne is a tool output of about n bytes whose producer says it is one token.
func declaredOne(id string, n int) schemas.Message {
	body := strings.Repeat("log line 0123456789 abcdefghijklmnopqrstuvwxyz\n", n/48)
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(body), Tokens: 1}
}

// checkCutToBudget reads conv with MaxTokens(budget) and checks that the declared count
// did not hide the content: the read is cut to the budget and flagged degraded.
func checkCutToBudget(t *testing.T, c *pipeline.Client, conv string, last uint64, budget int) {
	t.Helper()
	whole, err := c.Context(ctxT(t), conv, pipeline.AtLeastSeq(last))
	if err != nil {
		t.Fatal(err)
	}
	if whole.Tokens < 100_000 {
		t.Errorf("an uncut read counts %d tokens; want the content's weight (over 100,000), not the declared 1", whole.Tokens)
	}
	for _, opts := range [][]pipeline.ContextOption{{}, {pipeline.Raw()}} {
		cx, err := c.Context(ctxT(t), conv, append(opts, pipeline.AtLeastSeq(last), pipeline.MaxTokens(budget))...)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, m := range cx.Messages {
			size += len(m.Content.String())
		}
		if !cx.Degraded || cx.Tokens > budget || size > 4*budget {
			t.Errorf("read with MaxTokens %d: degraded %v, %d tokens, %d bytes of text; want a degraded read within the budget",
				budget, cx.Degraded, cx.Tokens, size)
		}
	}
}

// A 900 KB tool output its producer marks `tokens: 1`, read with MaxTokens 8,000,
// is cut to the budget and flagged degraded: the read-time cut counts the content,
// not the declared count (issue 18). It failed before: about 225,000 tokens of text
// came back, not degraded.
func TestDeclaredTokensDoNotHideContentFromTheCut(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		var last uint64
		for i, m := range []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("read the log")},
			call("c1"),
			declaredOne("c1", 900_000),
			{Role: schemas.RoleAssistant, Content: schemas.Text("done")},
		} {
			var err error
			if last, err = c.Publish(ctxT(t), "declared", m); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		checkCutToBudget(t, c, "declared", last, 8000)
	})
}

// The same through a stub: a message over the max payload is stored as an object, its
// stub keeps the declared `tokens: 1`, and the reader counts what the object holds.
func TestDeclaredTokensOfAStubDoNotHideItsObject(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		var last uint64
		for i, m := range []schemas.Message{call("c1"), declaredOne("c1", 900_000)} {
			var err error
			if last, err = c.Publish(ctxT(t), "declared-stub", m); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		if raw := stored(t, st, "declared-stub"); raw[1].Message.ContentRef == nil || raw[1].Message.Tokens != 1 {
			t.Fatalf("CHAT holds %+v; want a stub that keeps tokens 1", raw[1].Message)
		}
		checkCutToBudget(t, c, "declared-stub", last, 8000)
	})
}
