// Package gemini is the wire of the Gemini API (generateContent and
// streamGenerateContent), what Gemini CLI speaks.
package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// The keys of a message's Extra that keep what Compactor's form has no field for, so
// that Build gives the request back as the client sent it.
const (
	// ExtraParts is an assistant or user message's parts as the client sent them, in
	// order: each a slot standing for the next content part ("c") or tool call ("t")
	// with the fields Compactor's form has no room for (thoughtSignature, the client's
	// functionCall id...), or a part kept whole ("p": a thought part). Absent when the
	// parts are the content's, then the tool calls', with nothing more.
	ExtraParts = "gemini_parts"
	// ExtraResponse is what a tool message's functionResponse part holds beyond its
	// text: the client's id, its name when it is not its call's, the response's key
	// when not "output", and other fields.
	ExtraResponse = "gemini_response"
	// ExtraAt is the place of each part of a user message in the Content it shared
	// with function responses, when they were not all after them.
	ExtraAt = "gemini_at"
	// ExtraNewContent marks the first message of a Content that followed a Content of
	// the same role (the client did not merge them).
	ExtraNewContent = "gemini_new_content"
	// ExtraNoRole marks the first message of a Content sent without a role.
	ExtraNoRole = "gemini_no_role"
	// ExtraUpstream marks the assistant message of a reply (Reply, the stream): Build
	// gives its calls that had no id the ids of the client's responses to them.
	ExtraUpstream = "gemini_upstream"
)

// ForeignPrefix starts the type of a content part that holds a Gemini part Compactor's
// form has no part for (fileData, executableCode, a document's inlineData...): the
// part itself is its "part" field, in canonical form.
const ForeignPrefix = "gemini:"

// CallIDPrefix starts the tool-call ids Parse gives Gemini's function calls.
const CallIDPrefix = "gemini_"

// Gemini returns the wire of the Gemini API: POST
// /v1beta/models/<model>:generateContent and :streamGenerateContent?alt=sse. The model
// is in the path, not in the body.
//
// Parse reads systemInstruction (or system_instruction) as the first message, role
// system, and each Content of contents: a model Content is one assistant message (its
// text and other parts the content, its functionCall parts the tool calls); a user
// Content is one tool message per functionResponse part, in order, then a user message
// holding its other parts. A functionResponse answers the call of the model turn
// before it whose id it gives, else the first unanswered one of its name (Gemini CLI
// before 0.42 gave responses ids of its own and left the calls without one); one that
// answers a call answered already in its Content (Gemini CLI 0.61 sends each response
// twice) is kept whole with the first. A function call's id in Compactor is made
// from the model turn alone, never from the client's id: CallIDPrefix, the call's
// place among the turn's calls and its name (gemini_0_read_file). The same turn, whether the upstream
// sent it or the client sends it back with ids of its own (Gemini CLI adds them), with
// its args or responses masked later, has the same ids. The client's ids, the thought
// parts and every thoughtSignature are kept in Extra (ExtraParts, ExtraResponse) and
// Build puts them back where they were: a request built from the messages it parses
// to is the request sent. A request that uses cachedContent is passed through (the
// cached prefix of the conversation is the provider's; the proxy does not see it). One
// that asks for structured output (generationConfig's responseJsonSchema,
// responseSchema or responseMimeType application/json) is parsed like any other: the
// proxy takes it for an agent's side request (Gemini CLI's model router and its JSON
// utility calls), sent compacted and not stored.
func Gemini() wire.Wire { return geminiWire{} }

type geminiWire struct{}

func (geminiWire) Name() string { return "gemini" }

// state is what Parse hands Build.
type state struct {
	// sysKey is the name of the system instruction field the client used ("" when
	// none); sys the message Parse read from it (nil when none).
	sysKey string
	sys    *schemas.Message
}

