package systemtest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// Input straight on the subjects, from a client that skips every check of the Go and
// Node clients: each bad message is refused or reported on its own, and no other
// conversation waits for it.

// chatLastSeq is the stream's last sequence: what a refused publish must not move.
func chatLastSeq(t *testing.T, s *stack) uint64 {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	str, err := jsFor(t, s.nc).Stream(ctx, s.st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// compactedUnder waits until conv has a summary and its context fits under the threshold,
// with its tool pairs whole, and returns the context.
func compactedUnder(t *testing.T, s *stack, env stackEnv, conv string) *pipeline.Context {
	t.Helper()
	var cx *pipeline.Context
	eventually(t, 2*time.Minute, conv+" to be compacted under its threshold", func() bool {
		var err error
		cx, err = s.client.Context(ctxFor(t, 30*time.Second), conv)
		return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
	})
	if err := rounds.CheckPairs(cx.Messages); err != nil {
		t.Fatalf("%s: %v", conv, err)
	}
	return cx
}

func TestAFloodOfTinyMessagesIsCompactedAndStarvesNoOne(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, fakellm.New(t))
	ctx := ctxFor(t, 5*time.Minute)
	js := jsFor(t, s.nc)
	subj := must(s.st.Config().ChatSubject("flood"))
	const n = 10000
	var acks []natsjs.PubAckFuture
	for i := range n {
		// A publisher with 4,000 acks outstanding waits for them rather than failing
		// (the default 200 ms stall failed in CI on a loaded machine).
		f, err := js.PublishAsync(subj, fmt.Appendf(nil, `{"role":"user","content":"%d"}`, i), natsjs.WithStallWait(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the flood was not acknowledged")
	}
	for i, f := range acks {
		select {
		case err := <-f.Err():
			t.Fatalf("flood message %d: %v", i, err)
		default:
		}
	}
	// Another conversation, published during the flood's compaction, is compacted too.
	msgs, needles := fakellm.NeedleConversation(20)
	replay(t, s, "neighbour", msgs, 0)
	cx := compactedUnder(t, s, env, "neighbour")
	text := ""
	for _, m := range cx.Messages {
		text += m.Content.String()
	}
	for _, nd := range needles {
		if !strings.Contains(text, nd) {
			t.Errorf("needle %s of the neighbour lost", nd)
		}
	}
	fl := compactedUnder(t, s, env, "flood")
	settle(t, s)
	if len(fl.Skipped) > 0 {
		t.Errorf("flood: skipped %v", fl.Skipped[:min(3, len(fl.Skipped))])
	}
	last := fl.Messages[len(fl.Messages)-1].Content.String()
	if last != fmt.Sprint(n-1) {
		t.Errorf("flood: the newest message in the context is %q; want %d", last, n-1)
	}
	t.Logf("flood of %d messages: generation %d, context %d tokens in %d messages", n, fl.Generation, fl.Tokens, len(fl.Messages))
}

func TestMessagesAtAndOverTheMaxPayload(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, fakellm.New(t))
	ctx := ctxFor(t, 2*time.Minute)
	js := jsFor(t, s.nc)
	max := int(s.nc.MaxPayload())
	subj := must(s.st.Config().ChatSubject("big"))

	// At the limit: a tool output that fills the whole payload is stored, counted and
	// compacted; the context ends inside its bound.
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}`
	if _, err := js.Publish(ctx, subj, []byte(call)); err != nil {
		t.Fatal(err)
	}
	head, tail := `{"role":"tool","tool_call_id":"c1","content":"`, `"}`
	at := head + strings.Repeat("x", max-len(head)-len(tail)) + tail
	if len(at) != max {
		t.Fatalf("built %d bytes; want %d", len(at), max)
	}
	ack, err := js.Publish(ctx, subj, []byte(at))
	if err != nil {
		t.Fatalf("a message of exactly the max payload (%d bytes): %v", max, err)
	}
	if _, err := s.client.Publish(ctx, "big", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("and now?")}); err != nil {
		t.Fatal(err)
	}
	cx := compactedUnder(t, s, env, "big")
	if cx.TailStartSeq <= ack.Sequence {
		t.Errorf("the tail starts at %d; want the %d-byte output (seq %d) summarized", cx.TailStartSeq, max, ack.Sequence)
	}

	// Over the limit: the client library refuses before sending, naming the limit...
	before := chatLastSeq(t, s)
	over := head + strings.Repeat("y", max-len(head)-len(tail)+1) + tail
	if _, err := js.Publish(ctx, subj, []byte(over)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("a message one byte over the max payload: got %v; want %v", err, nats.ErrMaxPayload)
	}
	// ...and a client that skips that check is cut off by the server.
	if got := rawPublish(t, s.nc.ConnectedUrl(), subj, []byte(over)); !strings.Contains(got, "Maximum Payload") {
		t.Fatalf("the server answered %q to an oversized PUB; want a Maximum Payload error", got)
	}
	if after := chatLastSeq(t, s); after != before {
		t.Fatalf("CHAT moved from seq %d to %d: an oversized message was stored", before, after)
	}
	// The conversation is still usable.
	seq, err := s.client.Publish(ctx, "big", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("still here")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Context(ctx, "big", pipeline.AtLeastSeq(seq)); err != nil {
		t.Fatal(err)
	}
}

// rawPublish speaks the NATS protocol by hand, as a client that ignores the server's
// max_payload would, and returns the server's first answer to the PUB.
func rawPublish(t *testing.T, natsURL, subject string, data []byte) string {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("no INFO from the server: %q, %v", line, err)
	}
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPUB %s %d\r\n", subject, len(data))
	// The server may close before reading the payload; the write error does not matter.
	_, _ = c.Write(append(data, '\r', '\n'))
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		t.Fatalf("no answer to the oversized PUB: %v", err)
	}
	return strings.TrimSpace(line)
}

func TestUnusualConversationIDsOnTheSubjects(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, fakellm.New(t))
	ctx := ctxFor(t, 2*time.Minute)
	js := jsFor(t, s.nc)
	msg := []byte(`{"role":"user","content":"hello"}`)
	// Each of these subjects matches chat.*.msg, so the stream stores the message; its
	// token breaks the id rule, so no reader or trigger may act on it.
	var last uint64
	for _, id := range []string{"ä", "a%2Eb", "a+b", "a:b", "a\tb", strings.Repeat("x", 129), "-", "_"} {
		ack, err := js.Publish(ctx, "chat."+id+".msg", msg)
		if err != nil {
			if id == "a\tb" { // whitespace cannot be a subject token; the client refuses it
				continue
			}
			t.Fatalf("publish on chat.%s.msg: %v", id, err)
		}
		last = ack.Sequence
		_, err = s.client.Context(ctx, id)
		valid := schemas.ValidateConversationID(id) == nil
		switch {
		case valid && err != nil:
			t.Errorf("Context(%q): %v; the id is valid", id, err)
		case !valid && !errors.Is(err, schemas.ErrInvalid):
			t.Errorf("Context(%q): got %v; want an error naming the id rule", id, err)
		}
	}
	// A subject with more tokens is not the stream's: nothing answers, nothing is stored.
	if _, err := js.Publish(ctx, "chat.a.b.msg", msg); !errors.Is(err, natsjs.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("publish on chat.a.b.msg: got %v; want no stream to answer", err)
	}
	triggerHandled(t, s, last)
	msgs, _ := fakellm.NeedleConversation(20)
	replay(t, s, "after-odd-ids", msgs, 0)
	compactedUnder(t, s, env, "after-odd-ids")
}
