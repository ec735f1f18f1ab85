package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor/compactor/internal/proxy/wire"
	"maps"
	"strings"

	"github.com/compactor/compactor/schemas"
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
	// ExtraBlockOrder is the order of an assistant turn's blocks when it is not the
	// one Build writes by default (thinking blocks, then the content, then the
	// tool_use blocks): one letter a block, k for the next block of
	// ExtraContentPrefix, p for the next content part, t for the next tool call. An
	// interleaved turn (thinking between tool uses, thinking or text after a server
	// tool's result) goes back in the order it came.
	ExtraBlockOrder = "anthropic_block_order"
	// ExtraInMessages marks a system message read from a {"role": "system"} turn of
	// messages (a mid-conversation system message), not from the top-level system
	// field: Build writes it back in place, as a system turn.
	ExtraInMessages = "anthropic_in_messages"
	// ExtraTurnFields holds the fields of a turn besides role and content (Claude
	// Code's per-turn output_config on a system turn...), compact with sorted keys, on
	// the turn's last message: Build writes them back into the turn.
	ExtraTurnFields = "anthropic_turn_fields"
	// ExtraTurn holds a turn of a role the proxy does not know, whole (compact, keys
	// sorted, no cache_control): its message is a user message holding the turn's
	// text, and Build writes the turn back in place as it came.
	ExtraTurn = "anthropic_turn"
)

