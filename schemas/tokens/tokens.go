package tokens

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
)

const (
	// PerMessage is the fixed cost of one message (role, separators).
	PerMessage = 4
	// PerNonTextPart is the cost of one image, audio or file content part.
	PerNonTextPart = 256
	// PerToolCall is the fixed cost of one tool call besides its name and arguments.
	PerToolCall = 4
)

// Counter counts the tokens of a text. Implementations must be safe for concurrent use.
type Counter interface {
	Count(text string) int
}

// ErrTokenizerUnavailable is matched when a policy names a tokenizer the process
// cannot count with.
var ErrTokenizerUnavailable = errors.New("tokenizer is not available in this process")

// Lookup returns the counter of a tokenizer name (policy key tokenizer): chars/4 for ""
// and "chars4", otherwise what exact gives (nil: only chars4 is known).
func Lookup(name string, exact func(name string) (Counter, error)) (Counter, error) {
	if name == "" || name == "chars4" {
		return Chars4{}, nil
	}
	if exact == nil {
		return nil, fmt.Errorf("%w: %q", ErrTokenizerUnavailable, name)
	}
	return exact(name)
}

// Chars4 is the default Counter: ceil(characters / 4), the same as [Text].
type Chars4 struct{}

// Count returns Text(text).
func (Chars4) Count(text string) int { return Text(text) }

// Text estimates the tokens of a string: ceil(characters / 4).
func Text(s string) int {
	return (utf8.RuneCountInString(s) + 3) / 4
}

// Message returns MessageWith(Chars4{}, m).
func Message(m *schemas.Message) int { return MessageWith(Chars4{}, m) }

// MessageWith returns the producer's count m.Tokens when it set one, held to at least
// Floor(m), else EstimateWith(c, m). A declared count is a hint: a message marked
// `tokens: 1` that holds 900 KB still weighs what its bytes imply.
func MessageWith(c Counter, m *schemas.Message) int {
	if m.Tokens > 0 {
		if m.Tokens >= floorBound(m) {
			return m.Tokens // above any floor the content can have: nothing to decode
		}
		return max(m.Tokens, Floor(m))
	}
	return EstimateWith(c, m)
}

// floorBound is at least Floor(m), from lengths alone: a JSON string's encoding is never
// shorter than its text, so the content's raw bytes bound its text's.
func floorBound(m *schemas.Message) int {
	b := callBytes(m)
	if m.ContentRef != nil {
		return bytesFloor(b) + refFloor(m.ContentRef)
	}
	return bytesFloor(b + len(m.Reasoning) + len(m.Content.Raw()))
}

// Estimate ignores m.Tokens and estimates from the content with chars/4.
func Estimate(m *schemas.Message) int { return EstimateWith(Chars4{}, m) }

// EstimateWith ignores m.Tokens and estimates from the content: text parts counted by c
// (nil means Chars4), a fixed cost per non-text part, the reasoning, the name and every
// tool call (a fixed cost plus its name and arguments counted by c). A stub (a message
// whose content is stored as an object) counts its reference's tokens in place of its
// content and reasoning, held to at least a token per FloorBytesPerToken bytes of the
// object (ContentRef.Size, which a reader checks against the object it fetches), so it
// weighs what the whole message does without a fetch.
func EstimateWith(c Counter, m *schemas.Message) int {
	if c == nil {
		c = Chars4{}
	}
	n := PerMessage + c.Count(m.Name)
	if m.ContentRef != nil {
		n += max(m.ContentRef.Tokens, refFloor(m.ContentRef))
	} else {
		n += stored(c, m)
	}
	for _, tc := range m.ToolCalls {
		n += PerToolCall + c.Count(tc.Function.Name) + c.Count(tc.Function.Arguments)
	}
	return n
}

// FloorBytesPerToken is the most UTF-8 bytes of text one token is taken to stand for
// when a declared count is checked against the content (see [Floor]). Real text takes
// about 4 bytes a token, code and JSON fewer, other scripts than Latin fewer still; 8
// leaves an honest count room to be below the chars/4 estimate and no room to be far
// below it.
const FloorBytesPerToken = 8

// maxFloorBytes bounds the bytes a stub's declared object size counts for, so a hostile
// size cannot overflow a sum.
const maxFloorBytes = 1 << 40

// Floor is the fewest tokens the content of m is taken to hold, whatever its producer
// declares: a token per FloorBytesPerToken UTF-8 bytes of its text (the name, the
// content's text, the reasoning, the tool calls' names and arguments, what a content
// part holds beside its text or media: see PartBytes), rounded up. Media payloads and the
// fixed costs count nothing. A stub counts its object's size
// (ContentRef.Size) in place of its content and reasoning. It depends on bytes only, so
// every client computes it (the TS client from a part's JSON as it re-encodes it, which
// may differ from the bytes received by whitespace and escapes).
func Floor(m *schemas.Message) int {
	b := callBytes(m)
	if m.ContentRef != nil {
		return bytesFloor(b) + refFloor(m.ContentRef)
	}
	b += len(m.Reasoning)
	switch {
	case m.Content.IsString():
		b += len(m.Content.String())
	case m.Content.IsParts():
		parts, err := m.Content.Parts()
		if err == nil {
			for _, p := range parts {
				b += PartBytes(p)
			}
		}
	}
	return bytesFloor(b)
}

