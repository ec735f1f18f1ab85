package anthropic

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor/compactor/internal/proxy/wire"
	"slices"
	"strconv"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

// The keys of a message's Extra that keep what Compactor's form has no field for, so
// that Build gives it back to the API.
const (
	// ExtraContentPrefix holds an assistant turn's thinking and redacted_thinking
	// blocks, their text and signatures unchanged (compact, keys sorted): Build puts
	// them back before the message's content.
	ExtraContentPrefix = "anthropic_content_prefix"
	// ExtraIsError marks a tool message read from a tool_result with is_error true.
	ExtraIsError = "anthropic_is_error"
)

// Anthropic returns the wire of Anthropic Messages (POST /v1/messages).
//
// Parse reads the request into Compactor's chat messages: "system" (a string or text
// blocks) is the first message, role system; a user turn's tool_result blocks are
// tool messages, in order, before a user message holding the rest of the turn; an
// assistant turn's tool_use blocks are tool calls (arguments: the input object as
// compact JSON with sorted keys). Text blocks become text parts without their
// cache_control (clients move it from turn to turn), images image_url parts (a
// base64 source as a data: URL); other blocks are kept whole as parts, in canonical
// form (compact, keys sorted, no cache_control). Thinking blocks, in the same form, go
// to Extra[ExtraContentPrefix], is_error to Extra[ExtraIsError]; Build
// puts both back, with the blocks kept whole and the client's cache breakpoints (see
// carryBreakpoints). Reply and the stream read the upstream's content blocks the way
// Parse reads an assistant turn, so the reply stored and the same turn sent back by
// the client are the same message.
func Anthropic() wire.Wire { return anthropicWire{} }

type anthropicWire struct{}

func (anthropicWire) Name() string { return "anthropic" }

func (anthropicWire) Parse(body []byte) (*wire.Request, error) {
	if off := wire.InvalidUTF8(body); off >= 0 {
		return nil, wire.BadRequest("the body is not valid UTF-8 (first bad byte at offset %d)", off)
	}
	f, err := wire.RequestFields(body)
	if err != nil {
		return nil, err
	}
	req := &wire.Request{Body: body}
	if err := wire.CommonFields(f, req, "max_tokens"); err != nil {
		return nil, err
	}
	if sys, ok := f["system"]; ok && !wire.IsNull(sys) {
		m, err := anthropicSystem(sys)
		if err != nil {
			return nil, err
		}
		if m != nil {
			req.Messages = append(req.Messages, *m)
		}
	}
	raw, ok := f["messages"]
	if !ok || wire.IsNull(raw) {
		return nil, wire.BadRequest("messages is required")
	}
	var turns []json.RawMessage
	if err := json.Unmarshal(raw, &turns); err != nil {
		return nil, wire.BadRequest("messages must be an array of messages")
	}
	if len(turns) == 0 {
		return nil, wire.BadRequest("messages must not be empty")
	}
	for i, t := range turns {
		msgs, err := anthropicTurn(t)
		if err != nil {
			return nil, wire.BadRequest("messages[%d]: %v", i, err)
		}
		req.Messages = append(req.Messages, msgs...)
	}
	for i := range req.Messages {
		if err := req.Messages[i].Validate(); err != nil {
			return nil, wire.BadRequest("%v", err)
		}
	}
	if err := wire.CheckPairs(req.Messages); err != nil {
		return nil, err
	}
	return req, nil
}

// anthropicSystem reads the system field: a string, or an array of text blocks (one
// text part each). A blank system is no message.
func anthropicSystem(raw json.RawMessage) (*schemas.Message, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return &schemas.Message{Role: schemas.RoleSystem, Content: schemas.RawContent(raw)}, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, wire.BadRequest("system must be a string or an array of text blocks")
	}
	parts := make([]json.RawMessage, 0, len(blocks))
	for i, b := range blocks {
		blk, err := readBlock(b, i)
		if err != nil || blk.Type != "text" || blk.Text == nil {
			return nil, wire.BadRequest("system[%d] must be a text block", i)
		}
		parts = append(parts, textPart(*blk.Text))
	}
	if len(parts) == 0 {
		return nil, nil
	}
	return &schemas.Message{Role: schemas.RoleSystem, Content: schemas.Parts(parts...)}, nil
}

