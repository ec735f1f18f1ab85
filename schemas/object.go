package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ContentRef is the reference a stub message carries in place of what it left out: a
// message whose JSON is over the max payload is published as a stub that keeps role,
// name, tool_calls, tool_call_id and Compactor's metadata, while its content (and its
// reasoning, extra and unknown fields) is stored as one object of the objects bucket.
// Readers fetch the object and put the message back together ([Message.Restore]).
type ContentRef struct {
	// Bucket is the object store bucket (compaction-objects by default).
	Bucket string `json:"bucket"`
	// Name is <conversation>/<SHA256>: content addressed, so a retried publish stores
	// the object once, and prefixed with the conversation, so deleting a conversation
	// finds its objects and a reader can refuse another conversation's.
	Name string `json:"name"`
	// Size is the object's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lower-case hex SHA-256 of the object's bytes.
	SHA256 string `json:"sha256"`
	// Tokens is the chars/4 estimate of what the object holds (the content's text, a
	// fixed cost per non-text part, the reasoning), so the message can be counted
	// without fetching it; counters hold it to a token per 8 bytes of Size.
	Tokens int `json:"tokens"`
}

// ObjectName is the name of the object holding body for conversation conv.
func ObjectName(conv string, body []byte) string {
	sum := sha256.Sum256(body)
	return conv + "/" + hex.EncodeToString(sum[:])
}

// validate checks the reference on its own; CheckOwner checks it against the
// conversation it was published in.
func (r *ContentRef) validate() error {
	conv, sum, ok := strings.Cut(r.Name, "/")
	switch {
	case !validBucketName(r.Bucket):
		return invalid("content_ref.bucket", "must be 1-255 characters of [A-Za-z0-9_-]")
	case !ok || ValidateConversationID(conv) != nil || !isSHA256Hex(sum):
		return invalid("content_ref.name", "must be <conversation>/<sha256 of the object in lower-case hex>")
	case !isSHA256Hex(r.SHA256):
		return invalid("content_ref.sha256", "must be 64 lower-case hex digits")
	case sum != r.SHA256:
		return invalid("content_ref.name", "must end in the object's sha256 %s", r.SHA256)
	case r.Size < minObjectSize:
		return invalid("content_ref.size", "must be at least %d bytes (an object holds at least {\"content\":\"\"})", minObjectSize)
	case r.Tokens < 0:
		return invalid("content_ref.tokens", "must not be negative")
	}
	return nil
}

// minObjectSize is the length of the smallest object, {"content":""}.
const minObjectSize = 14

// CheckOwner refuses a reference to an object that is not conversation conv's in
// bucket, before anything is fetched: a stub is as hostile as any message, and must
// not make a reader of one conversation show another's content.
func (r *ContentRef) CheckOwner(conv, bucket string) error {
	if r.Bucket != bucket {
		return invalid("content_ref.bucket", "names bucket %q; objects of this conversation are in %q", r.Bucket, bucket)
	}
	if !strings.HasPrefix(r.Name, conv+"/") {
		return invalid("content_ref.name", "names object %q outside conversation %q (its objects are named %s/<sha256>)", r.Name, conv, conv)
	}
	return nil
}

func validBucketName(s string) bool {
	return s != "" && len(s) <= 255 && isIDChars(s)
}

