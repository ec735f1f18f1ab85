package anthropic

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

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
	restore := marks.restore
	if marked == cx {
		restore = nil
	}
	client := clientSystem(req, cx)
	if client != nil {
		sys = client
	}
	if sys, msgs, err = carryBreakpoints(req.Body, sys, msgs, restore, hasSummary(cx), client != nil); err != nil {
		return nil, err
	}
	return wire.SetFields(req.Body, wire.Edit{Key: "system", Value: sys}, wire.Edit{Key: "messages", Value: msgs})
}

// clientSystem returns the client's system field as sent when the context's system
// (the system messages Render puts there) is the one message Parse read from it: the
// blocks go upstream as the client wrote them (Claude Code's billing header block
// apart from its prompt, its breakpoints, its bytes, so the prompt cache the client
// would hit directly is hit through the proxy too). nil otherwise: the context's
// system is rendered.
func clientSystem(req *wire.Request, cx *assemble.Context) json.RawMessage {
	if len(req.Messages) == 0 || req.Messages[0].Role != schemas.RoleSystem || readExtra(&req.Messages[0]).InMessages {
		return nil
	}
	var sys []*schemas.Message
	for i := 0; i <= systemPrefixEnd(cx) && i < len(cx.Messages); i++ {
		if cx.Messages[i].Role == schemas.RoleSystem {
			sys = append(sys, &cx.Messages[i])
		}
	}
	if len(sys) != 1 || readExtra(sys[0]).InMessages || !bytes.Equal(sys[0].Content.Raw(), req.Messages[0].Content.Raw()) {
		return nil
	}
	f, err := wire.FieldMap(req.Body)
	if err != nil {
		return nil
	}
	return f["system"]
}

func hasSummary(cx *assemble.Context) bool {
	return cx.HasSummary && slices.Contains(cx.Seqs, 0)
}

// maxBreakpoints is the most blocks with cache_control a Messages request may have.
const maxBreakpoints = 4

// The cache lifetimes a cache_control may ask for ("ttl"): 5 minutes unless it says
// "1h". The API refuses a request with a 1-hour breakpoint after a 5-minute one, in
// the order tools, system, messages.
const (
	ttl5m = 5
	ttl1h = 60
)

// breakpoint is one cache_control of the built request, in the API's order.
type breakpoint struct {
	cc json.RawMessage
	// fixed is a breakpoint Build cannot change (the client's tools', the top-level
	// cache_control of automatic caching); the others' ttl it may raise or lower.
	fixed bool
	// on says the breakpoint is written (one Build adds may not fit).
	on bool
}

func ttlOf(cc json.RawMessage) int {
	var c struct {
		TTL string `json:"ttl"`
	}
	_ = json.Unmarshal(cc, &c)
	if c.TTL == "1h" {
		return ttl1h
	}
	return ttl5m
}

// withTTL returns cc asking for ttl (cc itself when it already does).
func withTTL(cc json.RawMessage, ttl int) json.RawMessage {
	if ttlOf(cc) == ttl {
		return cc
	}
	var f map[string]json.RawMessage
	if json.Unmarshal(cc, &f) != nil || f == nil {
		return cc
	}
	if ttl == ttl1h {
		f["ttl"] = json.RawMessage(`"1h"`)
	} else {
		delete(f, "ttl")
	}
	out, err := wire.MarshalNoEscape(f)
	if err != nil {
		return cc
	}
	return out
}

// orderTTLs makes the breakpoints that are on keep the API's rule (no longer ttl after
// a shorter one): one Build may change that comes after a fixed 5-minute breakpoint
// is lowered to 5 minutes (it cannot be longer), then one shorter than a later
// breakpoint is raised to that one's ttl (keeping the longer lifetime the client asked
// for, as the API would want it written before).
func orderTTLs(bps []*breakpoint) {
	capped := false
	for _, b := range bps {
		if !b.on {
			continue
		}
		if b.fixed {
			capped = capped || ttlOf(b.cc) == ttl5m
			continue
		}
		if capped {
			b.cc = withTTL(b.cc, ttl5m)
		}
	}
	longest := ttl5m
	for i := len(bps) - 1; i >= 0; i-- {
		b := bps[i]
		if !b.on {
			continue
		}
		if !b.fixed && ttlOf(b.cc) < longest {
			b.cc = withTTL(b.cc, longest)
		}
		longest = max(longest, ttlOf(b.cc))
	}
}