func (geminiWire) Parse(body []byte) (*wire.Request, error) {
	if off := wire.InvalidUTF8(body); off >= 0 {
		return nil, wire.BadRequest("the body is not valid UTF-8 (first bad byte at offset %d)", off)
	}
	f, err := wire.RequestFields(body)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"cachedContent", "cached_content"} {
		if v, ok := f[k]; ok && !wire.IsNull(v) && string(v) != `""` {
			return nil, &wire.Passthrough{Reason: "cached-content"}
		}
	}
	req := &wire.Request{Body: body}
	// A request asking for structured output (Gemini CLI's router and checks) is
	// parsed like any other: the proxy sends it compacted and does not store it.
	if _, err := generationConfig(f, req); err != nil {
		return nil, err
	}
	st := &state{}
	req.State = st
	for _, k := range []string{"systemInstruction", "system_instruction"} {
		v, ok := f[k]
		if !ok || wire.IsNull(v) {
			continue
		}
		if st.sysKey != "" {
			return nil, wire.BadRequest("systemInstruction is given twice")
		}
		st.sysKey = k
		m, err := systemMessage(v)
		if err != nil {
			return nil, err
		}
		if m != nil {
			st.sys = m
			req.Messages = append(req.Messages, *m)
		}
	}
	contents, err := wire.Array(f, "contents", "Content objects")
	if err != nil {
		return nil, err
	}
	p := parser{}
	for i, c := range contents {
		if err := p.content(c); err != nil {
			return nil, wire.BadRequest("contents[%d]: %v", i, err)
		}
	}
	req.Messages = append(req.Messages, p.msgs...)
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

// generationConfig reads generationConfig.maxOutputTokens into req.MaxOutput, and
// says whether the request asks for structured output (a response schema, or JSON).
func generationConfig(f map[string]json.RawMessage, req *wire.Request) (structured bool, err error) {
	for _, k := range []string{"generationConfig", "generation_config"} {
		v, ok := f[k]
		if !ok || wire.IsNull(v) {
			continue
		}
		var g map[string]json.RawMessage
		if err := json.Unmarshal(v, &g); err != nil {
			return false, wire.BadRequest("%s must be an object", k)
		}
		for _, s := range []string{"responseJsonSchema", "response_json_schema", "responseSchema", "response_schema"} {
			structured = structured || (len(g[s]) > 0 && !wire.IsNull(g[s]))
		}
		for _, s := range []string{"responseMimeType", "response_mime_type"} {
			mime, _ := str(g, s)
			structured = structured || strings.EqualFold(mime, "application/json")
		}
		for _, l := range []string{"maxOutputTokens", "max_output_tokens"} {
			if n, ok := g[l]; ok && !wire.IsNull(n) {
				if err := json.Unmarshal(n, &req.MaxOutput); err != nil || req.MaxOutput < 0 {
					return false, wire.BadRequest("%s.%s must be a non-negative integer", k, l)
				}
				break
			}
		}
	}
	return structured, nil
}

// systemMessage reads the system instruction: a Content whose parts are text (or a
// string). No text part is no message.
func systemMessage(raw json.RawMessage) (*schemas.Message, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return &schemas.Message{Role: schemas.RoleSystem, Content: textContent(s)}, nil
	}
	var c map[string]json.RawMessage
	if err := json.Unmarshal(raw, &c); err != nil || c == nil {
		return nil, wire.BadRequest("systemInstruction must be a Content object")
	}
	var parts []json.RawMessage
	if v, ok := c["parts"]; ok && !wire.IsNull(v) {
		if err := json.Unmarshal(v, &parts); err != nil {
			return nil, wire.BadRequest("systemInstruction.parts must be an array of parts")
		}
	}
	var texts []json.RawMessage
	for i, p := range parts {
		var pf map[string]json.RawMessage
		var t string
		if json.Unmarshal(p, &pf) != nil || len(pf) != 1 || json.Unmarshal(pf["text"], &t) != nil || wire.IsNull(pf["text"]) {
			return nil, wire.BadRequest("systemInstruction.parts[%d] must be a text part", i)
		}
		texts = append(texts, textPart(t))
	}
	switch len(texts) {
	case 0:
		return nil, nil
	case 1:
		var t struct{ Text string }
		_ = json.Unmarshal(texts[0], &t)
		return &schemas.Message{Role: schemas.RoleSystem, Content: textContent(t.Text)}, nil
	}
	return &schemas.Message{Role: schemas.RoleSystem, Content: schemas.Parts(texts...)}, nil
}

