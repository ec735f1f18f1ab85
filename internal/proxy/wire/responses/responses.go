// Package responses is the wire of the OpenAI Responses API (POST /v1/responses), the
// API Codex speaks.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// The keys of a message's Extra that keep what Compactor's form has no field for, so
// that Build gives it back to the API.
const (
	// ExtraItems holds the layout of the input items a message was read from, when it
	// is not the plain one (see layout): each item's fields other than those the
	// message carries (id, status, a developer role, namespace...), and reasoning and
	// every other item kept whole, in canonical form (compact, keys sorted), in place.
	ExtraItems = "responses_items"
	// ExtraInstructions marks the system message read from the instructions field.
	ExtraInstructions = "responses_instructions"
)

// Responses returns the wire of the OpenAI Responses API (POST /v1/responses).
//
// Parse reads a stateless request into Compactor's chat messages: "instructions" is
// the first message, role system (marked in Extra[ExtraInstructions]); "input" (a
// string: one user message; or an array of items) in order: user, system and
// developer messages are messages of their role (developer read as system); the tool
// outputs (function_call_output, custom_tool_call_output, local_shell_call_output)
// tool messages; and each run of the model's own items (assistant messages, function,
// custom and local shell calls, reasoning, and any item of a type this wire does not
// know) one assistant message: its text and its tool calls, and in Extra[ExtraItems]
// the run's layout, which keeps reasoning and unknown items whole (canonical form) and
// in place, and each item's own fields (id, status, phase...). input_text and
// output_text parts become text parts, images image_url parts; every other part is
// kept whole. A request that continues a previous_response_id or a stored
// conversation is handed back as a wire.Passthrough; one whose tool calls and outputs
// do not pair up is refused, as the Chat Completions wire refuses it.
//
// Build renders the context as input items and, when the context keeps the
// instructions' message, as "instructions"; every other field is left as sent. A
// message the client sent in this very request goes back as the client's own items,
// byte for byte (the whole input field as sent when the context is the request's
// messages); any other (the summary, stored messages) is rendered from the message and
// its layout. Reply and the stream read the response's output items the way Parse
// reads them when the client sends them back (Codex sends them back as they came, ids,
// status and annotations included), so the reply stored and the same turn sent back
// are the same message.
func Responses() wire.Wire { return responsesWire{} }

type responsesWire struct{}

func (responsesWire) Name() string { return "responses" }

// state is what Parse hands Build: the client's items, message by message.
type state struct {
	// items holds, for each message of the request, the raw input items it was read
	// from (nil for the instructions' message and for a string input's message).
	items [][]json.RawMessage
	// keys holds each message's identity (see key).
	keys []string
	// instructions says the first message is the instructions'.
	instructions bool
}