// Anthropic returns the wire of Anthropic Messages (POST /v1/messages).
//
// Parse reads the request into Compactor's chat messages: "system" (a string or text
// blocks) is the first message, role system; a user turn's tool_result blocks are
// tool messages, in order, before a user message holding the rest of the turn; an
// assistant turn's tool_use blocks are tool calls (arguments: the input object as
// compact JSON with sorted keys). Text blocks become text parts without their
// cache_control (clients move it from turn to turn), images image_url parts (a
// base64 source as a data: URL); other blocks (documents, search results, server tool
// and MCP blocks, text with citations, any type the proxy does not know) are kept
// whole as parts, in canonical form (compact, keys sorted, no cache_control).
// Thinking blocks, in the same form, go to Extra[ExtraContentPrefix], is_error to
// Extra[ExtraIsError], an assistant turn's block order to Extra[ExtraBlockOrder] when
// it is not thinking, content, tool uses (interleaved thinking). A {"role": "system"}
// turn of messages (a mid-conversation system message) is a system message at its
// place, marked Extra[ExtraInMessages]; a turn of a role the proxy does not know is
// kept whole (Extra[ExtraTurn]); a turn's fields besides role and content go to
// Extra[ExtraTurnFields]. Build puts all of it back in place, and the client's cache
// breakpoints (see carryBreakpoints), so that the request built from what Parse read
// is the request sent, but for its form (a string content as a text block, one
// system block when the context's system is not the client's). Every top-level field
// but system and messages (thinking, output_config, context_management,
// cache_control...) goes as sent. Parse refuses what the API refuses (not a JSON
// object, messages not a non-empty array, a tool_result without its tool_use, a
// system turn first...), nothing else. Reply and the stream read the upstream's
// content blocks the way Parse reads an assistant turn, so the reply stored and the
// same turn sent back by the client are the same message.
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
	turns, err := wire.Array(f, "messages", "messages")
	if err != nil {
		return nil, err
	}
	for i, t := range turns {
		msgs, err := anthropicTurn(t)
		if err != nil {
			return nil, wire.BadRequest("messages[%d]: %v", i, err)
		}
		if i == 0 && len(msgs) == 1 && msgs[0].Role == schemas.RoleSystem {
			// As the API: a mid-conversation system message follows a turn.
			return nil, wire.BadRequest("messages[0]: a system turn cannot be the first of messages (the system field is for that)")
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
	switch t.Role {
	case "user", "assistant", "system":
	default:
		return opaqueTurn(raw, f)
	}
	var s string
	if json.Unmarshal(t.Content, &s) == nil {
		m := schemas.Message{Role: schemas.Role(t.Role), Content: schemas.RawContent(t.Content)}
		if t.Role == "system" {
			m.Extra = systemExtra(f)
			return []schemas.Message{m}, nil
		}
		return withTurnFields([]schemas.Message{m}, f)
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(t.Content, &blocks); err != nil {
		return nil, errors.New("content must be a string or an array of content blocks")
	}
	switch t.Role {
	case "user":
		msgs, err := anthropicUser(blocks)
		if err != nil {
			return nil, err
		}
		return withTurnFields(msgs, f)
	case "assistant":
		m, err := anthropicAssistant(blocks)
		if err != nil {
			return nil, err
		}
		return withTurnFields([]schemas.Message{m}, f)
	}
	msgs, err := systemTurn(blocks)
	if err != nil {
		return nil, err
	}
	msgs[0].Extra = systemExtra(f)
	return msgs, nil
}

// turnFields is the fields of a turn besides role and content, compact with sorted
// keys (nil when none).
func turnFields(f map[string]json.RawMessage) json.RawMessage {
	rest := map[string]json.RawMessage{}
	for k, v := range f {
		if k != "role" && k != "content" {
			rest[k] = v
		}
	}
	if len(rest) == 0 {
		return nil
	}
	enc, err := wire.MarshalNoEscape(rest)
	if err != nil {
		return nil
	}
	return wire.CanonicalJSON(enc)
}

// withTurnFields puts the fields of a user or assistant turn besides role and content
// (per-turn settings) in the Extra of the turn's last message (ExtraTurnFields):
// Build writes them back into the turn that message is rendered in.
func withTurnFields(msgs []schemas.Message, f map[string]json.RawMessage) ([]schemas.Message, error) {
	rest := turnFields(f)
	if rest == nil {
		return msgs, nil
	}
	last := &msgs[len(msgs)-1]
	x := map[string]json.RawMessage{}
	if len(last.Extra) > 0 {
		if err := json.Unmarshal(last.Extra, &x); err != nil {
			return nil, err
		}
	}
	x[ExtraTurnFields] = rest
	enc, err := wire.MarshalNoEscape(x)
	if err != nil {
		return nil, err
	}
	last.Extra = enc
	return msgs, nil
}

// systemExtra is the Extra of a mid-conversation system message read from the turn
// whose fields are f: ExtraInMessages, and ExtraTurnFields when the turn has fields
// besides role and content.
func systemExtra(f map[string]json.RawMessage) json.RawMessage {
	rest := turnFields(f)
	if rest == nil {
		return json.RawMessage(`{"` + ExtraInMessages + `":true}`)
	}
	return json.RawMessage(`{"` + ExtraInMessages + `":true,"` + ExtraTurnFields + `":` + string(rest) + `}`)
}

// systemTurn reads the blocks of a mid-conversation system turn ({"role": "system"}
// in messages) as a system message marked ExtraInMessages: its blocks are parts the
// way a user turn's are (text, images, any other block kept whole).
func systemTurn(blocks []json.RawMessage) ([]schemas.Message, error) {
	parts := make([]json.RawMessage, 0, len(blocks))
	for i, raw := range blocks {
		b, err := readBlock(raw, i)
		if err != nil {
			return nil, err
		}
		p, err := contentPart(b, raw, i)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return []schemas.Message{{Role: schemas.RoleSystem, Content: partsContent(parts)}}, nil
}

// opaqueTurn keeps a turn of a role the proxy does not know whole, in the Extra of a
// user message that holds its text (for the summarizer): the API decides whether it
// takes the role, the proxy neither refuses it nor changes it. Its blocks' breakpoints
// are left out (Build sets the breakpoints, within the API's four).
func opaqueTurn(raw json.RawMessage, f map[string]json.RawMessage) ([]schemas.Message, error) {
	if _, ok := f["role"]; !ok {
		return nil, errors.New("must be an object {role, content}")
	}
	var parts []json.RawMessage
	var s string
	var blocks []json.RawMessage
	switch {
	case json.Unmarshal(f["content"], &s) == nil:
		if s != "" {
			parts = append(parts, textPart(s))
		}
	case json.Unmarshal(f["content"], &blocks) == nil:
		stripped := make([]json.RawMessage, 0, len(blocks))
		for i, b := range blocks {
			if blk, err := readBlock(b, i); err == nil && blk.Type == "text" && blk.Text != nil && *blk.Text != "" {
				parts = append(parts, textPart(*blk.Text))
			}
			stripped = append(stripped, canonicalBlock(b))
		}
		if len(blocks) > 0 {
			content, err := wire.MarshalNoEscape(stripped)
			if err != nil {
				return nil, err
			}
			f = maps.Clone(f)
			f["content"] = content
		}
	}
	turn, err := wire.MarshalNoEscape(f)
	if err != nil {
		return nil, err
	}
	turn = wire.CanonicalJSON(turn)
	return []schemas.Message{{Role: schemas.RoleUser, Content: partsContent(parts),
		Extra: json.RawMessage(`{"` + ExtraTurn + `":` + string(turn) + `}`)}}, nil
}

// block is the fields of a content block the proxy reads.
type block struct {
	Type, ID, Name, ToolUseID string
	Text                      *string
	Source, Input, Content    json.RawMessage
	IsError                   bool
	// more says the block has fields besides type, text and cache_control (a text
	// block's citations...): a text block with more is kept whole.
	more bool
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
	for k, v := range f {
		switch k {
		case "type", "text", "cache_control":
		case "citations": // none: null or []
			b.more = b.more || !(wire.IsNull(v) || string(wire.CanonicalJSON(v)) == "[]")
		default:
			b.more = true
		}
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
		if b.more { // citations...: the block goes back whole
			return canonicalBlock(raw), nil
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
// content, tool_use blocks as its tool calls, thinking blocks into its Extra, and the
// blocks' order into its Extra when Build would not write them in that order
// (ExtraBlockOrder). Server tool blocks (server_tool_use and its *_tool_result,
// mcp_tool_use, mcp_tool_result...) are parts kept whole, in place: they pair among
// themselves, within the turn, not with a tool_result.
func anthropicAssistant(blocks []json.RawMessage) (schemas.Message, error) {
	m := schemas.Message{Role: schemas.RoleAssistant}
	var parts, thinking []json.RawMessage
	order := make([]byte, 0, len(blocks))
	for i, raw := range blocks {
		b, err := readBlock(raw, i)
		if err != nil {
			return schemas.Message{}, err
		}
		switch b.Type {
		case "thinking", "redacted_thinking":
			thinking = append(thinking, json.RawMessage(canonicalArgs(raw)))
			order = append(order, 'k')
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return schemas.Message{}, fmt.Errorf("content[%d]: a tool_use needs an id and a name", i)
			}
			m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: b.ID, Type: "function",
				Function: schemas.FunctionCall{Name: b.Name, Arguments: canonicalArgs(b.Input)}})
			order = append(order, 't')
		default:
			p, err := contentPart(b, raw, i)
			if err != nil {
				return schemas.Message{}, err
			}
			parts = append(parts, p)
			order = append(order, 'p')
		}
	}
	if len(parts) > 0 || len(m.ToolCalls) == 0 {
		m.Content = partsContent(parts)
	}
	inOrder := defaultOrder(order)
	if len(thinking) > 0 || !inOrder {
		var e bytes.Buffer
		e.WriteByte('{')
		if len(thinking) > 0 {
			e.WriteString(`"` + ExtraContentPrefix + `":[`)
			for i, t := range thinking {
				if i > 0 {
					e.WriteByte(',')
				}
				e.Write(t)
			}
			e.WriteString("]")
		}
		if !inOrder {
			if len(thinking) > 0 {
				e.WriteByte(',')
			}
			e.WriteString(`"` + ExtraBlockOrder + `":"` + string(order) + `"`)
		}
		e.WriteByte('}')
		m.Extra = e.Bytes()
	}
	return m, nil
}

// defaultOrder says an assistant turn's blocks are in the order Build writes them by
// default: thinking blocks, then content parts, then tool_use blocks.
func defaultOrder(order []byte) bool {
	rank := map[byte]int{'k': 0, 'p': 1, 't': 2}
	for i := 1; i < len(order); i++ {
		if rank[order[i]] < rank[order[i-1]] {
			return false
		}
	}
	return true
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
	citations                       []any
	// compaction and encrypted are a compaction block's (compaction_delta).
	compaction, encrypted strings.Builder
	compacted             bool
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
		Type        string          `json:"type"`
		Text        string          `json:"text"`
		PartialJSON string          `json:"partial_json"`
		Thinking    string          `json:"thinking"`
		Signature   string          `json:"signature"`
		Citation    json.RawMessage `json:"citation"`
		Content     string          `json:"content"`
		Encrypted   string          `json:"encrypted_content"`
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
	case "citations_delta":
		if len(e.Delta.Citation) == 0 || !json.Valid(e.Delta.Citation) {
			return fmt.Errorf("a citations_delta for block %d without its citation", e.Index)
		}
		b.citations = append(b.citations, e.Delta.Citation)
	case "compaction_delta":
		b.compaction.WriteString(e.Delta.Content)
		b.encrypted.WriteString(e.Delta.Encrypted)
		b.compacted = true
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
		if len(b.citations) > 0 {
			had, _ := f["citations"].([]any)
			f["citations"] = append(had, b.citations...)
		}
	case "thinking":
		f["thinking"] = str("thinking") + b.thinking.String()
		f["signature"] = str("signature") + b.signature.String()
	case "compaction":
		if b.compacted {
			f["content"] = str("content") + b.compaction.String()
			f["encrypted_content"] = str("encrypted_content") + b.encrypted.String()
		}
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
