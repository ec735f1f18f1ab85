package wire

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type sseEvent struct{ name, data string }

// split writes stream to a splitter in chunks of n bytes and returns the events.
func split(t *testing.T, stream string, n, max int) ([]sseEvent, error) {
	t.Helper()
	var got []sseEvent
	s := NewSSESplitter(max, func(name string, data []byte) error {
		got = append(got, sseEvent{name, string(data)})
		return nil
	})
	for i := 0; i < len(stream); i += n {
		end := min(i+n, len(stream))
		k, err := s.Write([]byte(stream[i:end]))
		if err != nil {
			return got, err
		}
		if k != end-i {
			t.Fatalf("wrote %d of %d", k, end-i)
		}
	}
	return got, nil
}

func TestSSESplitter(t *testing.T) {
	cases := []struct {
		name, stream string
		want         []sseEvent
	}{
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []sseEvent{{"", `{"a":1}`}, {"", "[DONE]"}}},
		{"anthropic", "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n",
			[]sseEvent{{"message_start", `{"type":"message_start"}`}, {"ping", `{"type": "ping"}`}}},
		{"crlf", "event: x\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n", []sseEvent{{"x", "1"}, {"", "2"}}},
		{"cr alone", "data: 1\r\rdata: 2\r\r", []sseEvent{{"", "1"}, {"", "2"}}},
		{"multi-line data", "data: a\ndata:b\ndata:  c\n\n", []sseEvent{{"", "a\nb\n c"}}},
		{"comments, id and retry ignored", ": keep-alive\nid: 7\nretry: 10\ndata: x\n: more\n\n", []sseEvent{{"", "x"}}},
		{"no data, no event", "event: ping\n\n: c\n\n\n\ndata\n\n", []sseEvent{{"", ""}}},
		{"an incomplete last event is not passed on", "data: 1\n\ndata: 2\n", []sseEvent{{"", "1"}}},
		{"empty data line", "data:\n\n", []sseEvent{{"", ""}}},
		{"the name is reset", "event: a\ndata: 1\n\ndata: 2\n\n", []sseEvent{{"a", "1"}, {"", "2"}}},
	}
	for _, c := range cases {
		for _, n := range []int{1, 2, 3, 7, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", c.name, n), func(t *testing.T) {
				got, err := split(t, c.stream, n, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
					t.Fatalf("got %q, want %q", got, c.want)
				}
			})
		}
	}
}

func TestSSESplitterBound(t *testing.T) {
	ok := "data: " + strings.Repeat("x", 50) + "\n\n"
	big := "data: " + strings.Repeat("x", 60) + "\n\n"
	for _, n := range []int{1, 5, 1000} {
		got, err := split(t, ok+big+ok, n, 60)
		if !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("chunks of %d: %v", n, err)
		}
		if len(got) != 1 {
			t.Fatalf("chunks of %d: %d events before the error", n, len(got))
		}
	}
	// Many events under the bound are fine: the bound is per event.
	if _, err := split(t, strings.Repeat(ok, 100), 13, 60); err != nil {
		t.Fatal(err)
	}
}

func TestSSESplitterErrorSticks(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	s := NewSSESplitter(0, func(string, []byte) error { calls++; return boom })
	if _, err := s.Write([]byte("data: 1\n\ndata: 2\n\n")); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("data: 3\n\n")); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("%d calls after an error", calls)
	}
}

func FuzzSSESplitter(f *testing.F) {
	f.Add("event: a\r\ndata: 1\r\n\r\ndata: 2\n\n: c\rdata:3\r\r", 3)
	f.Fuzz(func(t *testing.T, stream string, n int) {
		if n <= 0 {
			n = 1
		}
		whole, err1 := split(t, stream, len(stream)+1, 64)
		parts, err2 := split(t, stream, n, 64)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("errors differ by chunking: %v, %v", err1, err2)
		}
		if err1 == nil && !reflect.DeepEqual(whole, parts) {
			t.Fatalf("events differ by chunking: %q vs %q", whole, parts)
		}
	})
}
