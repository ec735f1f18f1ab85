package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

// Build replaces contents with cx rendered as Contents, and the system instruction
// with cx's leading system messages when they are not the one Parse read from it
// (left as sent when they are; removed when cx has none). Each message renders the
// parts the client sent (see ExtraParts, ExtraResponse): consecutive messages of one
// role are one Content (tool results and the user message after them one user
// Content), but where the client sent two; the summary is user text; a system
// message after the first is user text starting with formats.SystemMarker. A call
// gets the id the client gave it, none when it gave none.
func (geminiWire) Build(req *wire.Request, cx *assemble.Context) ([]byte, error) {
	if cx == nil {
		return nil, errors.New("no context to send")
	}
	st, _ := req.State.(*state)
	if st == nil {
		st = &state{}
		if f, err := wire.FieldMap(req.Body); err == nil {
			for _, k := range []string{"systemInstruction", "system_instruction"} {
				if v, ok := f[k]; ok && !wire.IsNull(v) {
					st.sysKey = k
				}
			}
		}
	}
	msgs := cx.Messages
	summary := -1
	if cx.HasSummary {
		for i, s := range cx.Seqs {
			if s == 0 && i < len(msgs) {
				summary = i
				break
			}
		}
	}
	lead := 0
	for lead < len(msgs) && lead != summary && msgs[lead].Role == schemas.RoleSystem {
		lead++
	}
	contents, err := renderContents(msgs, lead, summary)
	if err != nil {
		return nil, err
	}
	edits := []wire.Edit{{Key: "contents", Value: contents}}
	sys, edit, err := systemEdit(req.Body, st, msgs[:lead])
	if err != nil {
		return nil, err
	}
	if edit {
		key := st.sysKey
		if key == "" {
			key = "systemInstruction"
		}
		edits = append(edits, wire.Edit{Key: key, Value: sys})
	}
	return wire.SetFields(req.Body, edits...)
}

// systemEdit returns the system instruction to send, and whether it differs from the
// client's: none when cx has no leading system message, the client's when cx's is the
// one Parse read, else the client's Content (its other fields as sent) with cx's text
// as its parts.
func systemEdit(body []byte, st *state, lead []schemas.Message) (json.RawMessage, bool, error) {
	if len(lead) == 0 {
		return nil, st.sysKey != "", nil
	}
	if len(lead) == 1 && st.sys != nil && sameMessage(lead[0], *st.sys) {
		return nil, false, nil
	}
	var parts []json.RawMessage
	for i := range lead {
		for _, t := range texts(lead[i].Content) {
			parts = append(parts, textOf(t))
		}
	}
	if parts == nil {
		parts = []json.RawMessage{}
	}
	ps, err := wire.MarshalNoEscape(parts)
	if err != nil {
		return nil, false, err
	}
	if st.sysKey != "" {
		f, err := wire.FieldMap(body)
		if err != nil {
			return nil, false, err
		}
		if orig := f[st.sysKey]; len(orig) > 0 && bytes.TrimSpace(orig)[0] == '{' {
			out, err := wire.SetFields(orig, wire.Edit{Key: "parts", Value: ps})
			return out, true, err
		}
	}
	return json.RawMessage(`{"parts":` + string(ps) + `}`), true, nil
}

func sameMessage(a, b schemas.Message) bool {
	a, b = a.StripMetadata(), b.StripMetadata()
	x, err1 := a.Encode()
	y, err2 := b.Encode()
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// texts returns the text of a content: a string, or each text part.
func texts(c schemas.Content) []string {
	if !c.IsParts() {
		if c.IsNull() {
			return nil
		}
		return []string{c.String()}
	}
	parts, err := c.Parts()
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		} else {
			out = append(out, p.Placeholder())
		}
	}
	return out
}

// textOf is the Gemini part {"text": s}.
func textOf(s string) json.RawMessage {
	b, _ := wire.MarshalNoEscape(s)
	return append(append([]byte(`{"text":`), b...), '}')
}