func (responsesWire) Parse(body []byte) (*wire.Request, error) {
	if off := wire.InvalidUTF8(body); off >= 0 {
		return nil, wire.BadRequest("the body is not valid UTF-8 (first bad byte at offset %d)", off)
	}
	f, err := wire.RequestFields(body)
	if err != nil {
		return nil, err
	}
	// The provider keeps the conversation: it is forwarded as sent.
	for _, p := range []struct{ field, reason string }{
		{"previous_response_id", "previous-response-id"},
		{"conversation", "conversation"}, // the Conversations API's
	} {
		if v, ok := f[p.field]; ok && !wire.IsNull(v) {
			return nil, &wire.Passthrough{Reason: p.reason}
		}
	}
	req := &wire.Request{Body: body}
	if err := wire.CommonFields(f, req, "max_output_tokens"); err != nil {
		return nil, err
	}
	st := &state{}
	if v, ok := f["instructions"]; ok && !wire.IsNull(v) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, wire.BadRequest("instructions must be a string")
		}
		if s != "" {
			req.Messages = append(req.Messages, schemas.Message{Role: schemas.RoleSystem, Content: schemas.RawContent(v),
				Extra: json.RawMessage(`{"` + ExtraInstructions + `":true}`)})
			st.items = append(st.items, nil)
			st.instructions = true
		}
	}
	raw, ok := f["input"]
	if !ok || wire.IsNull(raw) {
		return nil, wire.BadRequest("input is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		req.Messages = append(req.Messages, schemas.Message{Role: schemas.RoleUser, Content: schemas.RawContent(raw)})
		st.items = append(st.items, nil)
	} else {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, wire.BadRequest("input must be a string or an array of input items")
		}
		if len(items) == 0 {
			return nil, wire.BadRequest("input must not be empty")
		}
		var r reader
		for i, it := range items {
			if err := r.item(it); err != nil {
				return nil, wire.BadRequest("input[%d]: %v", i, err)
			}
		}
		r.close()
		req.Messages = append(req.Messages, r.msgs...)
		st.items = append(st.items, r.raws...)
	}
	for i := range req.Messages {
		if err := req.Messages[i].Validate(); err != nil {
			return nil, wire.BadRequest("%v", err)
		}
	}
	if err := wire.CheckPairs(req.Messages); err != nil {
		return nil, err
	}
	st.keys = make([]string, len(req.Messages))
	for i := range req.Messages {
		st.keys[i] = key(&req.Messages[i])
	}
	req.State = st
	return req, nil
}

// key is a message's identity when Build looks for it among the client's: the
// message without Compactor's metadata, its storage (a content_ref, unknown fields)
// and Extra (the client's items are then what it sent this time).
func key(m *schemas.Message) string {
	c := m.StripMetadata()
	c.Extra, c.ContentRef, c.Unknown = nil, nil, nil
	b, _ := c.Encode()
	return string(b)
}

// obj is a JSON object decoded with numbers as written.
type obj map[string]any

func decodeObj(raw []byte) (obj, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var o obj
	if err := d.Decode(&o); err != nil || o == nil {
		return nil, errors.New("must be a JSON object")
	}
	return o, nil
}

func (o obj) str(k string) (string, bool) {
	s, ok := o[k].(string)
	return s, ok
}

// without returns o without the keys ks (a copy).
func (o obj) without(ks ...string) obj {
	out := make(obj, len(o))
	for k, v := range o {
		out[k] = v
	}
	for _, k := range ks {
		delete(out, k)
	}
	return out
}

// canon is v in canonical form: compact, keys sorted, numbers as written.
func canon(v any) json.RawMessage {
	b, err := wire.MarshalNoEscape(v)
	if err != nil {
		panic(err) // decoded JSON always encodes
	}
	return b
}

// The item types the wire reads into messages.
const (
	typeMessage         = "message"
	typeFunctionCall    = "function_call"
	typeCustomCall      = "custom_tool_call"
	typeLocalShellCall  = "local_shell_call"
	typeFunctionOutput  = "function_call_output"
	typeCustomOutput    = "custom_tool_call_output"
	typeLocalShellOuput = "local_shell_call_output"
	localShellName      = "local_shell"
)

// entry is one item of an assistant message's layout: exactly one field set.
type entry struct {
	// Keep is an item kept whole (reasoning, an unknown type).
	Keep json.RawMessage `json:"keep,omitempty"`
	// Message is an assistant message item without its content.
	Message json.RawMessage `json:"message,omitempty"`
	// Parts, String: when the run has several message items, the number of the
	// message's content parts this one holds, and whether its content was a string.
	Parts  *int `json:"parts,omitempty"`
	String bool `json:"string,omitempty"`
	// Call is a call item without its call_id, name and arguments (input, action):
	// the next of the message's tool calls.
	Call json.RawMessage `json:"call,omitempty"`
	// Output is a tool output item without its call_id and output.
	Output json.RawMessage `json:"output,omitempty"`
	// Texts, for a message or output whose parts have text parts with fields of
	// their own (output_text's annotations and logprobs), holds those fields, part by
	// part (null for the others).
	Texts []json.RawMessage `json:"texts,omitempty"`
}

