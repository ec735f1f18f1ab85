package gemini

import (
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// An answer of the proxy's own reads back, whole and streamed, as the reply it holds
// with its usage: what the wire reads of an upstream's reply, and so what a client of
// the API reads.
func TestAnswerReadsBackAsTheReply(t *testing.T) {
	w := Gemini().(wire.Answerer)
	req := &wire.Request{Model: "m"}
	text := "<summary>FACT-1 and a quote \" < & > \\ done</summary>"
	reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(text)}
	whole, err := w.Answer(req, reply, wire.Usage{Input: 120, Output: 30}, false)
	if err != nil {
		t.Fatal(err)
	}
	m, u, err := Gemini().Reply(whole)
	if err != nil || m.Content.String() != text || u == nil || u.Input != 120 || u.Output != 30 {
		t.Fatalf("whole answer read as %q %+v %v", m.Content.String(), u, err)
	}
	streamed, err := w.Answer(req, reply, wire.Usage{Input: 120, Output: 30}, true)
	if err != nil {
		t.Fatal(err)
	}
	s := Gemini().NewStream()
	sp := wire.NewSSESplitter(0, s.Event)
	if _, err := sp.Write(streamed); err != nil {
		t.Fatal(err)
	}
	m, u, err = s.Result()
	if !s.Done() || s.Failed() || err != nil || m.Content.String() != text || u == nil || u.Input != 120 || u.Output != 30 {
		t.Fatalf("streamed answer (done %v) read as %q %+v %v", s.Done(), m.Content.String(), u, err)
	}
}