// textPart is the text part {"type":"text","text":s}.
func textPart(s string) json.RawMessage {
	b, _ := wire.MarshalNoEscape(s)
	return append(append([]byte(`{"type":"text","text":`), b...), '}')
}

// anthropicTurn reads one element of messages.
func anthropicTurn(raw json.RawMessage) ([]schemas.Message, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return nil, errors.New("must be an object {role, content}")
	}
	t := struct {
		Role    string
		Content json.RawMessage
	}{stringField(f, "role"), f["content"]}
	var s string
	if json.Unmarshal(t.Content, &s) == nil {
		if t.Role != "user" && t.Role != "assistant" {
			return nil, fmt.Errorf("role must be user or assistant, not %q", t.Role)
		}
		return []schemas.Message{{Role: schemas.Role(t.Role), Content: schemas.RawContent(t.Content)}}, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(t.Content, &blocks); err != nil {
		return nil, errors.New("content must be a string or an array of content blocks")
	}
	switch t.Role {
	case "user":
		return anthropicUser(blocks)
	case "assistant":
		m, err := anthropicAssistant(blocks)
		if err != nil {
			return nil, err
		}
		return []schemas.Message{m}, nil
	}
	return nil, fmt.Errorf("role must be user or assistant, not %q", t.Role)
}

// block is the fields of a content block the proxy reads.
type block struct {
	Type, ID, Name, ToolUseID string
	Text                      *string
	Source, Input, Content    json.RawMessage
	IsError                   bool
}

type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// readBlock reads a content block by the exact field names the API reads (encoding/json
// would match a field name in any case).
func readBlock(raw json.RawMessage, i int) (block, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil || stringField(f, "type") == "" {
		return block{}, fmt.Errorf("content[%d] must be a content block with a type", i)
	}
	b := block{Type: stringField(f, "type"), Source: f["source"], ID: stringField(f, "id"), Name: stringField(f, "name"),
		Input: f["input"], ToolUseID: stringField(f, "tool_use_id"), Content: f["content"], IsError: string(f["is_error"]) == "true"}
	var text string
	if json.Unmarshal(f["text"], &text) == nil && !wire.IsNull(f["text"]) {
		b.Text = &text
	}
	return b, nil
}

// stringField returns field k of f when it is a string, else "".
func stringField(f map[string]json.RawMessage, k string) string {
	var s string
	_ = json.Unmarshal(f[k], &s)
	return s
}