// callBytes is what of m the floor counts beside its content and reasoning, which a
// stub moves into its object: the name and the tool calls' names and arguments.
func callBytes(m *schemas.Message) int {
	b := len(m.Name)
	for _, tc := range m.ToolCalls {
		b += len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return b
}

// bytesFloor is ceil(b / FloorBytesPerToken).
func bytesFloor(b int) int { return (b + FloorBytesPerToken - 1) / FloorBytesPerToken }

// refFloor is the floor of what a stub's object holds: its size in bytes.
func refFloor(r *schemas.ContentRef) int {
	return bytesFloor(int(min(max(r.Size, 0), maxFloorBytes)))
}

// mediaParts are the part types whose payload is media a model counts by its size in
// pixels, seconds or pages, not by its encoded bytes: the payload weighs PerNonTextPart.
var mediaParts = map[string]bool{"image_url": true, "image": true, "input_audio": true, "audio": true, "file": true}

// PartBytes is how many bytes of a content part a model is sent as text, for the floor:
// a text part's text and its other fields; a media part (image, audio, file) its fields
// beside the payload (an image's data URL, audio's or a file's data); a part of any
// other type (a refusal, a type Compactor does not know) its whole JSON. A part cannot
// hide bytes from the count by its type or in a field of its own.
func PartBytes(p schemas.ContentPart) int { return partBytes(p.Type, len(p.Text), p.Fields, p.Raw) }

// partBytes is PartBytes of a part of type typ, whose text is textBytes long, whose
// Fields is fields and whose JSON is raw.
func partBytes(typ string, textBytes, fields int, raw []byte) int {
	switch {
	case typ == "text":
		return textBytes + fields
	case mediaParts[typ]:
		return mediaFields(fields, raw)
	}
	return len(raw)
}

// mediaFields is what a media part holds beside its payload.
func mediaFields(fields int, raw []byte) int {
	return max(fields-payloadLength(raw), 0)
}

// partEstimate is the chars/4 estimate of a content part but the text of a text part:
// a text part's other fields; a media part's fixed cost, which covers up to
// 4 × PerNonTextPart bytes of fields beside its payload; another part's whole JSON.
func partEstimate(typ string, fields int, raw []byte) int {
	switch {
	case typ == "text":
		return (fields + 3) / 4
	case mediaParts[typ]:
		return PerNonTextPart + (max(mediaFields(fields, raw)-4*PerNonTextPart, 0)+3)/4
	}
	return PerNonTextPart + (len(raw)+3)/4
}

// payloadKeys are the fields that hold a media part's payload: an image's url (a data
// URL), audio's or a file's base64 data.
var payloadKeys = map[string]bool{"url": true, "data": true, "file_data": true, "image_url": true, "image": true}

// payloadLength is the length, quotes included, of the longest JSON string literal in
// raw that is the value of a payload key (payloadKeys): a media part's payload.
func payloadLength(raw []byte) int {
	best, key := 0, []byte(nil)
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(raw) && raw[j] != '"' {
			if raw[j] == '\\' {
				j++
			}
			j++
		}
		end := min(j, len(raw)-1)
		k := end + 1
		for k < len(raw) && (raw[k] == ' ' || raw[k] == '\t' || raw[k] == '\n' || raw[k] == '\r') {
			k++
		}
		switch {
		case k < len(raw) && raw[k] == ':': // a key: the literal after it is its value
			key = raw[i+1 : end]
		case payloadKeys[string(key)]:
			best = max(best, end-i+1)
			key = nil
		default:
			key = nil
		}
		i = end
	}
	return best
}

// Stored is the chars/4 estimate of what Offload moves into an object (the content and
// the reasoning): the tokens a stub's ContentRef carries.
func Stored(m *schemas.Message) int { return stored(Chars4{}, m) }

func stored(c Counter, m *schemas.Message) int {
	n := c.Count(m.Reasoning)
	switch {
	case m.Content.IsString():
		n += c.Count(m.Content.String())
	case m.Content.IsParts():
		parts, err := m.Content.Parts()
		if err == nil {
			for _, p := range parts {
				if p.Type == "text" {
					n += c.Count(p.Text)
				}
				n += partEstimate(p.Type, p.Fields, p.Raw)
			}
		}
	}
	return n
}

// Messages sums Message over ms.
func Messages(ms []schemas.Message) int { return MessagesWith(Chars4{}, ms) }

// MessagesWith sums MessageWith(c, ·) over ms.
func MessagesWith(c Counter, ms []schemas.Message) int {
	n := 0
	for i := range ms {
		n += MessageWith(c, &ms[i])
	}
	return n
}

// Entries sums Message over the valid entries of es; invalid ones count nothing.
func Entries(es []schemas.Entry) int { return EntriesWith(Chars4{}, es) }

// EntriesWith sums MessageWith(c, ·) over the valid entries of es; invalid ones count
// nothing.
func EntriesWith(c Counter, es []schemas.Entry) int {
	n := 0
	for i := range es {
		if es[i].Err == nil {
			n += MessageWith(c, &es[i].Message)
		}
	}
	return n
}