// textPart is the content part {"type":"text","text":s}.
func textPart(s string) json.RawMessage {
	b, _ := wire.MarshalNoEscape(s)
	return append(append([]byte(`{"type":"text","text":`), b...), '}')
}

// slot is one part of a message as the client sent it (see ExtraParts): exactly one of
// C (the next content part, with these part fields added), T (the next tool call,
// with these part fields; F its functionCall's fields beyond name and args) or P (a
// part kept whole).
type slot struct {
	C      json.RawMessage `json:"c,omitempty"`
	T      json.RawMessage `json:"t,omitempty"`
	F      json.RawMessage `json:"f,omitempty"`
	NoArgs bool            `json:"noargs,omitempty"`
	P      json.RawMessage `json:"p,omitempty"`
}

// respExtra is ExtraResponse.
type respExtra struct {
	// ID is the functionResponse's id as sent.
	ID *string `json:"id,omitempty"`
	// Name is the functionResponse's name when it is not its call's.
	Name *string `json:"name,omitempty"`
	// Key is the response's one field when it is not "output"; JSON says the content
	// is the whole response object as JSON text; Absent that there was no response.
	Key    string `json:"key,omitempty"`
	JSON   bool   `json:"json,omitempty"`
	Absent bool   `json:"absent,omitempty"`
	// Fields are the functionResponse's other fields (willContinue, scheduling...);
	// Part the part's fields beyond functionResponse.
	Fields json.RawMessage `json:"fields,omitempty"`
	Part   json.RawMessage `json:"part,omitempty"`
	// After are the parts that followed it in its Content and answer its call again,
	// kept whole.
	After []json.RawMessage `json:"after,omitempty"`
}

// extra is a message's Extra.
type extra struct {
	Parts      []slot     `json:"gemini_parts,omitempty"`
	Response   *respExtra `json:"gemini_response,omitempty"`
	At         []int      `json:"gemini_at,omitempty"`
	NewContent bool       `json:"gemini_new_content,omitempty"`
	NoRole     bool       `json:"gemini_no_role,omitempty"`
	Upstream   bool       `json:"gemini_upstream,omitempty"`
}

func (x *extra) empty() bool {
	return x.Parts == nil && x.Response == nil && x.At == nil && !x.NewContent && !x.NoRole && !x.Upstream
}

// set writes x into m.Extra (nothing when x is empty).
func (x *extra) set(m *schemas.Message) {
	if x.empty() {
		m.Extra = nil
		return
	}
	m.Extra, _ = wire.MarshalNoEscape(x)
}

// readExtra reads m's Extra (zero when it has none of the wire's).
func readExtra(m *schemas.Message) extra {
	var x extra
	if len(m.Extra) > 0 {
		_ = json.Unmarshal(m.Extra, &x)
	}
	return x
}

// parser reads contents in order.
type parser struct {
	msgs []schemas.Message
	// open are the calls of the last model Content not answered yet, answered the
	// others.
	open, answered []openCall
	// lastRole is the role of the last Content read.
	lastRole string
}

type openCall struct {
	id, wireID, name string
	hasWireID        bool
}

// fields decodes a JSON object by its exact keys (nil for anything else).
func fields(raw json.RawMessage) map[string]json.RawMessage {
	var f map[string]json.RawMessage
	if json.Unmarshal(raw, &f) != nil {
		return nil
	}
	return f
}