// isIDChars reports whether s holds only [A-Za-z0-9_-] (the characters of a bucket's
// name and of a ledger entry's id).
func isIDChars(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Offload splits m into the stub to publish and the object to store in bucket for
// conversation conv: the object holds m's content, reasoning, extra and unknown fields
// (a JSON object of those fields, content's bytes as received), the stub everything
// else plus a ContentRef whose Tokens is storedTokens, and a short text content saying
// where the rest is, for a reader that does not know references. The same message
// always gives the same object, so its name, content addressed, is stable across
// retries.
func (m *Message) Offload(conv, bucket string, storedTokens int) (stub Message, object []byte, err error) {
	if err := ValidateConversationID(conv); err != nil {
		return Message{}, nil, err
	}
	if m.ContentRef != nil {
		return Message{}, nil, invalid("content_ref", "is set by Offload; the message is a stub already")
	}
	var b bytes.Buffer
	b.WriteString(`{"content":`)
	if m.Content.IsNull() {
		b.WriteString("null")
	} else {
		b.Write(m.Content.raw)
	}
	if m.Reasoning != "" {
		b.WriteString(`,"reasoning":`)
		writeJSONString(&b, m.Reasoning)
	}
	if len(m.Extra) > 0 {
		b.WriteString(`,"extra":`)
		b.Write(m.Extra)
	}
	writeUnknown(&b, m.Unknown)
	b.WriteByte('}')
	object = b.Bytes()
	if !json.Valid(object) {
		return Message{}, nil, invalid("message", "content, reasoning, extra or an unknown field is not valid JSON")
	}
	name := ObjectName(conv, object)
	ref := &ContentRef{Bucket: bucket, Name: name, Size: int64(len(object)), SHA256: name[len(conv)+1:], Tokens: storedTokens}
	stub = *m
	stub.Content = Text("[content of " + strconv.Itoa(len(object)) + " bytes stored as object " + name + " of bucket " + bucket + "]")
	stub.Reasoning, stub.Extra, stub.Unknown = "", nil, nil
	stub.ContentRef = ref
	if err := stub.Validate(); err != nil {
		return Message{}, nil, err
	}
	return stub, object, nil
}

// Restore returns the message a stub and its object make: the stub's fields, with the
// content, reasoning, extra and unknown fields the object holds, and no ContentRef. It
// checks nothing of where the object came from (see CheckOwner); an object that is
// not a JSON object of those fields, or that makes an invalid message, is an error.
func (m *Message) Restore(object []byte) (Message, error) {
	if m.ContentRef == nil {
		return Message{}, invalid("content_ref", "is required to restore a stub")
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(object, &all); err != nil || all == nil {
		return Message{}, invalid("content_ref", "object %s is not a JSON object", m.ContentRef.Name)
	}
	c, ok := all["content"]
	if !ok {
		return Message{}, invalid("content_ref", "object %s holds no content", m.ContentRef.Name)
	}
	out := *m
	out.ContentRef = nil
	out.Content = RawContent(c)
	out.Reasoning, out.Extra = "", nil
	out.Unknown = maps.Clone(m.Unknown)
	for k, v := range all {
		switch {
		case k == "content":
		case k == "reasoning":
			if err := json.Unmarshal(v, &out.Reasoning); err != nil {
				return Message{}, invalid("content_ref", "object %s: reasoning must be a string", m.ContentRef.Name)
			}
		case k == "extra":
			if !isJSONNull(v) {
				out.Extra = bytes.Clone(v)
			}
		case slices.Contains(messageFieldOrder, k):
			// The fields of the wire contract other than these stay on the stub: an
			// object cannot change what the stub says about roles and tool rounds (what
			// the trigger counted without fetching it).
			return Message{}, invalid("content_ref", "object %s holds %q, which only the stub may carry", m.ContentRef.Name, k)
		default:
			if out.Unknown == nil {
				out.Unknown = map[string]json.RawMessage{}
			}
			out.Unknown[k] = bytes.Clone(v)
		}
	}
	if err := out.Validate(); err != nil {
		return Message{}, fmt.Errorf("object %s restores an invalid message: %w", m.ContentRef.Name, err)
	}
	return out, nil
}

// UnmarshalJSON reads the exact (lower-case) field names only, as Message does, and
// requires every one of them.
func (r *ContentRef) UnmarshalJSON(data []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	if all == nil {
		return fmt.Errorf("not an object")
	}
	*r = ContentRef{}
	for _, f := range []struct {
		key string
		to  any
	}{{"bucket", &r.Bucket}, {"name", &r.Name}, {"size", &r.Size}, {"sha256", &r.SHA256}, {"tokens", &r.Tokens}} {
		v, ok := all[f.key]
		if !ok || isJSONNull(v) {
			return fmt.Errorf("%s is required", f.key)
		}
		if err := json.Unmarshal(v, f.to); err != nil {
			return fmt.Errorf("%s: %v", f.key, err)
		}
	}
	return nil
}