// summaryCacheControl is the breakpoint formats.Render writes on the summary.
const summaryCacheControl = `,"cache_control":{"type":"ephemeral"}`

// carryBreakpoints puts the client's prompt cache breakpoints back into the rendered
// system and messages, which Parse left out (clients move them from turn to turn):
// when the client marked a system block, the last system block is marked; when it
// marked a block of its messages, the last block of the last message that can carry
// one is (Anthropic's incremental caching: the cache is read back from the longest
// prefix written before). Each gets the client's own cache_control (its last in that
// field, ttl included). With clientSys the system field is the client's, sent as it
// came: its breakpoints are the client's, and none is added. The breakpoints stay
// within the API's four: those of the client's tools and system (sent as they are)
// and the top-level cache_control of automatic caching (counted as one, not being
// sure the API does not count it) come first, then the summary's (left out when
// those take all four), then system's, then the last message's. Their ttls keep the
// API's order (orderTTLs): a summary before a 1-hour breakpoint is a 1-hour one.
//
// msgs is Render's, whose one breakpoint is the summary's (Parse left the client's
// out, the blocks kept whole are still markers): restore (nil: none) puts back what
// the markers stand for once the summary's breakpoint is set.
func carryBreakpoints(body []byte, sys, msgs json.RawMessage, restore func(json.RawMessage) (json.RawMessage, error), summary, clientSys bool) (json.RawMessage, json.RawMessage, error) {
	f, err := wire.FieldMap(body)
	if err != nil {
		return nil, nil, err
	}
	var bps []*breakpoint
	fixed := blockFields(f["tools"])
	if clientSys {
		fixed = append(fixed, blockFields(f["system"])...)
	}
	for _, t := range fixed {
		if v, ok := t["cache_control"]; ok && !wire.IsNull(v) {
			bps = append(bps, &breakpoint{cc: v, fixed: true, on: true})
		}
	}
	budget := maxBreakpoints - len(bps)
	var auto *breakpoint
	if v, ok := f["cache_control"]; ok && !wire.IsNull(v) {
		auto = &breakpoint{cc: v, fixed: true, on: true}
		budget--
	}
	sysBP := &breakpoint{}
	if !clientSys {
		sysBP.cc = lastBreakpoint(f["system"])
	}
	// The summary's breakpoint (Render writes it) goes when the client's own take
	// all four.
	sumBP := &breakpoint{cc: json.RawMessage(`{"type":"ephemeral"}`), on: summary && budget > 0}
	if sumBP.on {
		budget--
	}
	if sysBP.cc != nil && len(sys) > 0 && budget > 0 {
		sysBP.on = true
		budget--
	}
	msgBP := &breakpoint{}
	if budget > 0 {
		var turns []json.RawMessage
		if err := json.Unmarshal(f["messages"], &turns); err != nil {
			return nil, nil, err
		}
		for _, t := range turns {
			var m map[string]json.RawMessage
			_ = json.Unmarshal(t, &m)
			if c := lastBreakpoint(m["content"]); c != nil {
				msgBP.cc = c
			}
		}
		msgBP.on = msgBP.cc != nil
	}
	bps = append(bps, sysBP, sumBP, msgBP)
	if auto != nil {
		bps = append(bps, auto)
	}
	orderTTLs(bps)
	if sysBP.on {
		if sys, err = markLast(sys, sysBP.cc); err != nil {
			return nil, nil, err
		}
	}
	if summary && (!sumBP.on || ttlOf(sumBP.cc) == ttl1h) {
		if i := bytes.Index(msgs, []byte(summaryCacheControl)); i >= 0 {
			var with []byte
			if sumBP.on {
				with = slices.Concat([]byte(`,"cache_control":`), sumBP.cc)
			}
			msgs = slices.Concat(msgs[:i], with, msgs[i+len(summaryCacheControl):])
		}
	}
	if restore != nil {
		if msgs, err = restore(msgs); err != nil {
			return nil, nil, err
		}
	}
	if msgBP.on {
		msgs, err = markLastTurn(msgs, msgBP.cc)
	}
	return sys, msgs, err
}