// reader reads input items into messages.
type reader struct {
	msgs []schemas.Message
	raws [][]json.RawMessage
	run  *run
}

// run is the model's items being read into one assistant message.
type run struct {
	entries  []entry
	contents []json.RawMessage // each message item's content
	calls    []schemas.ToolCall
	raws     []json.RawMessage
}

func (r *reader) item(raw json.RawMessage) error {
	o, err := decodeObj(raw)
	if err != nil {
		return err
	}
	typ, hasType := o.str("type")
	if _, ok := o["type"]; ok && !hasType {
		return errors.New("type must be a string")
	}
	if !hasType {
		_, role := o["role"]
		_, id := o["id"]
		switch {
		case role:
			typ = typeMessage // the API's EasyInputMessage
		case id:
			typ = "item_reference" // the API's ItemReference, whose type is optional
		default:
			return errors.New("an item needs a type")
		}
	}
	switch typ {
	case typeMessage:
		role, _ := o.str("role")
		content, texts, err := messageContent(o, role)
		if err != nil {
			return err
		}
		if role == "assistant" {
			rn := r.open()
			rn.entries = append(rn.entries, entry{Message: canon(o.without("content", "role")), Texts: texts})
			rn.contents = append(rn.contents, content)
			rn.raws = append(rn.raws, raw)
			return nil
		}
		m := schemas.Message{Content: schemas.RawContent(content)}
		rest := o.without("content", "role")
		switch role {
		case "user", "system":
			m.Role = schemas.Role(role)
		case "developer":
			m.Role = schemas.RoleSystem
			rest["role"] = role
		default:
			return fmt.Errorf("role must be user, assistant, system or developer, not %q", role)
		}
		r.single(m, rest, texts, raw)
	case typeFunctionCall, typeCustomCall, typeLocalShellCall:
		tc, rest, err := readCall(o, typ)
		if err != nil {
			return err
		}
		rn := r.open()
		rn.entries = append(rn.entries, entry{Call: canon(rest)})
		rn.calls = append(rn.calls, tc)
		rn.raws = append(rn.raws, raw)
	case typeFunctionOutput, typeCustomOutput, typeLocalShellOuput:
		m, rest, texts, err := readOutput(o, typ)
		if err != nil {
			return err
		}
		r.single(m, rest, texts, raw)
	default:
		if clientOutput(typ) {
			// The client's answer to one of the model's items: a message of its own,
			// so that the model's items before and after it are the runs the
			// responses gave.
			r.close()
		}
		rn := r.open()
		rn.entries = append(rn.entries, entry{Keep: canon(o)})
		rn.raws = append(rn.raws, raw)
		if clientOutput(typ) {
			r.close()
		}
	}
	return nil
}

// clientOutput says an item of a type this wire does not read is the client's answer
// to one of the model's items (computer_call_output, shell_call_output,
// apply_patch_call_output, mcp_approval_response...), not the model's own.
func clientOutput(typ string) bool {
	return strings.HasSuffix(typ, "_output") || typ == "mcp_approval_response"
}

// single adds a message read from one item: rest is the item without what the message
// carries, kept in Extra unless it is the plain one ({"type": "message"} for a
// message, {"type": "function_call_output"} for a tool's).
func (r *reader) single(m schemas.Message, rest obj, texts []json.RawMessage, raw json.RawMessage) {
	r.close()
	plain := typeMessage
	if m.Role == schemas.RoleTool {
		plain = typeFunctionOutput
	}
	if t, _ := rest.str("type"); len(rest) != 1 || t != plain || texts != nil {
		m.Extra = extraOf([]entry{{Output: canon(rest), Texts: texts}})
		if m.Role != schemas.RoleTool {
			m.Extra = extraOf([]entry{{Message: canon(rest), Texts: texts}})
		}
	}
	r.msgs = append(r.msgs, m)
	r.raws = append(r.raws, []json.RawMessage{raw})
}

