package telemetry

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// IDHasher replaces conversation ids in log lines and spans with a keyed hash of them
// (COMPACTOR_LOG_HASH_IDS): a forget cannot reach logs and traces once written, and an
// id may be personal (a user or ticket number). The hash is an HMAC-SHA-256 under the
// deployment's key, so one conversation has the same hash in every process that shares
// the key, and nobody without the key can compute it from a guessed id. A nil
// *IDHasher leaves ids as they are.
type IDHasher struct{ key []byte }

// NewIDHasher returns the hasher of key.
func NewIDHasher(key []byte) *IDHasher { return &IDHasher{key: bytes.Clone(key)} }

// Hash is id's stand-in: "conv-" and 16 hex digits of the keyed hash.
func (h *IDHasher) Hash(id string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(id))
	return "conv-" + hex.EncodeToString(m.Sum(nil))[:16]
}

// ConversationAttribute is the span attribute that holds a conversation id.
const ConversationAttribute = "compactor.conversation"

// idInSubject finds the conversation id in the subjects of the contract that carry one.
var idInSubject = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])(?:chat|compact\.request|compact\.event|compact\.dead|activity|\$KV\.compaction)\.([A-Za-z0-9_-]{1,128})`)

// replaceIDs replaces every whole occurrence of the ids in s (not as part of a longer
// word of id characters) with their hashes.
func (h *IDHasher) replaceIDs(s string, ids map[string]bool) string {
	for id := range ids {
		if id == "" || !strings.Contains(s, id) {
			continue
		}
		var b strings.Builder
		rest := s
		for {
			i := strings.Index(rest, id)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			end := i + len(id)
			whole := (i == 0 || !isIDByte(rest[i-1])) && (end == len(rest) || !isIDByte(rest[end]))
			b.WriteString(rest[:i])
			if whole {
				b.WriteString(h.Hash(id))
			} else {
				b.WriteString(id)
			}
			rest = rest[end:]
		}
		s = b.String()
	}
	return s
}

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Writer returns a writer for a JSON logger (zerolog writes one event per Write) that
// hashes the conversation ids of each line: the value of every field named
// conversation, and those ids wherever else they appear in the line (an error, a
// subject), as well as the ids in the contract's subjects (chat.<id>.msg, ...). Put it
// in front of a console writer, which formats what it is handed.
func (h *IDHasher) Writer(w io.Writer) io.Writer {
	if h == nil {
		return w
	}
	return &idWriter{h: h, w: w}
}

type idWriter struct {
	h *IDHasher
	w io.Writer
}

func (iw *idWriter) Write(p []byte) (int, error) {
	ids := map[string]bool{}
	var fields map[string]any
	if json.Unmarshal(p, &fields) == nil {
		for k, v := range fields {
			if s, ok := v.(string); ok && k == "conversation" {
				ids[s] = true
			}
		}
	}
	for _, m := range idInSubject.FindAllSubmatch(p, -1) {
		ids[string(m[1])] = true
	}
	if len(ids) == 0 {
		return iw.w.Write(p)
	}
	if _, err := iw.w.Write([]byte(iw.h.replaceIDs(string(p), ids))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Exporter wraps a span exporter: the compactor.conversation attribute of each span
// is hashed, and so is that id wherever else the span holds it (its name, its other
// attributes, its status, its events).
func (h *IDHasher) Exporter(exp sdktrace.SpanExporter) sdktrace.SpanExporter {
	if h == nil {
		return exp
	}
	return &idExporter{SpanExporter: exp, h: h}
}

type idExporter struct {
	sdktrace.SpanExporter
	h *IDHasher
}

func (e *idExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = e.h.span(s)
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// hashedSpan is a span as exported with its conversation ids hashed.
type hashedSpan struct {
	sdktrace.ReadOnlySpan
	name   string
	attrs  []attribute.KeyValue
	status sdktrace.Status
	events []sdktrace.Event
}

func (s *hashedSpan) Name() string                     { return s.name }
func (s *hashedSpan) Attributes() []attribute.KeyValue { return s.attrs }
func (s *hashedSpan) Status() sdktrace.Status          { return s.status }
func (s *hashedSpan) Events() []sdktrace.Event         { return s.events }

func (h *IDHasher) span(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	ids := map[string]bool{}
	for _, kv := range s.Attributes() {
		if kv.Key == ConversationAttribute {
			ids[kv.Value.AsString()] = true
		}
	}
	if len(ids) == 0 {
		return s
	}
	st := s.Status()
	st.Description = h.replaceIDs(st.Description, ids)
	out := &hashedSpan{ReadOnlySpan: s, name: h.replaceIDs(s.Name(), ids), attrs: h.attrs(s.Attributes(), ids), status: st}
	for _, ev := range s.Events() {
		ev.Name = h.replaceIDs(ev.Name, ids)
		ev.Attributes = h.attrs(ev.Attributes, ids)
		out.events = append(out.events, ev)
	}
	return out
}

// attrs returns kvs with the ids in their string values hashed.
func (h *IDHasher) attrs(kvs []attribute.KeyValue, ids map[string]bool) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		if kv.Value.Type() == attribute.STRING {
			kv = attribute.String(string(kv.Key), h.replaceIDs(kv.Value.AsString(), ids))
		}
		out[i] = kv
	}
	return out
}
