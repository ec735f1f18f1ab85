package wire

import (
	"bytes"
	"errors"
	"fmt"
)

// DefaultMaxEvent is the bound NewSSESplitter puts on one event when given none.
const DefaultMaxEvent = 8 << 20

// ErrEventTooLarge is the error of an event over the splitter's bound.
var ErrEventTooLarge = errors.New("a server-sent event is over the size bound")

// SSESplitter is an io.Writer that reads a text/event-stream in whatever chunks it is
// written and calls its function once per complete event, with the event's name ("" when
// it has none) and its data (several data lines joined with "\n"). Lines may end with
// LF, CRLF or CR; comments (lines starting with ':'), id and retry are ignored; an
// event without a data line is not passed on (as the EventSource rules say). An event
// of more than its bound in bytes is an error. The first error (of the bound or of the
// function) is returned by that Write and by every later one; bytes after an
// incomplete last event are dropped. The data passed to the function is valid only
// during the call.
type SSESplitter struct {
	fn   func(name string, data []byte) error
	max  int
	line []byte
	// skipLF says the last byte seen was a CR: a LF right after it ends no new line.
	skipLF  bool
	name    string
	data    []byte
	hasData bool
	size    int // bytes of the current event so far
	err     error
}

// NewSSESplitter returns a splitter calling fn per event; max bounds one event's
// bytes (DefaultMaxEvent when max <= 0).
func NewSSESplitter(max int, fn func(name string, data []byte) error) *SSESplitter {
	if max <= 0 {
		max = DefaultMaxEvent
	}
	return &SSESplitter{fn: fn, max: max}
}

// Write takes the next bytes of the stream.
func (s *SSESplitter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	for i := 0; i < len(p); {
		c := p[i]
		if s.skipLF {
			s.skipLF = false
			if c == '\n' {
				i++
				continue
			}
		}
		j := bytes.IndexAny(p[i:], "\r\n")
		if j < 0 {
			s.grow(p[i:])
			break
		}
		s.grow(p[i : i+j])
		if p[i+j] == '\r' {
			s.skipLF = true
		}
		i += j + 1
		if s.err == nil {
			s.err = s.endLine()
		}
		if s.err != nil {
			return i, s.err
		}
	}
	if s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}

// grow adds b to the current line, within the event's bound.
func (s *SSESplitter) grow(b []byte) {
	if s.err != nil {
		return
	}
	s.size += len(b)
	if s.size > s.max {
		s.err = fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, s.max)
		return
	}
	s.line = append(s.line, b...)
}

// endLine reads one complete line.
func (s *SSESplitter) endLine() error {
	line := s.line
	s.line = s.line[:0]
	if len(line) == 0 {
		return s.dispatch()
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if k := bytes.IndexByte(line, ':'); k >= 0 {
		field, value = line[:k], line[k+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "event":
		s.name = string(value)
	case "data":
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	}
	return nil
}

// dispatch passes the event on, if it has data, and starts the next.
func (s *SSESplitter) dispatch() error {
	name, data, has := s.name, s.data, s.hasData
	s.name, s.hasData, s.size = "", false, 0
	s.data = s.data[:0]
	if !has {
		return nil
	}
	return s.fn(name, data)
}

// Fail makes err the splitter's error, when it has none yet: every later Write returns
// it, and no event after it is passed on.
func (s *SSESplitter) Fail(err error) {
	if s.err == nil {
		s.err = err
	}
}
