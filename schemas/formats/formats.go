package formats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
)

// Format names the API a rendering is for.
type Format string

// The formats, by the name the CLI, the service and the Go client take.
const (
	// OpenAI is the OpenAI chat completions request: {"messages": [...]}, exactly the
	// messages the reader returns (Compactor's metadata stripped).
	OpenAI Format = "openai"
	// Anthropic is the Anthropic Messages request: {"system": [...], "messages": [...]}.
	Anthropic Format = "anthropic"
	// Responses is the OpenAI Responses request: {"input": [...]}.
	Responses Format = "responses"
	// Gemini is the Gemini generateContent request:
	// {"systemInstruction": {...}, "contents": [...]}.
	Gemini Format = "gemini"
)

// all lists the formats in the order Names gives them.
var all = [...]Format{OpenAI, Anthropic, Responses, Gemini}

// Names returns the valid format names: openai, anthropic, responses, gemini.
func Names() []string {
	out := make([]string, len(all))
	for i, f := range all {
		out[i] = string(f)
	}
	return out
}

// Parse returns the format named s; an unknown name is an error matching
// [ErrUnknownFormat] that lists the valid ones.
func Parse(s string) (Format, error) {
	for _, f := range all {
		if string(f) == s {
			return f, nil
		}
	}
	shown := s
	if len(shown) > 64 {
		shown = strings.ToValidUTF8(shown[:64], "") + "…"
	}
	return "", fmt.Errorf("%w %q: use one of %s", ErrUnknownFormat, shown, strings.Join(Names(), ", "))
}

// Request is a rendered request fragment: the fields of the provider's request body
// that carry the conversation. The agent adds its own (model, tools, max_tokens...).
type Request struct {
	Format Format
	// JSON is one JSON object.
	JSON json.RawMessage
	// Prefix is the number of leading bytes of JSON that render the pinned messages and
	// the summary (up to and including the summary's block, message or item). They do
	// not depend on any message after the summary, so they stay byte-identical until
	// the next compaction. 0 when the context has no summary.
	Prefix int
}

// PlaceholderStart is the text of the user turn put before a context that would
// otherwise start with an assistant (model) turn, for the formats whose API wants the
// first turn to be the user's (anthropic, gemini).
const PlaceholderStart = "[The conversation continues.]"

// SystemMarker starts the user text that carries a system message of the tail in the
// formats that keep system text apart from the turns (anthropic, gemini): only the
// system messages of the prefix (pinned ones, the leading ones) go to the system field,
// so a later system message never changes the bytes before the summary.
const SystemMarker = "[system] "

// RawArgumentsKey is the key of the object that wraps tool-call arguments that are not
// a JSON object (invalid JSON, an array...) where the API wants an object (anthropic
// tool_use.input, gemini functionCall.args): {"_raw": "<the arguments as sent>"}.
const RawArgumentsKey = "_raw"

// Render renders cx as the request fragment of format f. cx is what the reader
// assembled (Seqs with 0 for the summary message); a context whose tool calls and
// results do not pair up is refused with [ErrUnpaired].
//
// What each format does:
//
//   - openai: {"messages": [...]}: the messages exactly as the reader returns them
//     (reasoning, extra and unknown fields kept byte for byte).
//   - anthropic: the system messages of the prefix (before the summary; without a
//     summary, the leading ones) go to "system" as text blocks; a later system message
//     is a user text block starting with [SystemMarker]. Assistant tool calls are
//     tool_use blocks (input: the parsed arguments object, or {"_raw": ...}; an id
//     outside [A-Za-z0-9_-] is replaced by "toolu_" and 32 hex digits of its SHA-256,
//     an id an earlier round used gets "_2", "_3"..., the same for its tool_result);
//     tool messages are tool_result blocks in the user
//     message right after. Consecutive same-role messages are merged into one message
//     of several blocks; a context that starts with an assistant message gets a user
//     message [PlaceholderStart] first. The summary is a user text block (whatever its
//     summary_role) marked cache_control {"type": "ephemeral"}: the prompt cache
//     breakpoint. Content parts:
//     text; image_url as an image block (data: URL: base64 source for jpeg, png, gif,
//     webp; http(s) URL: url source); any other part (audio, file, another image)
//     becomes its text placeholder ([audio], [file: name]...). Blank text is left out.
//   - responses: {"input": [...]} items in order: a message item per message (role
//     system, user or assistant; user parts become input_text and input_image, other
//     roles' parts their text), a function_call item per tool call and a
//     function_call_output item per tool message (a call_id an earlier round used
//     gets "_2", "_3"...). System messages stay message items in place
//     ("instructions" is left to the agent).
//   - gemini: prefix system messages go to systemInstruction, later ones are user text
//     starting with [SystemMarker]; the summary is user text; roles user and model,
//     consecutive same-role
//     messages merged, [PlaceholderStart] before a leading model turn. Tool calls are
//     functionCall parts {id, name, args}; tool messages functionResponse parts {id,
//     name (from the matching call), response: {"output": "<the result text>"}} in the
//     user turn right after. Images from data: URLs are inlineData; an http(s) image
//     becomes the text [image: <url>]; other parts their placeholder.
//
// Names of messages, reasoning and extra are OpenAI-only and are dropped by the other
// formats (a provider's signed thinking blocks cannot be carried across providers).
// Render is deterministic: the same context gives the same bytes.
func Render(cx *assemble.Context, f Format) (Request, error) {
	if cx == nil {
		return Request{}, fmt.Errorf("%w: no context", ErrInvalidContext)
	}
	if len(cx.Seqs) != len(cx.Messages) {
		return Request{}, fmt.Errorf("%w: %d sequences for %d messages", ErrInvalidContext, len(cx.Seqs), len(cx.Messages))
	}
	if err := rounds.CheckPairs(cx.Messages); err != nil {
		return Request{}, fmt.Errorf("%w: %w", ErrUnpaired, err)
	}
	in := newInput(cx)
	var (
		b      bytes.Buffer
		prefix int
		err    error
	)
	switch f {
	case OpenAI:
		prefix, err = renderOpenAI(&b, in)
	case Anthropic:
		prefix, err = renderAnthropic(&b, in)
	case Responses:
		prefix, err = renderResponses(&b, in)
	case Gemini:
		prefix, err = renderGemini(&b, in)
	default:
		_, err = Parse(string(f))
	}
	if err != nil {
		return Request{}, err
	}
	return Request{Format: f, JSON: b.Bytes(), Prefix: prefix}, nil
}

