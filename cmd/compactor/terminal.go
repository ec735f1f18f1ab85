package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// textOut is what the commands print for people: text that came from NATS (a stored
// policy, a decline reason, an error a service answered) is anybody's input, and a
// control character in it must not reach the terminal raw (ESC starts a control
// sequence: OSC 52 writes the clipboard, others retitle the window or hide text). It
// shows every control character but tab and newline as an escape, \x1b, \u0085.
// JSON output is unchanged by it: encoding/json already escapes them.
type textOut struct {
	w       io.Writer
	pending []byte // the start of a UTF-8 sequence the next Write completes
}

func newTextOut(w io.Writer) *textOut { return &textOut{w: w} }

// Unwrap is the writer underneath: a progress bar draws on it, with its own \r.
func (t *textOut) Unwrap() io.Writer { return t.w }

func (t *textOut) Write(p []byte) (int, error) {
	in := p
	if len(t.pending) > 0 {
		in = append(t.pending, p...)
		t.pending = nil
	}
	out := make([]byte, 0, len(in))
	for len(in) > 0 {
		if !utf8.FullRune(in) {
			t.pending = append([]byte(nil), in...)
			break
		}
		r, size := utf8.DecodeRune(in)
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, in[0])
		case r == '\t' || r == '\n':
			out = append(out, in[:size]...)
		case r < 0x20 || r == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, in[:size]...)
		}
		in = in[size:]
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
