package pipeline_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// maxPayload is the max_payload of the servers of these tests (1 MiB by default), so a
// message of three times it stays small.
const maxPayload = 16 << 10

// withSmallPayload runs fn against a provisioned server whose max payload is maxPayload.
func withSmallPayload(t *testing.T, fn func(t *testing.T, nc *nats.Conn, st *jetstream.Store)) {
	t.Helper()
	ns := jstest.ServerWith(t, jstest.MaxPayload(maxPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	st, err := jetstream.Provision(ctxT(t), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	fn(t, nc, st)
}

// bigOutput is a tool output of about n bytes that starts and ends with a needle.
func bigOutput(id string, n int) schemas.Message {
	body := "NEEDLE-head\n" + strings.Repeat("log line with some détail\n", n/27) + "NEEDLE-tail"
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(body)}
}

func encode(t *testing.T, m schemas.Message) []byte {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stored is what CHAT holds for conv: the stubs as published.
func stored(t *testing.T, st *jetstream.Store, conv string) []schemas.Entry {
	t.Helper()
	es, err := st.Chat().LoadEntries(ctxT(t), conv, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func objectCount(t *testing.T, nc *nats.Conn, st *jetstream.Store) uint64 {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctxT(t), "OBJ_"+st.Config().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// A tool output of three times the max payload, with reasoning, extra and an unknown
// field, published through the client comes back byte for byte through Context, raw and
// stripped, inside its whole tool round; CHAT holds a stub under the max payload that
// keeps the round's ids and metadata.
func TestLargeToolOutputRoundTripsThroughContext(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		big := bigOutput("c1", 3*maxPayload)
		big.Reasoning, big.Extra = "why", []byte(`{"sig":"abc=="}`)
		big.Unknown = map[string]json.RawMessage{"x-trace": json.RawMessage(`{"id":7}`)}
		big.Tokens, big.Meta = 12345, map[string]string{"source": "test"}
		msgs := []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("read the log")},
			call("c1"),
			big,
			{Role: schemas.RoleAssistant, Content: schemas.Text("done")},
		}
		var last uint64
		for i, m := range msgs {
			var err error
			if last, err = c.Publish(ctx, "big", m); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		raw := stored(t, st, "big")
		stub := raw[2].Message
		if raw[2].Err != nil || stub.ContentRef == nil || stub.ToolCallID != "c1" || stub.Tokens != 12345 || stub.Meta["source"] != "test" {
			t.Fatalf("CHAT holds %+v (%v); want a stub with the tool call id, the metadata and a reference", stub, raw[2].Err)
		}
		if n := len(encode(t, stub)); n > st.Objects().InlineLimit("") {
			t.Fatalf("stub of %d bytes is over the limit %d", n, st.Objects().InlineLimit(""))
		}
		for _, opt := range []struct {
			name string
			opts []pipeline.ContextOption
			want func(schemas.Message) schemas.Message
		}{
			{"raw", []pipeline.ContextOption{pipeline.Raw(), pipeline.AtLeastSeq(last)}, func(m schemas.Message) schemas.Message { return m }},
			{"stripped", []pipeline.ContextOption{pipeline.AtLeastSeq(last)}, schemas.Message.StripMetadata},
		} {
			t.Run(opt.name, func(t *testing.T) {
				cx, err := c.Context(ctx, "big", opt.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if len(cx.Skipped) > 0 || len(cx.Messages) != len(msgs) {
					t.Fatalf("read %d messages, skipped %v; want all %d", len(cx.Messages), cx.Skipped, len(msgs))
				}
				for i, m := range msgs {
					if got, want := encode(t, cx.Messages[i]), encode(t, opt.want(m)); !bytes.Equal(got, want) {
						t.Fatalf("message %d:\ngot  %.200s\nwant %.200s", i, got, want)
					}
				}
			})
		}
		stubbed := stub
		if _, err := c.Publish(ctx, "big", stubbed); err == nil || !strings.Contains(err.Error(), "content_ref") {
			t.Fatalf("publishing a stub as it is: %v; want the client to refuse a content_ref it did not set", err)
		}
	})
}

// userOf returns a user message whose encoding is exactly n bytes.
func userOf(t *testing.T, n int) schemas.Message {
	t.Helper()
	empty := len(encode(t, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("")}))
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("a", n-empty))}
	if got := len(encode(t, m)); got != n {
		t.Fatalf("message of %d bytes; want %d", got, n)
	}
	return m
}

// A message exactly at the limit (the max payload less the header room and the
// message id) is published as it is; one byte over, it is stored as an object. Both
// read back whole.
func TestPublishAtAndJustOverTheLimit(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		for i, tt := range []struct {
			msgID string
			over  int
		}{{"", 0}, {"", 1}, {"an-id-of-some-length", 0}, {"an-id-of-some-length", 1}} {
			t.Run(fmt.Sprintf("id %q, %d over", tt.msgID, tt.over), func(t *testing.T) {
				conv := "limit-" + strconv.Itoa(i)
				m := userOf(t, st.Objects().InlineLimit(tt.msgID)+tt.over)
				var opts []pipeline.PublishOption
				if tt.msgID != "" {
					opts = append(opts, pipeline.MsgID(tt.msgID+strconv.Itoa(i)))
					m = userOf(t, st.Objects().InlineLimit(tt.msgID+strconv.Itoa(i))+tt.over)
				}
				seq, err := c.Publish(ctx, conv, m, opts...)
				if err != nil {
					t.Fatalf("publish %d bytes (limit %d): %v", len(encode(t, m)), st.Objects().InlineLimit(tt.msgID), err)
				}
				raw := stored(t, st, conv)
				if isStub := raw[0].Message.ContentRef != nil; isStub != (tt.over > 0) {
					t.Fatalf("stored as a stub: %v; want a stub only over the limit", isStub)
				}
				cx, err := c.Context(ctx, conv, pipeline.AtLeastSeq(seq))
				if err != nil {
					t.Fatal(err)
				}
				if len(cx.Messages) != 1 || !bytes.Equal(encode(t, cx.Messages[0]), encode(t, m)) {
					t.Fatalf("read back %d messages, skipped %v; want the one published", len(cx.Messages), cx.Skipped)
				}
			})
		}
	})
}

