package pipeline_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

func say(role schemas.Role, s string) schemas.Message {
	return schemas.Message{Role: role, Content: schemas.Text(s)}
}

// TestRenderedPrefixIsStableBetweenCompactions publishes a conversation to a real
// nats-server, writes a compaction, and reads it back rendered in every format while
// the tail grows (a user message right after the summary, tool rounds, a system
// message): the rendered prefix (pinned + summary message, evidence included) stays byte-identical until
// the next compaction, and changes with it.
func TestRenderedPrefixIsStableBetweenCompactions(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		const conv = "cache-1"
		publish := func(ms ...schemas.Message) uint64 {
			t.Helper()
			var seq uint64
			for _, m := range ms {
				var err error
				if seq, err = c.Publish(ctx, conv, m); err != nil {
					t.Fatal(err)
				}
			}
			return seq
		}
		publish(say(schemas.RoleSystem, "You are a coding agent."),
			say(schemas.RoleUser, "fix the tests"), call("c1"), result("c1"), say(schemas.RoleAssistant, "pkg/a is fixed"))
		tail := publish(say(schemas.RoleUser, "now pkg/b")) // seq 6: the tail starts here
		value := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, TailStartSeq: tail,
			CoveredThroughSeq: tail - 1, PinnedSeqs: []uint64{1}, Summary: "The user asked to fix the tests; pkg/a is fixed."}
		rev, err := st.Results().Put(ctx, value, 0)
		if err != nil {
			t.Fatal(err)
		}

		render := func(f formats.Format, atLeast uint64) formats.Request {
			t.Helper()
			req, err := c.Render(ctx, conv, f, pipeline.AtLeastSeq(atLeast))
			if err != nil {
				t.Fatal(err)
			}
			return req
		}
		first := map[formats.Format]formats.Request{}
		for _, name := range formats.Names() {
			f := formats.Format(name)
			first[f] = render(f, tail)
			p := first[f].JSON[:first[f].Prefix]
			// The summary message as the reader builds it (with the evidence section
			// when the value has one), JSON-escaped as in the rendering.
			sum, _ := json.Marshal(assemble.SummaryMessage(value).Content.String())
			if first[f].Prefix == 0 || !bytes.Contains(p, sum[1:len(sum)-1]) || !bytes.Contains(p, []byte("You are a coding agent.")) {
				t.Fatalf("%s: prefix %q; want the pinned system prompt and the summary message", f, p)
			}
			if bytes.Contains(p, []byte("now pkg/b")) {
				t.Fatalf("%s: prefix %q holds a tail message", f, p)
			}
		}
		growth := [][]schemas.Message{
			{say(schemas.RoleUser, "and pkg/c")}, // a second user message, merged after the summary
			{call("c2"), result("c2")},
			{say(schemas.RoleSystem, "be brief from now on"), say(schemas.RoleAssistant, "ok")},
			{call("c3"), result("c3"), say(schemas.RoleUser, "thanks")},
		}
		for i, ms := range growth {
			seq := publish(ms...)
			for _, name := range formats.Names() {
				f := formats.Format(name)
				got := render(f, seq)
				want := first[f]
				if len(got.JSON) <= len(want.JSON) {
					t.Fatalf("%s after growth %d: the rendering did not grow", f, i)
				}
				if got.Prefix != want.Prefix || !bytes.Equal(got.JSON[:got.Prefix], want.JSON[:want.Prefix]) {
					t.Fatalf("%s after growth %d: prefix\n%s\nwant\n%s", f, i, got.JSON[:got.Prefix], want.JSON[:want.Prefix])
				}
			}
		}

		// The next compaction changes the prefix (the test above can fail).
		next := *value
		next.Generation, next.Summary = 2, "All of pkg/a and pkg/b are fixed."
		next.TailStartSeq, next.CoveredThroughSeq = next.TailStartSeq+1, next.CoveredThroughSeq+1
		if _, err := st.Results().Put(ctx, &next, rev); err != nil {
			t.Fatal(err)
		}
		for _, name := range formats.Names() {
			f := formats.Format(name)
			got := render(f, 0)
			if bytes.Equal(got.JSON[:got.Prefix], first[f].JSON[:first[f].Prefix]) {
				t.Fatalf("%s: the prefix did not change with the next compaction", f)
			}
		}
	})
}

func TestRenderUnknownFormat(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		_, err := c.Render(ctxT(t), "c1", "claude")
		if !errors.Is(err, formats.ErrUnknownFormat) {
			t.Fatalf("got %v; want ErrUnknownFormat", err)
		}
		_, err = c.Render(ctxT(t), "c 1", formats.Gemini)
		if !errors.Is(err, schemas.ErrInvalid) {
			t.Fatalf("got %v; want the conversation id rule", err)
		}
	})
}

// TestServiceRendersUpToTheMaxPayload asks compactor.context for a rendered context: it
// is the Go client's rendering while that fits in the max payload, and a 413 naming the
// sizes and the client-side way once it does not.
func TestServiceRendersUpToTheMaxPayload(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		startService(t, nc, st)
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Publish(ctx, "big", say(schemas.RoleUser, "hello")); err != nil {
			t.Fatal(err)
		}
		ask := func() *nats.Msg {
			t.Helper()
			m, err := nc.Request(schemas.ContextSubject, []byte(`{"conversation":"big","format":"anthropic"}`), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		var rx schemas.ContextResponse
		if err := json.Unmarshal(ask().Data, &rx); err != nil {
			t.Fatal(err)
		}
		want, err := c.Render(ctx, "big", formats.Anthropic)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rx.Rendered, want.JSON) {
			t.Fatalf("service rendered %s; want the client's %s", rx.Rendered, want.JSON)
		}
		for i := range 4 { // 4 × 6 KiB: over the 16 KiB max payload once rendered
			if _, err := c.Publish(ctx, "big", say(schemas.RoleAssistant, fmt.Sprintf("%d %s", i, strings.Repeat("x", 6<<10)))); err != nil {
				t.Fatal(err)
			}
		}
		m := ask()
		code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
		if code != "413" || !strings.Contains(desc, fmt.Sprintf("over the max payload of %d bytes", maxPayload)) ||
			!strings.Contains(desc, "pipeline.Client.Render") {
			t.Fatalf("got %s %q; want 413 naming the max payload and the client-side rendering", code, desc)
		}
		if _, err := c.Render(ctx, "big", formats.Anthropic); err != nil {
			t.Fatalf("the client renders what the service cannot send: %v", err)
		}
	})
}