func extraOf(es []entry) json.RawMessage {
	l, _ := wire.MarshalNoEscape(es)
	return json.RawMessage(`{"` + ExtraItems + `":` + string(l) + `}`)
}

// open returns the run being read, starting one.
func (r *reader) open() *run {
	if r.run == nil {
		r.run = &run{}
	}
	return r.run
}

// close ends the run being read: its assistant message.
func (r *reader) close() {
	rn := r.run
	if rn == nil {
		return
	}
	r.run = nil
	m := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: rn.calls}
	switch len(rn.contents) {
	case 0:
		if len(rn.calls) == 0 {
			m.Content = schemas.Text("")
		}
	case 1:
		m.Content = schemas.RawContent(rn.contents[0])
	default:
		var parts []json.RawMessage
		n := 0
		for i := range rn.entries {
			if rn.entries[i].Message == nil {
				continue
			}
			c := rn.contents[n]
			n++
			var ps []json.RawMessage
			if err := json.Unmarshal(c, &ps); err != nil {
				var s string
				_ = json.Unmarshal(c, &s)
				ps = []json.RawMessage{textPart(s)}
				rn.entries[i].String = true
			}
			k := len(ps)
			rn.entries[i].Parts = &k
			parts = append(parts, ps...)
		}
		m.Content = partsContent(parts)
	}
	if !plainLayout(rn.entries, m.Content) {
		m.Extra = extraOf(rn.entries)
	}
	r.msgs = append(r.msgs, m)
	r.raws = append(r.raws, rn.raws)
}

// plainLayout says a run's layout is the one Build renders for a message without it:
// a message item (unless the content is null, or empty beside tool calls), then a
// function_call per tool call, none with fields of its own.
func plainLayout(es []entry, c schemas.Content) bool {
	i := 0
	if emptyBesideCalls(c, len(es) > 0 && es[len(es)-1].Call != nil) {
		if len(es) > 0 && es[0].Message != nil {
			return false
		}
	} else {
		if len(es) == 0 || string(es[0].Message) != `{"type":"message"}` || es[0].Texts != nil {
			return false
		}
		i = 1
	}
	for _, e := range es[i:] {
		if string(e.Call) != `{"type":"function_call"}` {
			return false
		}
	}
	return true
}

// emptyBesideCalls says an assistant message with this content and tool calls (when
// calls) renders no message item: null content, or "" beside tool calls.
func emptyBesideCalls(c schemas.Content, calls bool) bool {
	return c.IsNull() || (calls && c.IsString() && c.String() == "")
}

// messageContent reads a message item's content: a string as sent, or its parts in
// Compactor's form.
func messageContent(o obj, role string) (json.RawMessage, []json.RawMessage, error) {
	v, ok := o["content"]
	if !ok || v == nil {
		return nil, nil, errors.New("a message needs a content")
	}
	if s, ok := v.(string); ok {
		return canon(s), nil, nil
	}
	ps, ok := v.([]any)
	if !ok {
		return nil, nil, errors.New("content must be a string or an array of content parts")
	}
	parts, texts, err := readParts(ps, textType(role))
	if err != nil {
		return nil, nil, err
	}
	return partsContent(parts).Raw(), texts, nil
}

// textType is the type of the text parts of a message of role: output_text for the
// assistant's, input_text for the others.
func textType(role string) string {
	if role == "assistant" {
		return "output_text"
	}
	return "input_text"
}