// anthropicUser reads a user turn's blocks: one tool message per tool_result, then a
// user message with the other blocks (none when there are none).
func anthropicUser(blocks []json.RawMessage) ([]schemas.Message, error) {
	var (
		out   []schemas.Message
		parts []json.RawMessage
	)
	for i, raw := range blocks {
		b, err := readBlock(raw, i)
		if err != nil {
			return nil, err
		}
		if b.Type != "tool_result" {
			p, err := contentPart(b, raw, i)
			if err != nil {
				return nil, err
			}
			parts = append(parts, p)
			continue
		}
		m, err := toolResult(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if len(parts) > 0 || len(out) == 0 {
		out = append(out, schemas.Message{Role: schemas.RoleUser, Content: partsContent(parts)})
	}
	return out, nil
}

// partsContent is an array content of parts ([] when none).
func partsContent(parts []json.RawMessage) schemas.Content {
	if len(parts) == 0 {
		return schemas.RawContent(json.RawMessage("[]"))
	}
	return schemas.Parts(parts...)
}

// toolResult reads a tool_result block as a tool message.
func toolResult(b block, i int) (schemas.Message, error) {
	if b.ToolUseID == "" {
		return schemas.Message{}, fmt.Errorf("content[%d].tool_use_id is required", i)
	}
	m := schemas.Message{Role: schemas.RoleTool, ToolCallID: b.ToolUseID, Content: schemas.Text("")}
	if len(b.Content) > 0 && !wire.IsNull(b.Content) {
		var s string
		if json.Unmarshal(b.Content, &s) == nil {
			m.Content = schemas.RawContent(b.Content)
		} else {
			var inner []json.RawMessage
			if err := json.Unmarshal(b.Content, &inner); err != nil {
				return schemas.Message{}, fmt.Errorf("content[%d].content must be a string or an array of blocks", i)
			}
			parts := make([]json.RawMessage, 0, len(inner))
			for j, raw := range inner {
				ib, err := readBlock(raw, j)
				if err != nil {
					return schemas.Message{}, fmt.Errorf("content[%d].%v", i, err)
				}
				p, err := contentPart(ib, raw, j)
				if err != nil {
					return schemas.Message{}, fmt.Errorf("content[%d].%v", i, err)
				}
				parts = append(parts, p)
			}
			m.Content = partsContent(parts)
		}
	}
	if b.IsError {
		m.Extra = json.RawMessage(`{"` + ExtraIsError + `":true}`)
	}
	return m, nil
}

// contentPart turns a text or image block into Compactor's content part; any other
// block is kept whole, in canonical form (compact, keys sorted, no cache_control), so
// that the same block sent twice with other spacing, key order or breakpoints is the
// same part.
func contentPart(b block, raw json.RawMessage, i int) (json.RawMessage, error) {
	switch b.Type {
	case "text":
		if b.Text == nil {
			return nil, fmt.Errorf("content[%d].text is required", i)
		}
		return textPart(*b.Text), nil
	case "image":
		var f map[string]json.RawMessage
		_ = json.Unmarshal(b.Source, &f)
		src := imageSource{Type: stringField(f, "type"), MediaType: stringField(f, "media_type"), Data: stringField(f, "data"), URL: stringField(f, "url")}
		if src.Type == "" {
			return nil, fmt.Errorf("content[%d].source must be an image source", i)
		}
		url := src.URL
		if src.Type == "base64" {
			url = "data:" + src.MediaType + ";base64," + src.Data
		}
		if url == "" {
			return canonicalBlock(raw), nil
		}
		enc, _ := wire.MarshalNoEscape(url)
		return append(append([]byte(`{"type":"image_url","image_url":{"url":`), enc...), "}}"...), nil
	}
	return canonicalBlock(raw), nil
}

// canonicalBlock returns a block kept whole in canonical form, without its
// cache_control: Build sets the breakpoints (carryBreakpoints), within the API's limit.
func canonicalBlock(raw json.RawMessage) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v map[string]any
	if d.Decode(&v) != nil || v == nil {
		return json.RawMessage(canonicalArgs(raw))
	}
	delete(v, "cache_control")
	b, err := wire.MarshalNoEscape(v)
	if err != nil {
		return json.RawMessage(canonicalArgs(raw))
	}
	return b
}

// anthropicAssistant reads an assistant turn's blocks: text and other parts as its
// content, tool_use blocks as its tool calls, thinking blocks into its Extra.
func anthropicAssistant(blocks []json.RawMessage) (schemas.Message, error) {
	m := schemas.Message{Role: schemas.RoleAssistant}
	var parts, thinking []json.RawMessage
	for i, raw := range blocks {
		b, err := readBlock(raw, i)
		if err != nil {
			return schemas.Message{}, err
		}
		switch b.Type {
		case "thinking", "redacted_thinking":
			thinking = append(thinking, json.RawMessage(canonicalArgs(raw)))
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return schemas.Message{}, fmt.Errorf("content[%d]: a tool_use needs an id and a name", i)
			}
			m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: b.ID, Type: "function",
				Function: schemas.FunctionCall{Name: b.Name, Arguments: canonicalArgs(b.Input)}})
		default:
			p, err := contentPart(b, raw, i)
			if err != nil {
				return schemas.Message{}, err
			}
			parts = append(parts, p)
		}
	}
	if len(parts) > 0 || len(m.ToolCalls) == 0 {
		m.Content = partsContent(parts)
	}
	if len(thinking) > 0 {
		var e bytes.Buffer
		e.WriteString(`{"` + ExtraContentPrefix + `":[`)
		for i, t := range thinking {
			if i > 0 {
				e.WriteByte(',')
			}
			e.Write(t)
		}
		e.WriteString("]}")
		m.Extra = e.Bytes()
	}
	return m, nil
}