// input is the context being rendered.
type input struct {
	msgs []schemas.Message
	// summary is the index of the summary message, -1 without one.
	summary int
	// prefixEnd is the last index of the prefix: the summary, or without one the last
	// of the leading system messages (-1: none).
	prefixEnd int
}

func newInput(cx *assemble.Context) input {
	in := input{msgs: cx.Messages, summary: -1, prefixEnd: -1}
	if cx.HasSummary {
		for i, s := range cx.Seqs {
			if s == 0 {
				in.summary = i
				break
			}
		}
	}
	in.prefixEnd = in.summary
	if in.summary < 0 {
		for i := range in.msgs {
			if in.msgs[i].Role != schemas.RoleSystem {
				break
			}
			in.prefixEnd = i
		}
	}
	return in
}

// systemApart reports whether message i is a system message of the prefix, which the
// formats that keep system text apart put there.
func (in input) systemApart(i int) bool {
	return in.msgs[i].Role == schemas.RoleSystem && i <= in.prefixEnd
}

// marshal encodes v without HTML escaping (the text stays readable) and without the
// encoder's trailing newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// writeList writes items as a JSON array and returns the offset in b just after item
// mark (0 when mark < 0).
func writeList[T any](b *bytes.Buffer, items []T, mark int) (int, error) {
	off := 0
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		enc, err := marshal(it)
		if err != nil {
			return 0, err
		}
		b.Write(enc)
		if i == mark {
			off = b.Len()
		}
	}
	b.WriteByte(']')
	return off, nil
}

// argsObject returns tool-call arguments as a JSON object: the arguments themselves
// (compacted) when they are one, {} when empty, else {"_raw": arguments}.
func argsObject(args string) (json.RawMessage, error) {
	t := strings.TrimSpace(args)
	if t == "" {
		return json.RawMessage("{}"), nil
	}
	if t[0] == '{' && json.Valid([]byte(t)) {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(t)); err == nil {
			return b.Bytes(), nil
		}
	}
	return marshal(map[string]string{RawArgumentsKey: args})
}

// The kinds of a piece of content.
const (
	pieceText = iota
	pieceImageData
	pieceImageURL
)

// piece is one content part, read into what the formats need.
type piece struct {
	kind int
	// text is the text of a text piece, or the placeholder of a part no format keeps.
	text string
	// mime and data are a data: URL image's media type and base64 data.
	mime, data string
	// url is an http(s) image's address; detail the OpenAI detail level of an image.
	url, detail string
}

// pieces reads a message's content. A string is one text piece; null none; a part
// that is neither text nor an image_url the formats can carry is a text piece holding
// its placeholder ([audio], [file: name]...).
func pieces(c schemas.Content) []piece {
	if !c.IsParts() {
		if c.IsNull() {
			return nil
		}
		return []piece{{kind: pieceText, text: c.String()}}
	}
	parts, err := c.Parts()
	if err != nil {
		return []piece{{kind: pieceText, text: "[unreadable content]"}}
	}
	out := make([]piece, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, piece{kind: pieceText, text: p.Text})
		case "image_url":
			out = append(out, imagePiece(p))
		default:
			out = append(out, piece{kind: pieceText, text: p.Placeholder()})
		}
	}
	return out
}

