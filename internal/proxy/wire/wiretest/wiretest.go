// Package wiretest holds what the tests of every wire share: a context of plain
// messages, JSON comparison, and the checks fuzz targets run on Build and on streams.
package wiretest

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// SSEEvent is one server-sent event: its name ("" when none) and data.
type SSEEvent struct{ Name, Data string }

// Stream is events as an event stream's bytes.
func Stream(events []SSEEvent) string {
	var b []byte
	for _, e := range events {
		if e.Name != "" {
			b = append(b, "event: "+e.Name+"\n"...)
		}
		b = append(b, "data: "+e.Data+"\n\n"...)
	}
	return string(b)
}

// ContextOf is a context holding msgs, as the conversation core gives it with no
// summary.
func ContextOf(msgs []schemas.Message) *assemble.Context {
	seqs := make([]uint64, len(msgs))
	for i := range seqs {
		seqs[i] = uint64(i + 1)
	}
	return &assemble.Context{Messages: msgs, Seqs: seqs}
}

// JSONEqual reports whether a and b are the same JSON value.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v in %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return reflect.DeepEqual(x, y)
}

// CheckBuild builds req with its own messages and checks the body is one valid JSON
// object whose fields other than conv (the ones carrying the conversation) are the
// client's, byte for byte. It returns nil for a context the wire refuses to render
// (unpaired tool calls...).
func CheckBuild(t *testing.T, w wire.Wire, req *wire.Request, conv ...string) []byte {
	t.Helper()
	out, err := w.Build(req, ContextOf(req.Messages))
	if err != nil {
		return nil
	}
	if !json.Valid(out) {
		t.Fatalf("Build gave invalid JSON: %q", out)
	}
	before, err := wire.FieldMap(req.Body)
	if err != nil {
		t.Fatalf("a parsed body has no fields: %v", err)
	}
	after, err := wire.FieldMap(out)
	if err != nil {
		t.Fatalf("built body: %v in %q", err, out)
	}
	skip := map[string]bool{}
	for _, c := range conv {
		skip[c] = true
	}
	for k, v := range before {
		if !skip[k] && string(after[k]) != string(v) {
			t.Fatalf("field %q changed: %s -> %s", k, v, after[k])
		}
	}
	return out
}

// StreamFuzz feeds a fuzzed stream, split into events, to a wire's accumulator: it
// must never panic, and a result, when it gives one, is a valid message.
func StreamFuzz(t *testing.T, w wire.Wire, stream string) {
	s := w.NewStream()
	sp := wire.NewSSESplitter(1<<16, s.Event)
	if _, err := sp.Write([]byte(stream)); err != nil {
		return
	}
	m, _, err := s.Result()
	if err != nil {
		return
	}
	if !s.Done() || s.Failed() {
		t.Fatalf("a result with done %v failed %v", s.Done(), s.Failed())
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("the result is not a valid message: %v", err)
	}
}

// AnswerReadsBack checks an Answerer's answers, whole and streamed, read back through
// w's own Reply and stream as the reply they hold with its usage: what the wire reads of
// an upstream's reply, and so what a client of the API reads.
func AnswerReadsBack(t *testing.T, w wire.Wire) {
	t.Helper()
	a, ok := w.(wire.Answerer)
	if !ok {
		t.Fatalf("%s answers nothing", w.Name())
	}
	req := &wire.Request{Model: "m"}
	text := "<summary>FACT-1 and a quote \" < & > \\ done</summary>"
	reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(text)}
	usage := wire.Usage{Input: 120, Output: 30}
	whole, err := a.Answer(req, reply, usage, false)
	if err != nil {
		t.Fatal(err)
	}
	m, u, err := w.Reply(whole)
	if err != nil || m.Content.String() != text || u == nil || u.Input != 120 || u.Output != 30 {
		t.Fatalf("whole answer read as %q %+v %v", m.Content.String(), u, err)
	}
	streamed, err := a.Answer(req, reply, usage, true)
	if err != nil {
		t.Fatal(err)
	}
	s := w.NewStream()
	if _, err := wire.NewSSESplitter(0, s.Event).Write(streamed); err != nil {
		t.Fatal(err)
	}
	m, u, err = s.Result()
	if !s.Done() || s.Failed() || err != nil || m.Content.String() != text || u == nil || u.Input != 120 || u.Output != 30 {
		t.Fatalf("streamed answer (done %v) read as %q %+v %v", s.Done(), m.Content.String(), u, err)
	}
}