// canonicalArgs returns a JSON value (a tool_use input, a thinking block) as compact
// JSON with sorted keys (numbers as written), "{}" when absent; a value that does not
// decode is kept as sent.
func canonicalArgs(input json.RawMessage) string {
	if len(input) == 0 || wire.IsNull(input) {
		return "{}"
	}
	return string(wire.CanonicalJSON(input))
}

func (anthropicWire) Build(req *wire.Request, cx *assemble.Context) ([]byte, error) {
	if cx == nil {
		return nil, errors.New("no context to send")
	}
	marked, marks, err := markExtras(cx)
	if err != nil {
		return nil, err
	}
	r, err := formats.Render(marked, formats.Anthropic)
	if err != nil {
		return nil, err
	}
	f, err := wire.FieldMap(r.JSON)
	if err != nil {
		return nil, err
	}
	msgs, sys := f["messages"], f["system"]
	if marked != cx {
		if msgs, err = marks.restore(msgs); err != nil {
			return nil, err
		}
	}
	if sys, msgs, err = carryBreakpoints(req.Body, sys, msgs, hasSummary(cx)); err != nil {
		return nil, err
	}
	return wire.SetFields(req.Body, wire.Edit{Key: "system", Value: sys}, wire.Edit{Key: "messages", Value: msgs})
}

func hasSummary(cx *assemble.Context) bool {
	return cx.HasSummary && slices.Contains(cx.Seqs, 0)
}

// maxBreakpoints is the most blocks with cache_control a Messages request may have.
const maxBreakpoints = 4

// carryBreakpoints puts the client's prompt cache breakpoints back into the rendered
// system and messages, which Parse left out (clients move them from turn to turn):
// when the client marked a system block, the last system block is marked; when it
// marked a block of its messages, the last block of the last message is (Anthropic's
// incremental caching: the cache is read back from the longest prefix written
// before). Each gets the client's own cache_control (its last in that field, ttl
// included). The breakpoints stay within the API's four: those of the client's tools
// (sent as they are) and the summary's come first, then system's, then the last
// message's.
func carryBreakpoints(body []byte, sys, msgs json.RawMessage, summary bool) (json.RawMessage, json.RawMessage, error) {
	f, err := wire.FieldMap(body)
	if err != nil {
		return nil, nil, err
	}
	budget := maxBreakpoints - countBreakpoints(f["tools"])
	if summary {
		budget--
	}
	if cc := lastBreakpoint(f["system"]); cc != nil && len(sys) > 0 && budget > 0 {
		if sys, err = markLast(sys, cc); err != nil {
			return nil, nil, err
		}
		budget--
	}
	if budget <= 0 {
		return sys, msgs, nil
	}
	var turns []json.RawMessage
	if err := json.Unmarshal(f["messages"], &turns); err != nil {
		return nil, nil, err
	}
	var cc json.RawMessage
	for _, t := range turns {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(t, &m)
		if c := lastBreakpoint(m["content"]); c != nil {
			cc = c
		}
	}
	if cc == nil {
		return sys, msgs, nil
	}
	msgs, err = markLastTurn(msgs, cc)
	return sys, msgs, err
}

// blockFields decodes an array of blocks (nil for anything else).
func blockFields(raw json.RawMessage) []map[string]json.RawMessage {
	var blocks []map[string]json.RawMessage
	_ = json.Unmarshal(raw, &blocks)
	return blocks
}

