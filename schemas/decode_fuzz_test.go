package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// The fuzz targets of the wire decoders. Their oracles are the wire contract: a decoder
// never panics, refuses bad input with a *ValidationError, and what it accepts encodes
// and decodes back to the same thing, with content, extra and unknown fields kept.
// Seeds: f.Add below and testdata/fuzz/<FuzzName>/ (a few messages of ../shared/corpus).

// FuzzDecodeMessage: DecodeMessage never panics; every error is a *ValidationError; an
// accepted message validates, its content, extra and unknown fields are the input's
// bytes, and Encode writes JSON that decodes to the same message, with or without
// Compactor's metadata.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"role":"user","content":"hi"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]}`,
		`{"role":"tool","content":"42","tool_call_id":"c1","tokens":3}`,
		`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:,x"}},{"type":"x-new","text":5}]}`,
		`{"role":"assistant","content":"ok","extra":{ "sig" : "abc=="},"reasoning":"r","usage":{"prompt_tokens":1,"completion_tokens":2},"context_generation":0,"meta":{"pin":"true"},"Role":"x","zz":[1, 2]}`,
		`{"role":"system","content":"a","meta":{},"tool_calls":[],"extra":null,"name":""}`,
		`{"role":"user","content":"\u00e9\ud800","name":"\u003c"}`,
		`{"role":"user","content":"a","tokens":-1}`,
		`{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"compaction-objects","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":99,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":3}}`,
		`[1]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := schemas.DecodeMessage(data)
		if err != nil {
			var ve *schemas.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, schemas.ErrInvalid) || ve.Field == "" || ve.Rule == "" {
				t.Fatalf("DecodeMessage(%q) error %#v; want a *ValidationError naming a field and a rule", data, err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted %q, yet Validate says %v", data, err)
		}
		// Content, extra and unknown fields are the producer's bytes.
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatalf("accepted %q, which is not a JSON object: %v", data, err)
		}
		if c, ok := top["content"]; ok && !bytes.Equal(m.Content.Raw(), c) {
			t.Fatalf("content %s; want the input's bytes %s", m.Content.Raw(), c)
		}
		if x, ok := top["extra"]; ok && string(x) != "null" && !bytes.Equal(m.Extra, x) {
			t.Fatalf("extra %s; want the input's bytes %s", m.Extra, x)
		}
		for k, v := range m.Unknown {
			if !bytes.Equal(top[k], v) {
				t.Fatalf("unknown field %q is %s; want the input's bytes %s", k, v, top[k])
			}
		}
		// Content parts that validate can be read: the text and token counts of a
		// message come from them.
		if _, err := m.Content.Parts(); err != nil {
			t.Fatalf("accepted content %s whose parts do not decode: %v", m.Content.Raw(), err)
		}
		if got, want := m.Content.String(), contentText(t, m.Content); got != want {
			t.Fatalf("content %s reads as %q; want %q (its exact \"text\" parts)", m.Content.Raw(), got, want)
		}
		for _, give := range []schemas.Message{m, m.StripMetadata()} {
			enc, err := give.Encode()
			if err != nil {
				t.Fatalf("Encode of an accepted message: %v", err)
			}
			if !json.Valid(enc) {
				t.Fatalf("Encode wrote invalid JSON %q", enc)
			}
			if c := give.Content.Raw(); !give.Content.IsNull() && !bytes.Contains(enc, c) {
				t.Fatalf("Encode %s does not hold the content %s verbatim", enc, c)
			}
			back, err := schemas.DecodeMessage(enc)
			if err != nil {
				t.Fatalf("Encode wrote %s, which DecodeMessage refuses: %v (input %q)", enc, err, data)
			}
			if a, b := normalMessage(give), normalMessage(back); !reflect.DeepEqual(a, b) {
				t.Fatalf("round trip changed the message:\n in  %q\n enc %s\n got %#v\nwant %#v", data, enc, b, a)
			}
			again, err := back.Encode()
			if err != nil || !bytes.Equal(again, enc) {
				t.Fatalf("a second Encode wrote %s (%v); want %s", again, err, enc)
			}
		}
	})
}

// contentText is what Content.String must return for valid content, read the way
// Validate reads it: a string, or the "text" of each part whose exact "type" key is
// "text", joined by newlines.
func contentText(t *testing.T, c schemas.Content) string {
	t.Helper()
	var s string
	if c.IsString() {
		if err := json.Unmarshal(c.Raw(), &s); err != nil {
			t.Fatalf("valid string content %s: %v", c.Raw(), err)
		}
		return s
	}
	if !c.IsParts() {
		return ""
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(c.Raw(), &parts); err != nil {
		t.Fatalf("valid content parts %s: %v", c.Raw(), err)
	}
	var texts []string
	for _, p := range parts {
		var typ, text string
		if json.Unmarshal(p["type"], &typ) != nil || typ != "text" {
			continue
		}
		if err := json.Unmarshal(p["text"], &text); err != nil {
			t.Fatalf("valid text part %s: %v", c.Raw(), err)
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n")
}

// normalMessage maps the encodings that mean the same message to one: absent or null
// content, and nil or empty tool calls, meta and unknown fields.
func normalMessage(m schemas.Message) schemas.Message {
	if m.Content.IsNull() {
		m.Content = schemas.Content{}
	}
	if len(m.ToolCalls) == 0 {
		m.ToolCalls = nil
	}
	if len(m.Meta) == 0 {
		m.Meta = nil
	}
	if len(m.Unknown) == 0 {
		m.Unknown = nil
	}
	return m
}

// FuzzDecodeResult: DecodeResult never panics; a value whose schema_version is above
// SchemaVersion is refused with *ErrNewerSchema whatever its other fields hold, any
// other error is a *ValidationError; an accepted value is one readers can compute with
// (tail_start_seq ≥ 1, covered_through_seq below it, a valid conversation id) and
// encodes to a value that decodes to the same, unknown fields included.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{
		resultV1,
		withFields(resultV1, `"future":{"a" : [1, 2]},"Summary":"<other>","pinned_seqs":[],"kept_seqs":[3]`),
		`{"schema_version":1,"conversation":"c","tail_start_seq":1}`,
		`{"schema_version":1,"conversation":"c","tail_start_seq":1,"created_at":"2025-01-02T03:04:05.5+01:00"}`,
		`{"schema_version":2,"conversation":"c1"}`,
		`{"schema_version":7,"generation":"g-7","summary":{"parts":[]}}`,
		`{"schema_version":1,"conversation":"c","tail_start_seq":3,"covered_through_seq":3}`,
		`{"schema_version":"1"}`,
		`{"schema_version":1,"conversation":"a.b","tail_start_seq":1}`,
		`{"schema_version":1,"conversation":"c","tail_start_seq":1,"pinned_seqs":[0]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := schemas.DecodeResult(data)
		var head map[string]json.RawMessage
		headErr := json.Unmarshal(data, &head)
		var version int
		versionErr := json.Unmarshal(head["schema_version"], &version)
		newer := headErr == nil && versionErr == nil && version > schemas.SchemaVersion
		if err != nil {
			var ns *schemas.ErrNewerSchema
			isNewer := errors.As(err, &ns)
			if isNewer != newer || (isNewer && ns.Version != version) {
				t.Fatalf("DecodeResult(%q) error %v; want *ErrNewerSchema exactly when schema_version %d > %d", data, err, version, schemas.SchemaVersion)
			}
			if !isNewer && !errors.Is(err, schemas.ErrInvalid) {
				t.Fatalf("DecodeResult(%q) error %#v; want a *ValidationError", data, err)
			}
		} else if newer {
			t.Fatalf("DecodeResult(%q) accepted schema_version %d; want *ErrNewerSchema", data, version)
		}
		if headErr == nil {
			// The same value written by a newer writer is refused, not guessed at.
			head["schema_version"] = json.RawMessage("2")
			b, _ := json.Marshal(head)
			if _, err := schemas.DecodeResult(b); !errors.As(err, new(*schemas.ErrNewerSchema)) {
				t.Fatalf("DecodeResult of %s: %v; want *ErrNewerSchema", b, err)
			}
		}
		if err != nil {
			return
		}
		if r.SchemaVersion != schemas.SchemaVersion || r.TailStartSeq < 1 || r.CoveredThroughSeq >= r.TailStartSeq ||
			schemas.ValidateConversationID(r.Conversation) != nil {
			t.Fatalf("DecodeResult(%q) accepted %+v; want a value readers can compute with", data, r)
		}
		for k := range r.Unknown {
			if _, ok := head[k]; !ok {
				t.Fatalf("unknown field %q is not in the input", k)
			}
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("Marshal of an accepted value: %v", err)
		}
		back, err := schemas.DecodeResult(enc)
		if err != nil {
			t.Fatalf("Marshal wrote %s, which DecodeResult refuses: %v (input %q)", enc, err, data)
		}
		a, b := normalResult(t, *r), normalResult(t, *back)
		if !r.CreatedAt.Equal(back.CreatedAt) || !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the value:\n in  %q\n enc %s\n got %+v\nwant %+v", data, enc, b, a)
		}
	})
}