// geminiContent is one Content being rendered.
type geminiContent struct {
	role   string
	noRole bool
	parts  []json.RawMessage
	// tools is how many of the last parts are function responses.
	tools int
}

// renderContents renders msgs[lead:] as a contents array.
func renderContents(msgs []schemas.Message, lead, summary int) (json.RawMessage, error) {
	var (
		out   []*geminiContent
		names = map[string]string{} // the last round's call ids → names
	)
	for i := lead; i < len(msgs); i++ {
		m := &msgs[i]
		x := readExtra(m)
		role := "user"
		var (
			parts []json.RawMessage
			err   error
			tool  bool
		)
		switch {
		case i == summary:
			parts = []json.RawMessage{textOf(m.Content.String())}
			x = extra{}
		case m.Role == schemas.RoleSystem:
			parts = []json.RawMessage{textOf(formats.SystemMarker + strings.Join(texts(m.Content), "\n"))}
			x = extra{}
		case m.Role == schemas.RoleAssistant:
			role = "model"
			clear(names)
			for _, tc := range m.ToolCalls {
				names[tc.ID] = tc.Function.Name
			}
			parts, err = modelParts(m, x, adoptedIDs(msgs, i, x))
		case m.Role == schemas.RoleTool:
			parts, err = responseParts(m, x, names[m.ToolCallID])
			tool = true
		default:
			parts, err = userParts(m, x)
		}
		if err != nil {
			return nil, err
		}
		var last *geminiContent
		if n := len(out); n > 0 {
			last = out[n-1]
		}
		newContent := x.NewContent && i-1 != summary
		if last == nil || last.role != role || newContent {
			out = append(out, &geminiContent{role: role, noRole: x.NoRole && role == "user"})
			last = out[len(out)-1]
		}
		switch {
		case tool:
			last.parts = append(last.parts, parts...)
			last.tools += len(parts)
		case last.tools > 0 && interleaves(x.At, len(parts), last.tools):
			last.parts = interleave(last.parts, parts, x.At, last.tools)
			last.tools = 0
		default:
			last.parts = append(last.parts, parts...)
			last.tools = 0
		}
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, c := range out {
		if i > 0 {
			b.WriteByte(',')
		}
		if !c.noRole {
			b.WriteString(`{"role":"` + c.role + `",`)
		} else {
			b.WriteByte('{')
		}
		b.WriteString(`"parts":[`)
		for j, p := range c.parts {
			if j > 0 {
				b.WriteByte(',')
			}
			b.Write(p)
		}
		b.WriteString("]}")
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// interleaves says at places n parts among tools function responses.
func interleaves(at []int, n, tools int) bool {
	if len(at) != n || n == 0 {
		return false
	}
	for i, a := range at {
		if a < 0 || a >= n+tools || (i > 0 && a <= at[i-1]) {
			return false
		}
	}
	return true
}

// interleave puts parts at their places among the last tools parts of have.
func interleave(have, parts []json.RawMessage, at []int, tools int) []json.RawMessage {
	resp := append([]json.RawMessage(nil), have[len(have)-tools:]...)
	out := have[:len(have)-tools]
	k, r := 0, 0
	for pos := 0; pos < len(parts)+tools; pos++ {
		if k < len(at) && at[k] == pos {
			out = append(out, parts[k])
			k++
		} else {
			out = append(out, resp[r])
			r++
		}
	}
	return out
}

// object is a part or a field of one being built: its fields, written with sorted keys.
type object map[string]json.RawMessage

// merge adds the fields of a JSON object (an Extra's) that o does not have.
func (o object) merge(raw json.RawMessage) {
	for k, v := range fields(raw) {
		if _, ok := o[k]; !ok {
			o[k] = v
		}
	}
}

func (o object) bytes() json.RawMessage {
	b, _ := wire.MarshalNoEscape(map[string]json.RawMessage(o))
	return b
}

// contentItems returns a message's content parts (a string is one text part).
func contentItems(c schemas.Content) ([]schemas.ContentPart, error) {
	if !c.IsParts() {
		if c.IsNull() {
			return nil, nil
		}
		return []schemas.ContentPart{{Type: "text", Text: c.String()}}, nil
	}
	return c.Parts()
}

// itemPart renders one content part as a Gemini part, with extra fields added.
func itemPart(p schemas.ContentPart, extra json.RawMessage) json.RawMessage {
	o := object{}
	switch {
	case p.Type == "text":
		o["text"], _ = wire.MarshalNoEscape(p.Text)
	case p.Type == "image_url":
		var f struct {
			ImageURL json.RawMessage `json:"image_url"`
		}
		_ = json.Unmarshal(p.Raw, &f)
		var u struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(f.ImageURL, &u.URL) != nil {
			_ = json.Unmarshal(f.ImageURL, &u)
		}
		rest, isData := strings.CutPrefix(u.URL, "data:")
		meta, data, ok := strings.Cut(rest, ",")
		mime, b64 := strings.CutSuffix(meta, ";base64")
		if isData && ok && b64 && mime != "" {
			blob, _ := wire.MarshalNoEscape(map[string]string{"mimeType": mime, "data": data})
			o["inlineData"] = blob
		} else {
			o["text"], _ = wire.MarshalNoEscape("[image: " + u.URL + "]")
		}
	case strings.HasPrefix(p.Type, ForeignPrefix):
		var f struct {
			Part json.RawMessage `json:"part"`
		}
		if json.Unmarshal(p.Raw, &f) == nil && fields(f.Part) != nil {
			o.merge(f.Part)
		} else {
			o["text"], _ = wire.MarshalNoEscape(p.Placeholder())
		}
	default:
		o["text"], _ = wire.MarshalNoEscape(p.Placeholder())
	}
	o.merge(extra)
	return o.bytes()
}

// userParts renders a user message's parts.
func userParts(m *schemas.Message, x extra) ([]json.RawMessage, error) {
	items, err := contentItems(m.Content)
	if err != nil {
		return nil, err
	}
	withExtras := len(x.Parts) == len(items)
	out := make([]json.RawMessage, 0, len(items))
	for i, it := range items {
		var e json.RawMessage
		if withExtras {
			e = x.Parts[i].C
		}
		out = append(out, itemPart(it, e))
	}
	return out, nil
}

// modelParts renders an assistant message's parts in the order of its slots (content
// parts, then calls, when it has none or they no longer match: a truncation may have
// joined its text parts).
func modelParts(m *schemas.Message, x extra, ids map[string]string) ([]json.RawMessage, error) {
	items, err := contentItems(m.Content)
	if err != nil {
		return nil, err
	}
	nc, nt := 0, 0
	for _, s := range x.Parts {
		switch {
		case s.C != nil:
			nc++
		case s.T != nil:
			nt++
		}
	}
	cOK, tOK := nc == len(items), nt == len(m.ToolCalls)
	var out []json.RawMessage
	ci, ti := 0, 0
	for _, s := range x.Parts {
		switch {
		case s.P != nil:
			out = append(out, s.P)
		case s.C != nil && cOK:
			out = append(out, itemPart(items[ci], s.C))
			ci++
		case s.C != nil && ci == 0:
			for _, it := range items {
				out = append(out, itemPart(it, nil))
			}
			ci = len(items)
		case s.T != nil && tOK:
			p, err := callPart(m.ToolCalls[ti], s, ids)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
			ti++
		case s.T != nil && ti == 0:
			for _, tc := range m.ToolCalls {
				p, err := callPart(tc, slot{}, ids)
				if err != nil {
					return nil, err
				}
				out = append(out, p)
			}
			ti = len(m.ToolCalls)
		}
	}
	if ci == 0 && len(items) > 0 {
		head := make([]json.RawMessage, 0, len(items)+len(out))
		for _, it := range items {
			head = append(head, itemPart(it, nil))
		}
		out = append(head, out...)
	}
	if ti == 0 {
		for _, tc := range m.ToolCalls {
			p, err := callPart(tc, slot{}, ids)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	if out == nil {
		out = []json.RawMessage{}
	}
	return out, nil
}

// adoptedIDs are the ids the calls of the upstream's reply at i take from the client's
// responses to them (call id → the response's id): the upstream sent the calls without
// an id, the client gave them one (Gemini CLI keeps it on the call in its own history)
// and sent it on the responses; a call and its response then go with the same id.
// Nil for a message the client sent: its calls go as the client sent them.
func adoptedIDs(msgs []schemas.Message, i int, x extra) map[string]string {
	if !x.Upstream {
		return nil
	}
	var ids map[string]string
	for j := i + 1; j < len(msgs) && msgs[j].Role == schemas.RoleTool; j++ {
		if rx := readExtra(&msgs[j]).Response; rx != nil && rx.ID != nil {
			if ids == nil {
				ids = map[string]string{}
			}
			ids[msgs[j].ToolCallID] = *rx.ID
		}
	}
	return ids
}

// callPart renders a tool call as a functionCall part: its args, and the fields of
// its slot (the client's id, thoughtSignature...); ids gives the id of a call the
// slot gives none.
func callPart(tc schemas.ToolCall, s slot, ids map[string]string) (json.RawMessage, error) {
	fc := object{}
	fc["name"], _ = wire.MarshalNoEscape(tc.Function.Name)
	args := strings.TrimSpace(tc.Function.Arguments)
	if !(s.NoArgs && args == "{}") {
		if args == "" {
			args = "{}"
		}
		if json.Valid([]byte(args)) {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(args)); err != nil {
				return nil, err
			}
			fc["args"] = b.Bytes()
		} else {
			fc["args"], _ = wire.MarshalNoEscape(map[string]string{formats.RawArgumentsKey: tc.Function.Arguments})
		}
	}
	fc.merge(s.F)
	if id, ok := ids[tc.ID]; ok {
		if _, has := fc["id"]; !has {
			fc["id"], _ = wire.MarshalNoEscape(id)
		}
	}
	o := object{"functionCall": fc.bytes()}
	o.merge(s.T)
	return o.bytes(), nil
}

// responseParts renders a tool message as a functionResponse part, and the parts
// kept after it.
func responseParts(m *schemas.Message, x extra, callName string) ([]json.RawMessage, error) {
	rx := x.Response
	if rx == nil {
		rx = &respExtra{}
	}
	items, err := contentItems(m.Content)
	if err != nil {
		return nil, err
	}
	var (
		text   []string
		nested []json.RawMessage
	)
	for _, it := range items {
		if it.Type == "text" {
			text = append(text, it.Text)
		} else {
			nested = append(nested, itemPart(it, nil))
		}
	}
	t := strings.Join(text, "\n")
	fr := object{}
	name := callName
	if rx.Name != nil {
		name = *rx.Name
	}
	fr["name"], _ = wire.MarshalNoEscape(name)
	if rx.ID != nil {
		fr["id"], _ = wire.MarshalNoEscape(*rx.ID)
	}
	switch {
	case rx.Absent && t == "":
	case rx.JSON && fields(json.RawMessage(t)) != nil:
		fr["response"] = wire.CanonicalJSON([]byte(t))
	default:
		key := "output"
		if rx.Key != "" && !rx.JSON {
			key = rx.Key
		}
		fr["response"], _ = wire.MarshalNoEscape(map[string]string{key: t})
	}
	if nested != nil {
		fr["parts"], _ = wire.MarshalNoEscape(nested)
	}
	fr.merge(rx.Fields)
	o := object{"functionResponse": fr.bytes()}
	o.merge(rx.Part)
	out := []json.RawMessage{o.bytes()}
	for _, a := range rx.After {
		if fields(a) != nil {
			out = append(out, a)
		}
	}
	return out, nil
}