// countBreakpoints counts the blocks of an array that have a cache_control.
func countBreakpoints(raw json.RawMessage) int {
	n := 0
	for _, b := range blockFields(raw) {
		if v, ok := b["cache_control"]; ok && !wire.IsNull(v) {
			n++
		}
	}
	return n
}

// lastBreakpoint returns the cache_control of the last block of an array that has
// one (nil when none).
func lastBreakpoint(raw json.RawMessage) json.RawMessage {
	var cc json.RawMessage
	for _, b := range blockFields(raw) {
		if v, ok := b["cache_control"]; ok && !wire.IsNull(v) && json.Valid(v) {
			cc = v
		}
	}
	return cc
}

// markLast returns a rendered array of blocks with cc set on its last block that
// can carry one (not a thinking block).
func markLast(blocks json.RawMessage, cc json.RawMessage) (json.RawMessage, error) {
	var bs []json.RawMessage
	if err := json.Unmarshal(blocks, &bs); err != nil {
		return nil, err
	}
	for i := len(bs) - 1; i >= 0; i-- {
		switch partType(bs[i]) {
		case "thinking", "redacted_thinking":
			continue
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(bs[i], &f); err != nil {
			return nil, err
		}
		if _, ok := f["cache_control"]; ok {
			return blocks, nil // the summary's own
		}
		b := bytes.TrimRight(bs[i], " \t\r\n")
		marked := append(append(append([]byte(nil), b[:len(b)-1]...), `,"cache_control":`...), cc...)
		bs[i] = append(marked, '}')
		break
	}
	return wire.MarshalNoEscape(bs)
}

// markLastTurn marks the last block of the last rendered turn.
func markLastTurn(msgs json.RawMessage, cc json.RawMessage) (json.RawMessage, error) {
	var turns []json.RawMessage
	if err := json.Unmarshal(msgs, &turns); err != nil {
		return nil, err
	}
	if len(turns) == 0 {
		return msgs, nil
	}
	last := len(turns) - 1
	var t renderedTurn
	if err := json.Unmarshal(turns[last], &t); err != nil {
		return nil, err
	}
	content, _ := wire.MarshalNoEscape(t.Content)
	content, err := markLast(content, cc)
	if err != nil {
		return nil, err
	}
	role, _ := wire.MarshalNoEscape(t.Role)
	turns[last] = json.RawMessage(`{"role":` + string(role) + `,"content":` + string(content) + `}`)
	return wire.MarshalNoEscape(turns)
}

// Reply reads a Messages response.
func (anthropicWire) Reply(body []byte) (schemas.Message, *wire.Usage, error) {
	var r struct {
		Type    string            `json:"type"`
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
		Usage   *anthropicUsage   `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the reply is not a message: %w", err)
	}
	if r.Type != "message" || r.Role != "assistant" {
		return schemas.Message{}, nil, fmt.Errorf("the reply is not an assistant message (type %q, role %q)", r.Type, r.Role)
	}
	m, err := anthropicAssistant(r.Content)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the reply's content: %w", err)
	}
	return m, r.Usage.usage(), nil
}

type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

func (u *anthropicUsage) usage() *wire.Usage {
	if u == nil {
		return nil
	}
	var out wire.Usage
	u.into(&out)
	return &out
}

// into sets the counts u reports in out (a message_delta reports only some).
func (u *anthropicUsage) into(out *wire.Usage) {
	in, read, write := out.Input-out.CacheRead-out.CacheWrite, out.CacheRead, out.CacheWrite
	if u.InputTokens != nil {
		in = *u.InputTokens
	}
	if u.CacheReadInputTokens != nil {
		read = *u.CacheReadInputTokens
	}
	if u.CacheCreationInputTokens != nil {
		write = *u.CacheCreationInputTokens
	}
	if u.OutputTokens != nil {
		out.Output = *u.OutputTokens
	}
	out.Input, out.CacheRead, out.CacheWrite = in+read+write, read, write
}

func (anthropicWire) NewStream() wire.Stream { return &anthropicStream{} }

func (anthropicWire) StreamError(message string) []byte {
	e := struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}{Type: "error"}
	e.Error.Type = "api_error"
	e.Error.Message = message
	b, _ := json.Marshal(e)
	return append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
}

// marks are what Build puts back into the rendering that formats.Render leaves out:
// an assistant's thinking blocks, a tool_result's is_error, and the blocks of the API's
// own that Compactor's format does not know (documents, server tool blocks...), which
// Render would turn into placeholder text. Each is a text part that no client text can
// equal (it holds a random nonce) put in the message's content before rendering, and
// found again in the rendered blocks.
type marks struct {
	nonce  string
	byText map[string]mark
}

type mark struct {
	// blocks stand for the marker: an assistant's thinking blocks, or one block kept
	// verbatim.
	blocks []json.RawMessage
	// flags is the marker first in a tool message's content: isError sets is_error,
	// wasString says the content was a string.
	flags, isError, wasString bool
}

// chatPartTypes are the content part types of Compactor's (OpenAI's) format: any other
// part came from the API's own blocks and goes back verbatim.
var chatPartTypes = map[string]bool{"text": true, "image_url": true, "input_audio": true, "file": true, "refusal": true}

// markExtras returns cx with markers in the content of the messages that need them
// (cx itself when none does).
func markExtras(cx *assemble.Context) (*assemble.Context, *marks, error) {
	n, err := nonce()
	if err != nil {
		return nil, nil, err
	}
	mk := &marks{nonce: n, byText: map[string]mark{}}
	var out *assemble.Context
	for i := range cx.Messages {
		if cx.HasSummary && i < len(cx.Seqs) && cx.Seqs[i] == 0 {
			continue // the summary is text Compactor wrote
		}
		c, changed, err := mk.markMessage(i, &cx.Messages[i])
		if err != nil {
			return nil, nil, err
		}
		if !changed {
			continue
		}
		if out == nil {
			c := *cx
			c.Messages = append([]schemas.Message(nil), cx.Messages...)
			out = &c
		}
		out.Messages[i].Content = c
	}
	if out == nil {
		return cx, mk, nil
	}
	return out, mk, nil
}

// markMessage returns message i's content with its markers, and whether it has any.
func (mk *marks) markMessage(i int, m *schemas.Message) (schemas.Content, bool, error) {
	if m.Role == schemas.RoleSystem {
		return schemas.Content{}, false, nil
	}
	x, hasX := readExtra(m)
	var raws []json.RawMessage
	if m.Content.IsParts() {
		if err := json.Unmarshal(m.Content.Raw(), &raws); err != nil {
			return schemas.Content{}, false, fmt.Errorf("message %d: %w", i, err)
		}
	}
	foreign := false
	for _, r := range raws {
		foreign = foreign || !chatPartTypes[partType(r)]
	}
	if !hasX && !foreign {
		return schemas.Content{}, false, nil
	}
	var parts []json.RawMessage
	if hasX {
		if m.Content.IsString() {
			parts = append(parts, textPart(m.Content.String()))
			x.wasString = true
		}
		parts = append([]json.RawMessage{mk.add(i, 0, x)}, parts...)
	}
	for j, r := range raws {
		if chatPartTypes[partType(r)] {
			parts = append(parts, r)
		} else {
			parts = append(parts, mk.add(i, j+1, mark{blocks: []json.RawMessage{r}}))
		}
	}
	return schemas.Parts(parts...), true, nil
}

// add records x under a new marker and returns the marker's text part.
func (mk *marks) add(i, j int, x mark) json.RawMessage {
	text := "\x00compactor-mark:" + mk.nonce + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(j)
	mk.byText[text] = x
	return textPart(text)
}

func partType(raw json.RawMessage) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &p)
	return p.Type
}

// readExtra reads what m's Extra holds for the API.
func readExtra(m *schemas.Message) (mark, bool) {
	if len(m.Extra) == 0 || (m.Role != schemas.RoleAssistant && m.Role != schemas.RoleTool) {
		return mark{}, false
	}
	var x struct {
		Prefix  []json.RawMessage `json:"anthropic_content_prefix"`
		IsError bool              `json:"anthropic_is_error"`
	}
	if json.Unmarshal(m.Extra, &x) != nil {
		return mark{}, false
	}
	if m.Role == schemas.RoleAssistant && len(x.Prefix) > 0 {
		return mark{blocks: x.Prefix}, true
	}
	if m.Role == schemas.RoleTool && x.IsError {
		return mark{flags: true, isError: true}, true
	}
	return mark{}, false
}

func nonce() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// renderedTurn is one message of a rendering.
type renderedTurn struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// restore replaces the marker blocks of a rendered messages array with what they
// stand for.
func (mk *marks) restore(msgs json.RawMessage) (json.RawMessage, error) {
	var turns []renderedTurn
	if err := json.Unmarshal(msgs, &turns); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, t := range turns {
		if i > 0 {
			b.WriteByte(',')
		}
		role, _ := wire.MarshalNoEscape(t.Role)
		b.WriteString(`{"role":`)
		b.Write(role)
		b.WriteString(`,"content":[`)
		n := 0
		for _, blk := range t.Content {
			out, err := mk.restoreBlock(blk)
			if err != nil {
				return nil, err
			}
			for _, o := range out {
				if n > 0 {
					b.WriteByte(',')
				}
				b.Write(o)
				n++
			}
		}
		b.WriteString("]}")
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// markOf returns the mark a block is the marker of.
func (mk *marks) markOf(blk json.RawMessage) (mark, bool) {
	if !bytes.Contains(blk, []byte(mk.nonce)) {
		return mark{}, false
	}
	var t struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(blk, &t) != nil || t.Type != "text" {
		return mark{}, false
	}
	x, ok := mk.byText[t.Text]
	return x, ok
}

// restoreBlock returns what stands for one rendered block: the blocks of a marker,
// a tool_result with its content's markers restored, or the block itself.
func (mk *marks) restoreBlock(blk json.RawMessage) ([]json.RawMessage, error) {
	if x, ok := mk.markOf(blk); ok {
		return x.blocks, nil
	}
	if !bytes.Contains(blk, []byte(mk.nonce)) {
		return []json.RawMessage{blk}, nil
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(blk, &f); err != nil {
		return nil, err
	}
	var inner []json.RawMessage
	if json.Unmarshal(f["content"], &inner) != nil {
		return []json.RawMessage{blk}, nil
	}
	var flags mark
	kept := make([]json.RawMessage, 0, len(inner))
	for _, ib := range inner {
		x, ok := mk.markOf(ib)
		switch {
		case !ok:
			kept = append(kept, ib)
		case x.flags:
			flags = x
		default:
			kept = append(kept, x.blocks...)
		}
	}
	var t struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	switch {
	case len(kept) == 0:
		delete(f, "content")
	case flags.wasString && len(kept) == 1 && json.Unmarshal(kept[0], &t) == nil && t.Type == "text" && t.Text != nil:
		f["content"], _ = wire.MarshalNoEscape(*t.Text)
	default:
		f["content"], _ = wire.MarshalNoEscape(kept)
	}
	if flags.isError {
		f["is_error"] = json.RawMessage("true")
	}
	out, err := wire.MarshalNoEscape(f)
	return []json.RawMessage{out}, err
}

// anthropicStream puts a Messages event stream back together.
type anthropicStream struct {
	blocks       map[int]*streamBlock
	order        []int
	usage        wire.Usage
	hasUsage     bool
	done, failed bool
}

// streamBlock is one content block being streamed: its start and its deltas.
type streamBlock struct {
	start                           map[string]any
	text, json, thinking, signature strings.Builder
}

// anthropicEvent is the fields of a stream event the proxy reads.
type anthropicEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	ContentBlock map[string]any `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
}

func (s *anthropicStream) Event(name string, data []byte) error {
	if s.done || name == "ping" {
		return nil
	}
	if name == "error" {
		s.failed = true
		return nil
	}
	var e anthropicEvent
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // a block's fields are written back as they came
	if err := d.Decode(&e); err != nil {
		return fmt.Errorf("a stream event is not a Messages event: %w", err)
	}
	if e.Type == "" {
		e.Type = name
	}
	switch e.Type {
	case "message_start":
		if e.Message != nil && e.Message.Usage != nil {
			e.Message.Usage.into(&s.usage)
			s.hasUsage = true
		}
	case "content_block_start":
		return s.startBlock(e)
	case "content_block_delta":
		return s.delta(e)
	case "message_delta":
		if e.Usage != nil {
			e.Usage.into(&s.usage)
			s.hasUsage = true
		}
	case "message_stop":
		s.done = true
	case "error":
		s.failed = true
	}
	return nil
}

func (s *anthropicStream) startBlock(e anthropicEvent) error {
	if e.ContentBlock == nil {
		return errors.New("content_block_start without a content_block")
	}
	if s.blocks == nil {
		s.blocks = map[int]*streamBlock{}
	}
	if _, ok := s.blocks[e.Index]; !ok {
		s.order = append(s.order, e.Index)
	}
	s.blocks[e.Index] = &streamBlock{start: e.ContentBlock}
	return nil
}

func (s *anthropicStream) delta(e anthropicEvent) error {
	b := s.blocks[e.Index]
	if b == nil || e.Delta == nil {
		return fmt.Errorf("content_block_delta for block %d, which has not started", e.Index)
	}
	switch e.Delta.Type {
	case "text_delta":
		b.text.WriteString(e.Delta.Text)
	case "input_json_delta":
		b.json.WriteString(e.Delta.PartialJSON)
	case "thinking_delta":
		b.thinking.WriteString(e.Delta.Thinking)
	case "signature_delta":
		b.signature.WriteString(e.Delta.Signature)
	}
	return nil
}

func (s *anthropicStream) Done() bool   { return s.done }
func (s *anthropicStream) Failed() bool { return s.failed }

func (s *anthropicStream) Result() (schemas.Message, *wire.Usage, error) {
	if s.failed {
		return schemas.Message{}, nil, errors.New("the upstream's stream ended with an error")
	}
	if !s.done {
		return schemas.Message{}, nil, errors.New("the stream did not reach message_stop")
	}
	blocks := make([]json.RawMessage, 0, len(s.order))
	for _, i := range s.order {
		raw, err := s.blocks[i].whole()
		if err != nil {
			return schemas.Message{}, nil, fmt.Errorf("block %d: %w", i, err)
		}
		blocks = append(blocks, raw)
	}
	m, err := anthropicAssistant(blocks)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the streamed reply: %w", err)
	}
	var u *wire.Usage
	if s.hasUsage {
		u = &s.usage
	}
	return m, u, nil
}

// whole returns the block its start and deltas make.
func (b *streamBlock) whole() (json.RawMessage, error) {
	f := b.start
	str := func(k string) string { s, _ := f[k].(string); return s }
	switch str("type") {
	case "text":
		f["text"] = str("text") + b.text.String()
	case "thinking":
		f["thinking"] = str("thinking") + b.thinking.String()
		f["signature"] = str("signature") + b.signature.String()
	}
	if b.json.Len() > 0 { // tool_use, server_tool_use, mcp_tool_use
		in := json.RawMessage(b.json.String())
		if !json.Valid(in) {
			return nil, errors.New("the input streamed is not JSON")
		}
		f["input"] = in
	}
	return wire.MarshalNoEscape(f)
}

// ErrorBody is Anthropic's error shape: {"type": "error", "error": {"type", "message"}}.
func (anthropicWire) ErrorBody(_ int, kind, message string) []byte {
	b, _ := wire.MarshalNoEscape(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": message}})
	return b
}