// imagePiece reads an image_url part: {"image_url": {"url", "detail"}} or
// {"image_url": "<url>"}.
func imagePiece(p schemas.ContentPart) piece {
	var f struct {
		ImageURL json.RawMessage `json:"image_url"`
	}
	_ = json.Unmarshal(p.Raw, &f)
	var u struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(f.ImageURL, &u.URL) != nil {
		_ = json.Unmarshal(f.ImageURL, &u)
	}
	if rest, ok := strings.CutPrefix(u.URL, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		if mime, b64 := strings.CutSuffix(meta, ";base64"); ok && b64 && mime != "" && data != "" {
			return piece{kind: pieceImageData, mime: strings.ToLower(mime), data: data, detail: u.Detail}
		}
	}
	if strings.HasPrefix(u.URL, "https://") || strings.HasPrefix(u.URL, "http://") {
		return piece{kind: pieceImageURL, url: u.URL, detail: u.Detail}
	}
	return piece{kind: pieceText, text: p.Placeholder()}
}

// flatText joins the pieces' text with newlines, an image as [image].
func flatText(ps []piece) string {
	if len(ps) == 1 && ps[0].kind == pieceText {
		return ps[0].text
	}
	texts := make([]string, 0, len(ps))
	for _, p := range ps {
		if p.kind == pieceText {
			texts = append(texts, p.text)
		} else {
			texts = append(texts, "[image]")
		}
	}
	return strings.Join(texts, "\n")
}

// blank reports whether s has no visible text (APIs refuse empty text blocks).
func blank(s string) bool { return strings.TrimSpace(s) == "" }

// turn is one message of the formats that merge consecutive same-role messages.
type turn[B any] struct {
	role   string
	blocks []B
	// mark is the index of the block that ends the prefix, -1 when none here.
	mark int
}

// addTurn appends blocks in role to turns, merging them into the last turn when it
// has the same role. markLast marks the last of blocks as the end of the prefix.
func addTurn[B any](turns []turn[B], role string, blocks []B, markLast bool) []turn[B] {
	if len(blocks) == 0 {
		return turns
	}
	if n := len(turns); n > 0 && turns[n-1].role == role {
		t := &turns[n-1]
		t.blocks = append(t.blocks, blocks...)
		if markLast {
			t.mark = len(t.blocks) - 1
		}
		return turns
	}
	t := turn[B]{role: role, blocks: blocks, mark: -1}
	if markLast {
		t.mark = len(blocks) - 1
	}
	return append(turns, t)
}

// writeTurns writes turns as [{"role": ..., key: [blocks]}...] and returns the offset
// just after the marked block (0 when none).
func writeTurns[B any](b *bytes.Buffer, turns []turn[B], key string) (int, error) {
	off := 0
	b.WriteByte('[')
	for i, t := range turns {
		if i > 0 {
			b.WriteByte(',')
		}
		role, _ := marshal(t.role)
		b.WriteString(`{"role":`)
		b.Write(role)
		b.WriteString(`,"` + key + `":`)
		o, err := writeList(b, t.blocks, t.mark)
		if err != nil {
			return 0, err
		}
		if o > 0 {
			off = o
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return off, nil
}

// validToolID reports whether id matches ^[A-Za-z0-9_-]+$.
func validToolID(id string) bool {
	if id == "" || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// callIDs gives every tool call of a rendering an id of its own, for the APIs that want
// ids unique across the whole request (anthropic, responses) while the chat format lets
// a later round reuse an earlier round's id. A repeated id gets "_2", "_3"... (the first
// suffix not taken yet), in its call and in its result alike. It depends only on the
// calls before, so the prefix bytes stay the same as the tail grows.
type callIDs struct {
	clean func(string) string // makes an id acceptable to the API
	used  map[string]bool
	open  map[string]string // the current round's ids: as sent → as rendered
}

func newCallIDs(clean func(string) string) *callIDs {
	return &callIDs{clean: clean, used: map[string]bool{}, open: map[string]string{}}
}

// round starts the ids of an assistant message's tool calls.
func (c *callIDs) round() { clear(c.open) }

// call returns the id to render for a call of the current round.
func (c *callIDs) call(id string) string {
	base := c.clean(id)
	got := base
	for n := 2; c.used[got]; n++ {
		got = base + "_" + strconv.Itoa(n)
	}
	c.used[got] = true
	c.open[id] = got
	return got
}

// result returns the id to render for the result of call id of the current round.
func (c *callIDs) result(id string) string {
	if got, ok := c.open[id]; ok {
		return got
	}
	return c.clean(id)
}