// normalResult maps the encodings that mean the same value to one: empty and nil
// lists, the time's location (compared with Equal), unknown fields compared as JSON
// values rather than bytes (encoding/json compacts them).
func normalResult(t *testing.T, r schemas.Result) schemas.Result {
	t.Helper()
	if len(r.PinnedSeqs) == 0 {
		r.PinnedSeqs = nil
	}
	if len(r.KeptSeqs) == 0 {
		r.KeptSeqs = nil
	}
	if len(r.Overrides) == 0 {
		r.Overrides = nil
	}
	r.CreatedAt = time.Time{}
	unknown := r.Unknown
	r.Unknown = nil
	for k, v := range unknown {
		if r.Unknown == nil {
			r.Unknown = map[string]json.RawMessage{}
		}
		r.Unknown[k] = canonicalJSON(t, v)
	}
	return r
}

// canonicalJSON re-encodes a JSON value with numbers kept as written.
func canonicalJSON(t *testing.T, v json.RawMessage) json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		t.Fatalf("kept field %s is not JSON: %v", v, err)
	}
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatalf("kept field %s: %v", v, err)
	}
	return b
}

// FuzzDecodePayloads decodes the same bytes as every other payload of the wire
// contract (request, event, dead letter and the service's requests) the way their
// consumers do (json.Unmarshal, then Validate where there is one). Nothing panics;
// Validate refuses with a *ValidationError; a payload that decodes and validates
// encodes to one that decodes and validates to the same value.
func FuzzDecodePayloads(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"r1","conversation":"c_1","trigger":"manual","reason":"asked","instructions":"keep paths","requested_at":"2025-05-06T07:08:09Z","up_to_seq":42,"escalation":1}`,
		`{"request_id":"r","conversation":"c","trigger":"budget","escalation":3}`,
		`{"type":"completed","conversation":"c","request_id":"r","generation":1,"trigger":"budget","tokens_before":9,"tokens_after":3,"duration_ms":12,"at":"2025-05-06T07:08:09+02:00"}`,
		`{"request":{"request_id":"r","conversation":"c","trigger":"budget"},"error":"llm down","attempts":5,"at":"2025-05-06T07:08:09Z"}`,
		`{"conversation":"c1","request_id":"job-1","instructions":"keep paths","wait_ms":30000}`,
		`{"conversation":"c1","set":{"strategy":"all","threshold":0.7,"keep_last_n":"12","x":true},"clear":true}`,
		`{"conversation":"a.b","wait_ms":-1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPayload(t, data, func(r *schemas.Request) error { return r.Validate() })
		checkPayload(t, data, func(*schemas.Event) error { return nil })
		checkPayload(t, data, func(d *schemas.DeadLetter) error { return nil })
		checkPayload(t, data, func(r *schemas.CompactRequest) error { return r.Validate() })
		checkPayload(t, data, func(r *schemas.ConversationRequest) error { return r.Validate() })
		checkPayload(t, data, func(r *schemas.ContextRequest) error { return r.Validate() })
		checkPayload(t, data, func(r *schemas.PolicyRequest) error { return r.Validate() })
	})
}

// checkPayload decodes data as a T and checks it with validate, then round-trips it.
func checkPayload[T any](t *testing.T, data []byte, validate func(*T) error) {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return
	}
	if err := validate(&v); err != nil {
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || ve.Field == "" || ve.Rule == "" {
			t.Fatalf("%T.Validate of %q: %#v; want a *ValidationError naming a field and a rule", v, data, err)
		}
		return
	}
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal of a valid %T: %v", v, err)
	}
	var back T
	if err := json.Unmarshal(enc, &back); err != nil {
		t.Fatalf("%T: Marshal wrote %s, which does not decode: %v", v, enc, err)
	}
	if err := validate(&back); err != nil {
		t.Fatalf("%T: Marshal wrote %s, which does not validate: %v (input %q)", v, enc, err, data)
	}
	again, err := json.Marshal(back)
	if err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("%T: a second round trip wrote %s (%v); want %s (input %q)", v, again, err, enc, data)
	}
}