// readParts reads content parts: a part of the text type ("input_text", or
// "output_text" in an assistant message) is a text part, its other fields
// (annotations, logprobs) in texts (nil when no part has any); an input_image with
// only its image_url (and detail) an image_url part; every other is kept whole.
func readParts(ps []any, text string) (out, texts []json.RawMessage, err error) {
	out = make([]json.RawMessage, 0, len(ps))
	for i, p := range ps {
		o, ok := p.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("content[%d] must be an object", i)
		}
		typ, _ := obj(o).str("type")
		switch typ {
		case "":
			return nil, nil, fmt.Errorf("content[%d] needs a type", i)
		case "text", "image_url", "file":
			return nil, nil, fmt.Errorf("content[%d]: %q is a Chat Completions part, not a Responses one", i, typ)
		case text:
			if s, ok := obj(o).str("text"); ok {
				out = append(out, textPart(s))
				if len(o) > 2 {
					if texts == nil {
						texts = make([]json.RawMessage, len(ps))
						for j := range texts {
							texts[j] = json.RawMessage("null")
						}
					}
					texts[i] = canon(obj(o).without("type", "text"))
				}
				continue
			}
		case "input_image":
			url, ok := obj(o).str("image_url")
			d, hasD := o["detail"]
			ds, dOK := d.(string)
			if ok && url != "" && len(o) == 2+btoi(hasD) && (!hasD || dOK) {
				img := obj{"url": url}
				if hasD {
					img["detail"] = ds
				}
				out = append(out, canon(obj{"type": "image_url", "image_url": img}))
				continue
			}
		}
		out = append(out, canon(o))
	}
	return out, texts, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// textPart is the text part {"type":"text","text":s}.
func textPart(s string) json.RawMessage {
	return canon(obj{"type": "text", "text": s})
}

// partsContent is an array content of parts ([] when none).
func partsContent(parts []json.RawMessage) schemas.Content {
	if len(parts) == 0 {
		return schemas.RawContent(json.RawMessage("[]"))
	}
	return schemas.Parts(parts...)
}

// readCall reads a function, custom or local shell call: its tool call and the rest
// of the item.
func readCall(o obj, typ string) (schemas.ToolCall, obj, error) {
	id, _ := o.str("call_id")
	if id == "" {
		return schemas.ToolCall{}, nil, fmt.Errorf("a %s needs a call_id", typ)
	}
	tc := schemas.ToolCall{ID: id, Type: "function"}
	var ok bool
	switch typ {
	case typeFunctionCall:
		tc.Function.Name, _ = o.str("name")
		if tc.Function.Arguments, ok = o.str("arguments"); !ok {
			return schemas.ToolCall{}, nil, errors.New("a function_call needs its arguments (a string)")
		}
		return tc, o.without("call_id", "name", "arguments"), checkName(tc)
	case typeCustomCall:
		tc.Function.Name, _ = o.str("name")
		if tc.Function.Arguments, ok = o.str("input"); !ok {
			return schemas.ToolCall{}, nil, errors.New("a custom_tool_call needs its input (a string)")
		}
		return tc, o.without("call_id", "name", "input"), checkName(tc)
	default: // local_shell_call
		a, ok := o["action"].(map[string]any)
		if !ok {
			return schemas.ToolCall{}, nil, errors.New("a local_shell_call needs its action (an object)")
		}
		tc.Function.Name = localShellName
		tc.Function.Arguments = string(canon(a))
		return tc, o.without("call_id", "action"), nil
	}
}

func checkName(tc schemas.ToolCall) error {
	if tc.Function.Name == "" {
		return errors.New("a call needs a name")
	}
	return nil
}