// blockFields decodes an array of blocks (nil for anything else).
func blockFields(raw json.RawMessage) []map[string]json.RawMessage {
	var blocks []map[string]json.RawMessage
	_ = json.Unmarshal(raw, &blocks)
	return blocks
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

// markable says a block may carry a cache_control: not a thinking block, not an
// empty text block (the API caches neither directly).
func markable(blk json.RawMessage) bool {
	switch partType(blk) {
	case "thinking", "redacted_thinking":
		return false
	case "text":
		var t struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(blk, &t)
		return t.Text != ""
	}
	return true
}

// markLast returns a rendered array of blocks with cc set on its last block that
// can carry one, and whether it set it (not when that block has a breakpoint already:
// the summary's own).
func markLast(blocks json.RawMessage, cc json.RawMessage) (json.RawMessage, error) {
	out, _, err := markLastBlock(blocks, cc)
	return out, err
}

func markLastBlock(blocks json.RawMessage, cc json.RawMessage) (json.RawMessage, bool, error) {
	var bs []json.RawMessage
	if err := json.Unmarshal(blocks, &bs); err != nil {
		return nil, false, err
	}
	for i := len(bs) - 1; i >= 0; i-- {
		if !markable(bs[i]) {
			continue
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(bs[i], &f); err != nil {
			return nil, false, err
		}
		if _, ok := f["cache_control"]; ok {
			return blocks, true, nil // the summary's own
		}
		b := bytes.TrimRight(bs[i], " \t\r\n")
		marked := append(append(append([]byte(nil), b[:len(b)-1]...), `,"cache_control":`...), cc...)
		bs[i] = append(marked, '}')
		out, err := wire.MarshalNoEscape(bs)
		return out, true, err
	}
	return blocks, false, nil
}

// markLastTurn marks the last block that can carry a breakpoint of the last rendered
// turn that has one (a system turn with a string content has none: the turn before
// it is marked).
func markLastTurn(msgs json.RawMessage, cc json.RawMessage) (json.RawMessage, error) {
	var turns []json.RawMessage
	if err := json.Unmarshal(msgs, &turns); err != nil {
		return nil, err
	}
	for last := len(turns) - 1; last >= 0; last-- {
		f, err := wire.FieldMap(turns[last])
		if err != nil {
			return nil, err
		}
		var blocks []json.RawMessage
		if json.Unmarshal(f["content"], &blocks) != nil {
			continue // a string content
		}
		content, ok, err := markLastBlock(f["content"], cc)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if turns[last], err = wire.SetFields(turns[last], wire.Edit{Key: "content", Value: content}); err != nil {
			return nil, err
		}
		return wire.MarshalNoEscape(turns)
	}
	return msgs, nil
}

// marks are what Build puts back into the rendering that formats.Render leaves out:
// an assistant's thinking blocks and their order, a tool_result's is_error, the blocks
// of the API's own that Compactor's format does not know (documents, server tool
// blocks...), which Render would turn into placeholder text, and whole turns Render
// would not write (a mid-conversation system turn, a turn of a role the proxy does
// not know). Each is a text part that no client text can equal (it holds a random
// nonce) put in the message's content before rendering, and found again in the
// rendered blocks.
type marks struct {
	nonce  string
	byText map[string]mark
}

type mark struct {
	// blocks stand for the marker: an assistant's thinking blocks, or one block kept
	// verbatim; for an ordered marker, all of an assistant's blocks, nil where each
	// of its tool_use blocks goes; for a turn marker, the turn.
	blocks []json.RawMessage
	// flags is the marker first in a tool message's content: isError sets is_error,
	// wasString says the content was a string.
	flags, isError, wasString bool
	// ordered says blocks are an assistant's blocks in order; turn says blocks[0] is
	// a whole turn, written between the blocks before it and those after it.
	ordered, turn bool
	// fields are the fields of the turn the marker is rendered in besides role and
	// content (ExtraTurnFields).
	fields json.RawMessage
}

// chatPartTypes are the content part types of Compactor's (OpenAI's) format: any other
// part came from the API's own blocks and goes back verbatim.
var chatPartTypes = map[string]bool{"text": true, "image_url": true, "input_audio": true, "file": true, "refusal": true}

// markExtras returns cx with markers in the messages that need them (cx itself when
// none does).
func markExtras(cx *assemble.Context) (*assemble.Context, *marks, error) {
	n, err := nonce()
	if err != nil {
		return nil, nil, err
	}
	mk := &marks{nonce: n, byText: map[string]mark{}}
	prefixEnd := systemPrefixEnd(cx)
	var out *assemble.Context
	for i := range cx.Messages {
		if cx.HasSummary && i < len(cx.Seqs) && cx.Seqs[i] == 0 {
			continue // the summary is text Compactor wrote
		}
		m, changed, err := mk.markMessage(i, &cx.Messages[i], i <= prefixEnd)
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
		out.Messages[i] = m
	}
	if out == nil {
		return cx, mk, nil
	}
	return out, mk, nil
}

// systemPrefixEnd is the index of the last message formats.Render puts in the system
// field when it is a system message (the summary's index, or without a summary the
// last of the leading system messages; -1: none).
func systemPrefixEnd(cx *assemble.Context) int {
	if cx.HasSummary {
		for i, s := range cx.Seqs {
			if s == 0 {
				return i
			}
		}
	}
	end := -1
	for i := range cx.Messages {
		if cx.Messages[i].Role != schemas.RoleSystem {
			break
		}
		end = i
	}
	return end
}

// extra is what a message's Extra holds for the API.
type extra struct {
	Prefix     []json.RawMessage `json:"anthropic_content_prefix"`
	IsError    bool              `json:"anthropic_is_error"`
	Order      string            `json:"anthropic_block_order"`
	InMessages bool              `json:"anthropic_in_messages"`
	Turn       json.RawMessage   `json:"anthropic_turn"`
	TurnFields json.RawMessage   `json:"anthropic_turn_fields"`
}

func readExtra(m *schemas.Message) extra {
	var x extra
	if len(m.Extra) > 0 {
		_ = json.Unmarshal(m.Extra, &x)
	}
	return x
}

// markMessage returns message i with its markers, and whether it has any. inPrefix
// says Render puts it in the system field when it is a system message: a
// mid-conversation system message there (a pinned one, or one a compaction left
// first) goes to the system field too, since a system turn may not be the first of
// messages nor come before the summary's user turn.
func (mk *marks) markMessage(i int, m *schemas.Message, inPrefix bool) (schemas.Message, bool, error) {
	x := readExtra(m)
	switch {
	case m.Role == schemas.RoleSystem && x.InMessages && !inPrefix:
		turn, err := systemTurnJSON(m, x.TurnFields)
		if err != nil {
			return schemas.Message{}, false, fmt.Errorf("message %d: %w", i, err)
		}
		return schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(mk.add(i, 0, mark{blocks: []json.RawMessage{turn}, turn: true}))}, true, nil
	case m.Role == schemas.RoleUser && len(x.Turn) > 0 && json.Valid(x.Turn):
		return schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(mk.add(i, 0, mark{blocks: []json.RawMessage{x.Turn}, turn: true}))}, true, nil
	case m.Role == schemas.RoleSystem:
		return schemas.Message{}, false, nil
	}
	var raws []json.RawMessage
	if m.Content.IsParts() {
		if err := json.Unmarshal(m.Content.Raw(), &raws); err != nil {
			return schemas.Message{}, false, fmt.Errorf("message %d: %w", i, err)
		}
	}
	if m.Role == schemas.RoleAssistant && x.Order != "" {
		if blocks, ok := orderedBlocks(x, raws, len(m.ToolCalls)); ok {
			out := *m
			out.Content = schemas.Parts(mk.add(i, 0, mark{blocks: blocks, ordered: true, fields: x.TurnFields}))
			return out, true, nil
		}
	}
	var flags mark
	hasX := false
	switch {
	case m.Role == schemas.RoleAssistant && (len(x.Prefix) > 0 || len(x.TurnFields) > 0):
		flags, hasX = mark{blocks: x.Prefix, fields: x.TurnFields}, true
	case m.Role == schemas.RoleTool && (x.IsError || len(x.TurnFields) > 0):
		flags, hasX = mark{flags: true, isError: x.IsError, fields: x.TurnFields}, true
	case m.Role == schemas.RoleUser && len(x.TurnFields) > 0:
		flags, hasX = mark{fields: x.TurnFields}, true
	}
	foreign := false
	for _, r := range raws {
		foreign = foreign || !chatPart(r)
	}
	if !hasX && !foreign {
		return schemas.Message{}, false, nil
	}
	var parts []json.RawMessage
	if hasX {
		if m.Content.IsString() {
			parts = append(parts, textPart(m.Content.String()))
			flags.wasString = true
		}
		parts = append([]json.RawMessage{mk.add(i, 0, flags)}, parts...)
	}
	for j, r := range raws {
		if chatPart(r) {
			parts = append(parts, r)
		} else {
			parts = append(parts, mk.add(i, j+1, mark{blocks: []json.RawMessage{r}}))
		}
	}
	out := *m
	out.Content = schemas.Parts(parts...)
	return out, true, nil
}