// str returns f[k] when it is a string.
func str(f map[string]json.RawMessage, k string) (string, bool) {
	v, ok := f[k]
	if !ok || wire.IsNull(v) {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// canonical returns an object of the fields of f not in skip, in canonical form ("{}"
// when none).
func canonical(f map[string]json.RawMessage, skip ...string) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, k := range sortedKeys(f) {
		if contains(skip, k) {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		kb, _ := wire.MarshalNoEscape(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(wire.CanonicalJSON(f[k]))
		n++
	}
	b.WriteByte('}')
	return b.Bytes()
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func sortedKeys(f map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// content reads one Content of contents.
func (p *parser) content(raw json.RawMessage) error {
	c := fields(raw)
	if c == nil {
		return errors.New("must be a Content object {role, parts}")
	}
	role, hasRole := str(c, "role")
	if _, ok := c["role"]; ok && !hasRole && !wire.IsNull(c["role"]) {
		return errors.New("role must be a string")
	}
	if !hasRole {
		role = "user"
	}
	var parts []json.RawMessage
	if v, ok := c["parts"]; ok && !wire.IsNull(v) {
		if err := json.Unmarshal(v, &parts); err != nil {
			return errors.New("parts must be an array of parts")
		}
	}
	pfs := make([]map[string]json.RawMessage, len(parts))
	for i, pr := range parts {
		if pfs[i] = fields(pr); pfs[i] == nil {
			return fmt.Errorf("parts[%d] must be a Part object", i)
		}
	}
	start := len(p.msgs)
	switch role {
	case "model":
		m, err := p.model(pfs)
		if err != nil {
			return err
		}
		p.msgs = append(p.msgs, m)
	case "user":
		if err := p.user(pfs); err != nil {
			return err
		}
	default:
		return fmt.Errorf("role must be user or model, not %q", role)
	}
	if start < len(p.msgs) && (p.lastRole == role || !hasRole) {
		first := &p.msgs[start]
		x := readExtra(first)
		x.NewContent = p.lastRole == role
		x.NoRole = !hasRole
		x.set(first)
	}
	p.lastRole = role
	return nil
}

// model reads a model Content as an assistant message and opens its calls.
func (p *parser) model(parts []map[string]json.RawMessage) (schemas.Message, error) {
	m, calls, err := modelMessage(parts)
	if err != nil {
		return m, err
	}
	p.open, p.answered = calls, nil
	return m, nil
}

// modelMessage reads a model Content's parts (a request's, a reply's or a stream's).
func modelMessage(parts []map[string]json.RawMessage) (schemas.Message, []openCall, error) {
	m := schemas.Message{Role: schemas.RoleAssistant}
	var (
		items  []json.RawMessage
		slots  []slot
		calls  []openCall
		needed bool // the slots say more than the default order
		seenT  bool
	)
	for _, f := range parts {
		if isTrue(f["thought"]) {
			slots = append(slots, slot{P: canonical(f)})
			needed = true
			continue
		}
		if fc := fields(f["functionCall"]); fc != nil {
			if name, ok := str(fc, "name"); ok && name != "" {
				args, hasArgs := fc["args"]
				id := CallIDPrefix + strconv.Itoa(len(calls)) + "_" + cleanName(name)
				tc := schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: name, Arguments: argsText(args)}}
				m.ToolCalls = append(m.ToolCalls, tc)
				s := slot{T: canonical(f, "functionCall"), NoArgs: !hasArgs || wire.IsNull(args)}
				if ff := canonical(fc, "name", "args"); string(ff) != "{}" {
					s.F = ff
				}
				wid, hasWID := str(fc, "id")
				calls = append(calls, openCall{id: id, wireID: wid, hasWireID: hasWID, name: name})
				needed = needed || string(s.T) != "{}" || s.F != nil || s.NoArgs
				slots = append(slots, s)
				seenT = true
				continue
			}
		}
		item, c := contentPart(f)
		items = append(items, item)
		slots = append(slots, slot{C: c})
		needed = needed || string(c) != "{}" || seenT
	}
	m.Content = itemsContent(items, len(m.ToolCalls) > 0)
	if needed {
		x := extra{Parts: slots}
		x.set(&m)
	}
	return m, calls, nil
}

// cleanName is a function name as it goes into an id: characters outside
// [A-Za-z0-9_-] become '_'.
func cleanName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

func isTrue(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "true" }

// argsText is a call's args as Compactor's arguments: canonical JSON, "{}" when absent.
func argsText(args json.RawMessage) string {
	if len(args) == 0 || wire.IsNull(args) {
		return "{}"
	}
	return string(wire.CanonicalJSON(args))
}

// itemsContent is the content of a message's content parts: one text part is a
// string, none is null beside tool calls (else []), several an array.
func itemsContent(items []json.RawMessage, calls bool) schemas.Content {
	switch {
	case len(items) == 0 && calls:
		return schemas.Content{}
	case len(items) == 0:
		return schemas.RawContent(json.RawMessage("[]"))
	case len(items) == 1:
		var t struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal(items[0], &t) == nil && t.Type == "text" && t.Text != nil {
			return textContent(*t.Text)
		}
	}
	return schemas.Parts(items...)
}

// contentPart turns a Gemini part into Compactor's content part and the part's fields
// it does not hold ("{}" when none): text is a text part, an image's inlineData an
// image_url part (a data: URL), any other part is kept whole (ForeignPrefix).
func contentPart(f map[string]json.RawMessage) (json.RawMessage, json.RawMessage) {
	if t, ok := str(f, "text"); ok {
		return textPart(t), canonical(f, "text")
	}
	if b := fields(f["inlineData"]); len(b) == 2 {
		mime, ok1 := str(b, "mimeType")
		data, ok2 := str(b, "data")
		if ok1 && ok2 && strings.HasPrefix(mime, "image/") && !strings.ContainsAny(mime, ",;") && data != "" {
			url, _ := wire.MarshalNoEscape("data:" + mime + ";base64," + data)
			return append(append([]byte(`{"type":"image_url","image_url":{"url":`), url...), "}}"...), canonical(f, "inlineData")
		}
	}
	return foreignPart(f), json.RawMessage("{}")
}

// dataKeys are the fields of a Part that say what it is.
var dataKeys = []string{"text", "inlineData", "fileData", "functionCall", "functionResponse",
	"executableCode", "codeExecutionResult", "toolCall", "toolResponse"}

// foreignPart is a part kept whole: {"type": "gemini:<its kind>", "part": {...}}.
func foreignPart(f map[string]json.RawMessage) json.RawMessage {
	kind := ""
	for _, k := range dataKeys {
		if _, ok := f[k]; ok {
			kind = k
			break
		}
	}
	if kind == "" {
		if keys := sortedKeys(f); len(keys) > 0 {
			kind = keys[0]
		}
	}
	t, _ := wire.MarshalNoEscape(ForeignPrefix + kind)
	return json.RawMessage(`{"type":` + string(t) + `,"part":` + string(canonical(f)) + `}`)
}

// user reads a user Content: a tool message per functionResponse (paired with an open
// call: by id when the client's ids match, else the first open call of its name),
// then a user message with the other parts.
func (p *parser) user(parts []map[string]json.RawMessage) error {
	var (
		items, cs []json.RawMessage
		at        []int
		tools     int
		needed    bool
		last      = -1 // the index of this Content's last tool message
	)
	for i, f := range parts {
		fr := fields(f["functionResponse"])
		if fr == nil {
			item, c := contentPart(f)
			items = append(items, item)
			cs = append(cs, c)
			at = append(at, i)
			needed = needed || string(c) != "{}"
			continue
		}
		tools++
		if p.duplicate(f, fr, last) {
			continue
		}
		m, err := p.toolMessage(f, fr, i)
		if err != nil {
			return err
		}
		p.msgs = append(p.msgs, m)
		last = len(p.msgs) - 1
	}
	if len(items) == 0 && tools > 0 {
		return nil
	}
	m := schemas.Message{Role: schemas.RoleUser, Content: itemsContent(items, false)}
	var x extra
	if needed {
		x.Parts = make([]slot, len(cs))
		for i, c := range cs {
			x.Parts[i] = slot{C: c}
		}
	}
	if tools > 0 && at[0] != tools {
		x.At = at
	}
	x.set(&m)
	p.msgs = append(p.msgs, m)
	return nil
}

// duplicate takes a functionResponse that answers a call answered already (Gemini
// CLI 0.61 sends a call's response twice, the same id in both) when it follows a tool
// message of the same Content, last: the part goes, whole, after that message's own
// (ExtraResponse's after), out of Compactor's sight.
func (p *parser) duplicate(f, fr map[string]json.RawMessage, last int) bool {
	k, dup := p.pair(fr)
	if k >= 0 || !dup || last < 0 {
		return false
	}
	m := &p.msgs[last]
	x := readExtra(m)
	if x.Response == nil {
		x.Response = &respExtra{}
	}
	x.Response.After = append(x.Response.After, canonical(f))
	x.set(m)
	return true
}

// pair finds the open call a functionResponse answers (k, -1 when none): the one whose
// id it gives, else, when its id is no call's of the turn, the first of its name.
// dup says it answers a call answered already (by id; by name when it has no id).
func (p *parser) pair(fr map[string]json.RawMessage) (k int, dup bool) {
	name, _ := str(fr, "name")
	wid, hasWID := str(fr, "id")
	if hasWID {
		for j, c := range p.open {
			if c.hasWireID && c.wireID == wid {
				return j, false
			}
		}
		for _, c := range p.answered {
			if c.hasWireID && c.wireID == wid {
				return -1, true
			}
		}
	}
	for j, c := range p.open {
		if c.name == name {
			return j, false
		}
	}
	if !hasWID {
		for _, c := range p.answered {
			if c.name == name {
				return -1, true
			}
		}
	}
	return -1, false
}

// toolMessage reads a functionResponse part as the tool message of its call.
func (p *parser) toolMessage(f, fr map[string]json.RawMessage, i int) (schemas.Message, error) {
	name, _ := str(fr, "name")
	wid, hasWID := str(fr, "id")
	k, dup := p.pair(fr)
	if dup {
		return schemas.Message{}, fmt.Errorf("parts[%d]: a functionResponse (%q) to a call answered in an earlier Content", i, name)
	}
	if k < 0 {
		return schemas.Message{}, fmt.Errorf("parts[%d]: a functionResponse (%q) that answers no call of the model turn before it", i, name)
	}
	call := p.open[k]
	p.open = append(p.open[:k:k], p.open[k+1:]...)
	p.answered = append(p.answered, call)
	m := schemas.Message{Role: schemas.RoleTool, ToolCallID: call.id}
	rx := &respExtra{}
	if hasWID {
		rx.ID = &wid
	}
	if name != call.name {
		rx.Name = &name
	}
	text := ""
	resp, has := fr["response"]
	switch {
	case !has || wire.IsNull(resp):
		rx.Absent = true
	default:
		rf := fields(resp)
		var s string
		if len(rf) == 1 {
			for key, v := range rf {
				if json.Unmarshal(v, &s) == nil && !wire.IsNull(v) {
					text = s
					if key != "output" {
						rx.Key = key
					}
				} else {
					rf = nil
				}
			}
		} else {
			rf = nil
		}
		if rf == nil {
			text = string(wire.CanonicalJSON(resp))
			rx.JSON = true
		}
	}
	var nested []json.RawMessage
	if v, ok := fr["parts"]; ok && !wire.IsNull(v) {
		var raws []json.RawMessage
		if err := json.Unmarshal(v, &raws); err != nil {
			return schemas.Message{}, fmt.Errorf("parts[%d].functionResponse.parts must be an array of parts", i)
		}
		for j, r := range raws {
			nf := fields(r)
			if nf == nil {
				return schemas.Message{}, fmt.Errorf("parts[%d].functionResponse.parts[%d] must be a part", i, j)
			}
			item, c := contentPart(nf)
			if string(c) != "{}" {
				item = foreignPart(nf)
			}
			nested = append(nested, item)
		}
	}
	if nested != nil {
		m.Content = schemas.Parts(append([]json.RawMessage{textPart(text)}, nested...)...)
	} else {
		m.Content = textContent(text)
	}
	if ff := canonical(fr, "id", "name", "response", "parts"); string(ff) != "{}" {
		rx.Fields = ff
	}
	if pf := canonical(f, "functionResponse"); string(pf) != "{}" {
		rx.Part = pf
	}
	x := extra{Response: rx}
	if rx.ID == nil && rx.Name == nil && rx.Key == "" && !rx.JSON && !rx.Absent && rx.Fields == nil && rx.Part == nil {
		x.Response = nil
	}
	x.set(&m)
	return m, nil
}

// textContent is a string content, without HTML escaping.
func textContent(s string) schemas.Content {
	b, err := wire.MarshalNoEscape(s)
	if err != nil {
		return schemas.Text(s)
	}
	return schemas.RawContent(b)
}