// readOutput reads a tool output item: its tool message and the rest of the item. A
// local_shell_call_output names its call by call_id or, as the API documents it, by
// id; the field stays in the rest.
func readOutput(o obj, typ string) (m schemas.Message, rest obj, texts []json.RawMessage, err error) {
	m.Role = schemas.RoleTool
	rest = o.without("call_id", "output")
	if typ == typeLocalShellOuput {
		rest = o.without("output")
		m.ToolCallID, _ = o.str("call_id")
		if _, has := o["call_id"]; !has {
			m.ToolCallID, _ = o.str("id")
		}
	} else {
		m.ToolCallID, _ = o.str("call_id")
	}
	if m.ToolCallID == "" {
		return m, nil, nil, fmt.Errorf("a %s needs the id of its call", typ)
	}
	switch v := o["output"].(type) {
	case string:
		m.Content = schemas.RawContent(canon(v))
	case []any:
		var parts []json.RawMessage
		if parts, texts, err = readParts(v, "input_text"); err != nil {
			return m, nil, nil, err
		}
		m.Content = partsContent(parts)
	default:
		if _, has := o["output"]; !has {
			return m, nil, nil, fmt.Errorf("a %s needs its output", typ)
		}
		// Another shape of output: kept as sent, read as no text.
		rest["output"] = v
		m.Content = schemas.Text("")
	}
	return m, rest, texts, nil
}

func (responsesWire) Build(req *wire.Request, cx *assemble.Context) ([]byte, error) {
	if cx == nil {
		return nil, errors.New("no context to send")
	}
	st, _ := req.State.(*state)
	f, err := wire.FieldMap(req.Body)
	if err != nil {
		return nil, err
	}
	msgs := make([]schemas.Message, len(cx.Messages))
	for i := range cx.Messages {
		msgs[i] = cx.Messages[i].StripMetadata()
	}
	// The instructions: the first system message read from them (the conversation
	// core may put pinned messages or the summary before it).
	inst := -1
	for i := range msgs {
		if msgs[i].Role == schemas.RoleSystem && isInstructions(&msgs[i]) && !(cx.HasSummary && i < len(cx.Seqs) && cx.Seqs[i] == 0) {
			inst = i
			break
		}
	}
	var edits []wire.Edit
	if inst >= 0 {
		v, err := instructionsOf(&msgs[inst])
		if err != nil {
			return nil, err
		}
		edits = append(edits, wire.Edit{Key: "instructions", Value: v})
		msgs = append(msgs[:inst:inst], msgs[inst+1:]...)
	}
	input, err := renderInput(msgs, st, f["input"])
	if err != nil {
		return nil, err
	}
	edits = append(edits, wire.Edit{Key: "input", Value: input})
	return wire.SetFields(req.Body, edits...)
}

func isInstructions(m *schemas.Message) bool {
	if len(m.Extra) == 0 {
		return false
	}
	var x map[string]json.RawMessage
	return json.Unmarshal(m.Extra, &x) == nil && string(x[ExtraInstructions]) == "true"
}

// instructionsOf is the instructions field for a system message: its text.
func instructionsOf(m *schemas.Message) (json.RawMessage, error) {
	if m.Content.IsString() {
		return m.Content.Raw(), nil
	}
	return wire.MarshalNoEscape(m.Content.String())
}