// systemTurnJSON is a mid-conversation system message as the turn it was read from:
// {"role":"system","content":...}, a string content as the string.
func systemTurnJSON(m *schemas.Message, fields json.RawMessage) (json.RawMessage, error) {
	content := m.Content.Raw()
	if m.Content.IsParts() {
		var raws []json.RawMessage
		if err := json.Unmarshal(content, &raws); err != nil {
			return nil, err
		}
		blocks := make([]json.RawMessage, 0, len(raws))
		for _, r := range raws {
			b, ok := partBlock(r)
			if !ok {
				return nil, fmt.Errorf("a %q part in a system turn", partType(r))
			}
			blocks = append(blocks, b)
		}
		var err error
		if content, err = wire.MarshalNoEscape(blocks); err != nil {
			return nil, err
		}
	} else if !m.Content.IsString() {
		content = json.RawMessage(`""`)
	}
	var b bytes.Buffer
	b.WriteString(`{"role":"system","content":`)
	b.Write(content)
	writeFields(&b, fields)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// chatPart says a content part is one of Compactor's format that formats.Render
// writes: a text part with fields besides type and text (a text block's citations,
// kept whole by Parse) is not, and goes back verbatim.
func chatPart(p json.RawMessage) bool {
	t := partType(p)
	if !chatPartTypes[t] {
		return false
	}
	if t != "text" {
		return true
	}
	var f map[string]json.RawMessage
	_ = json.Unmarshal(p, &f)
	for k := range f {
		if k != "type" && k != "text" {
			return false
		}
	}
	return true
}

// partBlock is the block a content part Parse read stands for: a text block, an image
// block, or a block kept whole. false for a part Parse never writes.
func partBlock(p json.RawMessage) (json.RawMessage, bool) {
	if !chatPart(p) && partType(p) == "text" {
		return p, true
	}
	switch partType(p) {
	case "text":
		var t struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(p, &t) != nil {
			return nil, false
		}
		return textPart(t.Text), true
	case "image_url":
		var t struct {
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(p, &t) != nil || t.ImageURL.URL == "" {
			return nil, false
		}
		src := imageSource{Type: "url", URL: t.ImageURL.URL}
		if rest, ok := strings.CutPrefix(t.ImageURL.URL, "data:"); ok {
			mime, data, ok := strings.Cut(rest, ";base64,")
			if !ok {
				return nil, false
			}
			src = imageSource{Type: "base64", MediaType: mime, Data: data}
		}
		s, err := wire.MarshalNoEscape(struct {
			Type   string      `json:"type"`
			Source imageSource `json:"source"`
		}{"image", src})
		return s, err == nil
	}
	if chatPartTypes[partType(p)] {
		return nil, false
	}
	return p, true
}

// orderedBlocks lays an assistant message's blocks out in the order Extra says: its
// thinking blocks, content parts as blocks, and nil for each tool_use. false when
// the order does not fit the message.
func orderedBlocks(x extra, parts []json.RawMessage, calls int) ([]json.RawMessage, bool) {
	out := make([]json.RawMessage, 0, len(x.Order))
	var k, p, t int
	for _, c := range []byte(x.Order) {
		switch {
		case c == 'k' && k < len(x.Prefix):
			out = append(out, x.Prefix[k])
			k++
		case c == 'p' && p < len(parts):
			b, ok := partBlock(parts[p])
			if !ok {
				return nil, false
			}
			out = append(out, b)
			p++
		case c == 't' && t < calls:
			out = append(out, nil)
			t++
		default:
			return nil, false
		}
	}
	return out, k == len(x.Prefix) && p == len(parts) && t == calls
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
// stand for; a turn marker splits the turn it is in (Render merges consecutive
// messages of the same role) and goes in between, whole.
func (mk *marks) restore(msgs json.RawMessage) (json.RawMessage, error) {
	var turns []renderedTurn
	if err := json.Unmarshal(msgs, &turns); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	n := 0
	write := func(raw []byte) {
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(raw)
		n++
	}
	b.WriteByte('[')
	for _, t := range turns {
		role, _ := wire.MarshalNoEscape(t.Role)
		var (
			cur    []json.RawMessage
			fields json.RawMessage
		)
		split := false
		flush := func() {
			var c bytes.Buffer
			c.WriteString(`{"role":` + string(role) + `,"content":[`)
			for i, o := range cur {
				if i > 0 {
					c.WriteByte(',')
				}
				c.Write(o)
			}
			c.WriteString("]")
			writeFields(&c, fields)
			c.WriteString("}")
			write(c.Bytes())
			cur, fields = nil, nil
		}
		for j := 0; j < len(t.Content); j++ {
			blk := t.Content[j]
			x, ok := mk.markOf(blk)
			switch {
			case ok && x.turn:
				if len(cur) > 0 {
					flush()
				}
				if n == 0 && partType(x.blocks[0]) == "" {
					var r struct {
						Role string `json:"role"`
					}
					if json.Unmarshal(x.blocks[0], &r) == nil && r.Role == "system" {
						// Render left out the turns before it (blank ones): a system
						// turn may not be the first, it follows Render's placeholder.
						write(placeholderTurn)
					}
				}
				write(x.blocks[0])
				split = true
			case ok && x.ordered:
				fields = orFields(fields, x.fields)
				for _, o := range x.blocks {
					if o != nil {
						cur = append(cur, o)
						continue
					}
					j++
					if j >= len(t.Content) || partType(t.Content[j]) != "tool_use" {
						return nil, errors.New("an assistant's tool_use blocks are not where they were rendered")
					}
					cur = append(cur, t.Content[j])
				}
			default:
				out, f, err := mk.restoreBlock(blk)
				if err != nil {
					return nil, err
				}
				cur = append(cur, out...)
				fields = orFields(fields, f)
			}
		}
		if len(cur) > 0 || !split {
			flush()
		}
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// placeholderTurn is the user turn formats.Render puts first when the turns would not
// start with the user's.
var placeholderTurn = []byte(`{"role":"user","content":[{"type":"text","text":` + strconv.Quote(formats.PlaceholderStart) + `}]}`)

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

// orFields is fields, or more when fields is none.
func orFields(fields, more json.RawMessage) json.RawMessage {
	if len(fields) > 0 {
		return fields
	}
	return more
}

// writeFields writes the fields of an object (a turn's fields besides role and
// content), sorted, each after a comma.
func writeFields(b *bytes.Buffer, fields json.RawMessage) {
	var f map[string]json.RawMessage
	if len(fields) == 0 || json.Unmarshal(fields, &f) != nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(f)) {
		if k == "role" || k == "content" {
			continue
		}
		key, _ := wire.MarshalNoEscape(k)
		b.WriteByte(',')
		b.Write(key)
		b.WriteByte(':')
		b.Write(f[k])
	}
}

// restoreBlock returns what stands for one rendered block: the blocks of a marker,
// a tool_result with its content's markers restored, or the block itself; and the
// fields a marker gives its turn.
func (mk *marks) restoreBlock(blk json.RawMessage) ([]json.RawMessage, json.RawMessage, error) {
	if x, ok := mk.markOf(blk); ok {
		return x.blocks, x.fields, nil
	}
	if !bytes.Contains(blk, []byte(mk.nonce)) {
		return []json.RawMessage{blk}, nil, nil
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(blk, &f); err != nil {
		return nil, nil, err
	}
	var inner []json.RawMessage
	if json.Unmarshal(f["content"], &inner) != nil {
		return []json.RawMessage{blk}, nil, nil
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
	return []json.RawMessage{out}, flags.fields, err
}