// A message still over the max payload without its content (tool call arguments), or
// whose object would be over the max object size, is refused with an error naming the
// limit and the size; nothing is stored, and the client's view of the open tool calls
// is not changed by the refused message.
func TestTooLargeIsRefusedNamingTheLimit(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		cfg := st.Config()
		cfg.MaxObjectSize = 2 * maxPayload
		c, err := pipeline.New(ctx, nc, pipeline.WithConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		limit := st.Objects().InlineLimit("")
		huge := call("c1")
		huge.ToolCalls[0].Function.Arguments = `{"patch":"` + strings.Repeat("x", 2*maxPayload) + `"}`
		_, err = c.Publish(ctx, "refused", huge)
		if !errors.Is(err, pipeline.ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(limit)) ||
			!strings.Contains(err.Error(), strconv.Itoa(len(encode(t, huge)))) || !strings.Contains(err.Error(), "max_payload") {
			t.Fatalf("publish of huge tool call arguments: %v; want ErrTooLarge naming the limit %d and the size %d", err, limit, len(encode(t, huge)))
		}
		if _, err := c.Publish(ctx, "refused", call("c2")); err != nil {
			t.Fatal(err)
		}
		tooBig := bigOutput("c2", 3*maxPayload)
		_, err = c.Publish(ctx, "refused", tooBig)
		if !errors.Is(err, pipeline.ErrTooLarge) || !strings.Contains(err.Error(), "max object size of "+strconv.Itoa(2*maxPayload)) {
			t.Fatalf("publish of a tool output over the max object size: %v; want ErrTooLarge naming the max object size", err)
		}
		if n := len(stored(t, st, "refused")); n != 1 {
			t.Fatalf("CHAT holds %d messages; want only the call that was not refused", n)
		}
		if n := objectCount(t, nc, st); n != 0 {
			t.Fatalf("the objects bucket holds %d messages; want none stored for refused messages", n)
		}
		// The refused result answered nothing: a smaller one for the same call is taken.
		if _, err := c.Publish(ctx, "refused", result("c2")); err != nil {
			t.Fatalf("result after a refused one: %v; want it accepted (the refused one never reached the stream)", err)
		}
	})
}

// A retried publish of a large message (the same message id) stores one message and
// one object; PublishAsync stores large messages too.
func TestLargePublishRetriedAndAsync(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		m := bigOutput("c1", 2*maxPayload)
		m.Role, m.ToolCallID = schemas.RoleUser, ""
		first, err := c.Publish(ctx, "retry", m, pipeline.MsgID("m-1"))
		if err != nil {
			t.Fatal(err)
		}
		objects := objectCount(t, nc, st)
		again, err := c.Publish(ctx, "retry", m, pipeline.MsgID("m-1"))
		if err != nil || again != first {
			t.Fatalf("retry got %d, %v; want the first copy's %d", again, err, first)
		}
		if n := objectCount(t, nc, st); n != objects {
			t.Fatalf("the retry stored %d more object messages; want none", n-objects)
		}
		async := m
		async.Content = schemas.Text(strings.Repeat("async ", maxPayload))
		ch, err := c.PublishAsync(ctx, "retry", async, pipeline.MsgID("m-3"))
		if err != nil {
			t.Fatal(err)
		}
		ack := <-ch
		if ack.Err != nil {
			t.Fatal(ack.Err)
		}
		cx, err := c.Context(ctx, "retry", pipeline.AtLeastSeq(ack.Seq))
		if err != nil || len(cx.Messages) != 2 || cx.Messages[1].Content.String() != async.Content.String() {
			t.Fatalf("read %d messages, %v; want the large one and the async one", len(cx.Messages), err)
		}
	})
}