// renderInput renders msgs (the instructions' message left out) as the input array.
// The messages the client sent in this request go back as its own items: all of them
// as the input field it sent, when msgs are exactly the request's.
func renderInput(msgs []schemas.Message, st *state, sent json.RawMessage) (json.RawMessage, error) {
	var byKey map[string][]int
	if st != nil {
		var own []int // the request's messages but its instructions'
		byKey = map[string][]int{}
		for i, k := range st.keys {
			if i > 0 || !st.instructions {
				own = append(own, i)
			}
			byKey[k] = append(byKey[k], i)
		}
		if len(own) == len(msgs) && len(sent) > 0 {
			same := true
			for j, i := range own {
				if key(&msgs[j]) != st.keys[i] {
					same = false
					break
				}
			}
			if same {
				return sent, nil
			}
		}
	}
	var b bytes.Buffer
	b.WriteByte('[')
	n := 0
	add := func(item json.RawMessage) {
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(item)
		n++
	}
	next := 0 // the client's messages before next are used
	for i := range msgs {
		if st != nil {
			if own := byKey[key(&msgs[i])]; len(own) > 0 {
				k := sort.SearchInts(own, next)
				if k < len(own) && st.items[own[k]] != nil {
					for _, it := range st.items[own[k]] {
						add(it)
					}
					next = own[k] + 1
					continue
				}
			}
		}
		items, err := renderMessage(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		for _, it := range items {
			add(it)
		}
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// renderMessage renders one message as input items.
func renderMessage(m *schemas.Message) ([]json.RawMessage, error) {
	es := readLayout(m)
	switch m.Role {
	case schemas.RoleUser, schemas.RoleSystem:
		rest := obj{"type": typeMessage}
		var texts []json.RawMessage
		if len(es) == 1 && es[0].Message != nil {
			if o, err := decodeObj(es[0].Message); err == nil {
				rest, texts = o, es[0].Texts
			}
		}
		if _, ok := rest["role"]; !ok {
			rest["role"] = string(m.Role)
		}
		c, err := renderContent(m.Content, "input_text", texts)
		if err != nil {
			return nil, err
		}
		rest["content"] = c
		return []json.RawMessage{canon(rest)}, nil
	case schemas.RoleTool:
		rest := obj{"type": typeFunctionOutput}
		var texts []json.RawMessage
		if len(es) == 1 && es[0].Output != nil {
			if o, err := decodeObj(es[0].Output); err == nil {
				rest, texts = o, es[0].Texts
			}
		}
		typ, _ := rest.str("type")
		_, hasCallID := rest["call_id"]
		_, hasID := rest["id"]
		if typ != typeLocalShellOuput || (!hasCallID && !hasID) {
			rest["call_id"] = m.ToolCallID
		}
		if _, ok := rest["output"]; !ok {
			c, err := renderContent(m.Content, "input_text", texts)
			if err != nil {
				return nil, err
			}
			rest["output"] = c
		}
		return []json.RawMessage{canon(rest)}, nil
	case schemas.RoleAssistant:
		return renderAssistant(m, es)
	}
	return nil, fmt.Errorf("role %q", m.Role)
}

// readLayout reads Extra[ExtraItems] (nil when absent or not a layout).
func readLayout(m *schemas.Message) []entry {
	if len(m.Extra) == 0 {
		return nil
	}
	var x struct {
		Items []entry `json:"responses_items"`
	}
	if json.Unmarshal(m.Extra, &x) != nil {
		return nil
	}
	return x.Items
}

// renderAssistant renders an assistant message by its layout, or the plain one (see
// plainLayout) when it has none or one that does not fit it.
func renderAssistant(m *schemas.Message, es []entry) ([]json.RawMessage, error) {
	if out, ok := byLayout(m, es); ok {
		return out, nil
	}
	var out []json.RawMessage
	if !emptyBesideCalls(m.Content, len(m.ToolCalls) > 0) {
		c, err := renderContent(m.Content, "output_text", nil)
		if err != nil {
			return nil, err
		}
		out = append(out, canon(obj{"type": typeMessage, "role": "assistant", "content": c}))
	}
	for _, tc := range m.ToolCalls {
		out = append(out, canon(obj{"type": typeFunctionCall, "call_id": tc.ID, "name": tc.Function.Name, "arguments": tc.Function.Arguments}))
	}
	return out, nil
}

// byLayout renders an assistant message by its layout; ok is false when it has none
// or the layout does not fit the message (its calls or parts counted otherwise).
func byLayout(m *schemas.Message, es []entry) ([]json.RawMessage, bool) {
	if len(es) == 0 {
		return nil, false
	}
	var parts []json.RawMessage
	if m.Content.IsParts() {
		if json.Unmarshal(m.Content.Raw(), &parts) != nil {
			return nil, false
		}
	}
	messages, calls, counted, uncounted := 0, 0, 0, false
	for _, e := range es {
		switch {
		case e.Keep != nil:
		case e.Message != nil:
			messages++
			if e.Parts == nil || *e.Parts < 0 || *e.Parts > len(parts) {
				uncounted = true
			} else {
				counted += *e.Parts
			}
		case e.Call != nil:
			calls++
		default:
			return nil, false
		}
	}
	if messages > 1 && uncounted {
		return nil, false
	}
	if calls != len(m.ToolCalls) || (messages == 0 && !(m.Content.IsNull() || (m.Content.IsString() && m.Content.String() == ""))) ||
		(messages > 1 && (!m.Content.IsParts() || counted != len(parts))) || (messages == 0 && m.Content.IsNull() && calls == 0) {
		return nil, false
	}
	out := make([]json.RawMessage, 0, len(es))
	call, part := 0, 0
	for _, e := range es {
		switch {
		case e.Keep != nil:
			out = append(out, e.Keep)
		case e.Message != nil:
			rest, err := decodeObj(e.Message)
			if err != nil {
				return nil, false
			}
			c := m.Content
			if messages > 1 {
				ps := parts[part : part+*e.Parts]
				part += *e.Parts
				c = partsContent(ps)
				var t struct {
					Type string  `json:"type"`
					Text *string `json:"text"`
				}
				if e.String && len(ps) == 1 && json.Unmarshal(ps[0], &t) == nil && t.Type == "text" && t.Text != nil {
					c = schemas.Text(*t.Text)
				}
			}
			if c.IsNull() {
				return nil, false
			}
			v, err := renderContent(c, "output_text", e.Texts)
			if err != nil {
				return nil, false
			}
			rest["content"] = v
			if _, ok := rest["role"]; !ok {
				rest["role"] = "assistant"
			}
			out = append(out, canon(rest))
		case e.Call != nil:
			rest, err := decodeObj(e.Call)
			if err != nil {
				return nil, false
			}
			tc := m.ToolCalls[call]
			call++
			rest["call_id"] = tc.ID
			switch t, _ := rest.str("type"); t {
			case typeCustomCall:
				rest["name"], rest["input"] = tc.Function.Name, tc.Function.Arguments
			case typeLocalShellCall:
				if !json.Valid([]byte(tc.Function.Arguments)) {
					return nil, false
				}
				rest["action"] = json.RawMessage(tc.Function.Arguments)
			default:
				rest["name"], rest["arguments"] = tc.Function.Name, tc.Function.Arguments
			}
			out = append(out, canon(rest))
		}
	}
	return out, true
}

// renderContent renders a message's content for an item: a string as it is, parts as
// the API's (text as the given text type, image_url as input_image, a chat file part
// as input_file; a part kept whole as it is).
func renderContent(c schemas.Content, text string, texts []json.RawMessage) (json.RawMessage, error) {
	if c.IsNull() {
		return canon(""), nil
	}
	if c.IsString() {
		return c.Raw(), nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(c.Raw(), &raws); err != nil {
		return nil, err
	}
	if len(texts) != len(raws) {
		texts = nil
	}
	out := make([]json.RawMessage, 0, len(raws))
	for i, r := range raws {
		o, err := decodeObj(r)
		if err != nil {
			return nil, err
		}
		switch t, _ := o.str("type"); t {
		case "text":
			s, _ := o.str("text")
			p := obj{}
			if texts != nil {
				if x, err := decodeObj(texts[i]); err == nil {
					p = x
				}
			}
			p["type"], p["text"] = text, s
			out = append(out, canon(p))
		case "image_url":
			img := obj{"type": "input_image"}
			switch u := o["image_url"].(type) {
			case string:
				img["image_url"] = u
			case map[string]any:
				img["image_url"] = u["url"]
				if d, ok := u["detail"]; ok {
					img["detail"] = d
				}
			}
			out = append(out, canon(img))
		case "file":
			file := obj{"type": "input_file"}
			if fo, ok := o["file"].(map[string]any); ok {
				for k, v := range fo {
					file[k] = v
				}
			}
			out = append(out, canon(file))
		default:
			out = append(out, r)
		}
	}
	return wire.MarshalNoEscape(out)
}