// An object that is gone (deleted by hand, purged, aged out) is a gap: the read skips
// the message, and its whole tool round, reporting why, and shows the rest.
func TestMissingObjectIsSkippedAndReported(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		msgs := []schemas.Message{call("c1"), bigOutput("c1", 2*maxPayload), {Role: schemas.RoleUser, Content: schemas.Text("still here")}}
		var last uint64
		for _, m := range msgs {
			var err error
			if last, err = c.Publish(ctx, "gap", m); err != nil {
				t.Fatal(err)
			}
		}
		js, _ := natsjs.New(nc)
		jstest.AllowRollUps(t, nc, st.Config().ObjectsBucket) // nats.go's Delete, as on a bucket of an earlier version
		obs, err := js.ObjectStore(ctx, st.Config().ObjectsBucket)
		if err != nil {
			t.Fatal(err)
		}
		ref := stored(t, st, "gap")[1].Message.ContentRef
		if err := obs.Delete(ctx, ref.Name); err != nil {
			t.Fatal(err)
		}
		cx, err := c.Context(ctx, "gap", pipeline.AtLeastSeq(last))
		if err != nil {
			t.Fatalf("read with a missing object: %v; want the gap skipped", err)
		}
		if len(cx.Messages) != 1 || cx.Messages[0].Content.String() != "still here" {
			t.Fatalf("read %v; want only the message after the broken round", cx.Messages)
		}
		if !skippedWith(cx.Skipped, last-1, "missing") || !skippedWith(cx.Skipped, last-2, "incomplete") {
			t.Fatalf("skipped %v; want the result (object missing) and its call (round incomplete)", cx.Skipped)
		}
	})
}

func skippedWith(sk []pipeline.Skipped, seq uint64, reason string) bool {
	for _, s := range sk {
		if s.Seq == seq && strings.Contains(s.Reason, reason) {
			return true
		}
	}
	return false
}

// A stub published straight on the subject by a hostile client, naming another
// conversation's object or an object too large, is refused before it is fetched: the
// read reports it and shows nothing of the other conversation.
func TestHostileStubIsRefused(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		secret := bigOutput("c1", 2*maxPayload)
		secret.Role, secret.ToolCallID = schemas.RoleUser, ""
		if _, err := c.Publish(ctx, "victim", secret); err != nil {
			t.Fatal(err)
		}
		victimRef := *stored(t, st, "victim")[0].Message.ContentRef
		huge := victimRef
		huge.Name, huge.Size = "attacker/"+huge.SHA256, 1<<40
		var last uint64
		for _, ref := range []schemas.ContentRef{victimRef, huge} {
			stub := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("look"), ContentRef: &ref}
			var err error
			if last, err = st.Chat().Publish(ctx, "attacker", encode(t, stub), ""); err != nil {
				t.Fatal(err)
			}
		}
		cx, err := c.Context(ctx, "attacker", pipeline.AtLeastSeq(last))
		if err != nil {
			t.Fatal(err)
		}
		if len(cx.Messages) != 0 || !skippedWith(cx.Skipped, last-1, "outside conversation") || !skippedWith(cx.Skipped, last, "over the max object size") {
			t.Fatalf("attacker's read shows %d messages, skipped %v; want both stubs refused", len(cx.Messages), cx.Skipped)
		}
	})
}

// BenchmarkLargeMessage publishes a 4 MiB user message on a server with the default max
// payload (1 MiB), as an object and a stub, and reads it back whole with Context.
func BenchmarkLargeMessage(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Conn(b, srv)
	st := jstest.Provision(b, nc)
	c := pipeline.NewWithStore(nc, st)
	ctx := b.Context()
	const size = 4 << 20
	b.SetBytes(size)
	for i := 0; b.Loop(); i++ {
		conv := "bench-" + strconv.Itoa(i)
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strconv.Itoa(i) + strings.Repeat("x", size))}
		seq, err := c.Publish(ctx, conv, m)
		if err != nil {
			b.Fatal(err)
		}
		cx, err := c.Context(ctx, conv, pipeline.AtLeastSeq(seq))
		if err != nil || len(cx.Messages) != 1 {
			b.Fatalf("read %v, %v", cx, err)
		}
	}
}
