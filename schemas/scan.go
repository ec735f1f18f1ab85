package schemas

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// TextSize is the size of a JSON string's text once decoded: its UTF-8 bytes and its
// characters.
type TextSize struct {
	Bytes, Runes int
}

// ScannedCall is what ScanMessage reads of one tool call: its id and the sizes of its
// function's name and arguments.
type ScannedCall struct {
	ID              string
	Name, Arguments TextSize
}

// ScannedPart is what ScanMessage reads of one content part, as Content.Parts reads it.
type ScannedPart struct {
	// Type is the part's type.
	Type string
	// Text is the size of a text part's text (zero for other parts).
	Text TextSize
	// Fields is ContentPart.Fields: the bytes of the part's fields other than its type
	// and, of a text part, its text.
	Fields int
	// Raw is the part exactly as sent. It shares the bytes given to ScanMessage.
	Raw []byte
}

// Scanned is what the trigger needs of a message, read by ScanMessage without decoding
// it: its role, tool calls, usage and pin, and the sizes a token estimate is made of
// (schemas/tokens turns them into tokens.Message's figure).
type Scanned struct {
	Role       Role
	ToolCalls  []ScannedCall
	ToolCallID string
	// Tokens is the producer's declared count (0 when absent).
	Tokens int
	// Usage and ContextGeneration are set when HasUsage and HasContextGeneration say so.
	Usage                Usage
	HasUsage             bool
	ContextGeneration    uint64
	HasContextGeneration bool
	// Pinned is meta.pin == "true".
	Pinned bool

	Name, Reasoning TextSize
	// ContentBytes is the length of the content's JSON (Content.Raw), 0 when absent.
	ContentBytes int
	// ContentText is the size of a string content's text.
	ContentText TextSize
	// Parts are the parts of an array content.
	Parts []ScannedPart
	// ContentRef is a stub's reference.
	ContentRef *ContentRef
}

// ScanMessage reads what the trigger needs of one wire message. It accepts and refuses
// exactly what DecodeMessage does, with the same error, and reads the same values, in
// one pass over the bytes for the shapes producers send; a rare shape (an escaped key,
// a key given twice, a surrogate escape in an id, a stub, deep nesting) and every
// message it refuses are read by DecodeMessage instead. Scanned.Parts share data.
func ScanMessage(data []byte) (Scanned, error) {
	var s Scanned
	if utf8.Valid(data) && s.scan(data) {
		return s, nil
	}
	return decodeScanned(data)
}

// decodeScanned is ScanMessage by DecodeMessage. It is a function of its own so that the
// Message it decodes does not weigh on the stack of every scan.
//
//go:noinline
func decodeScanned(data []byte) (Scanned, error) {
	m, err := DecodeMessage(data)
	if err != nil {
		return Scanned{}, err
	}
	return scannedOf(&m), nil
}

// scannedOf reads what Scanned holds from a decoded message.
func scannedOf(m *Message) Scanned {
	s := Scanned{
		Role: m.Role, ToolCallID: m.ToolCallID, Tokens: m.Tokens, Pinned: m.Pinned(),
		Name: sizeOf(m.Name), Reasoning: sizeOf(m.Reasoning), ContentBytes: len(m.Content.Raw()),
		ContentRef: m.ContentRef,
	}
	if m.Usage != nil {
		s.Usage, s.HasUsage = *m.Usage, true
	}
	if m.ContextGeneration != nil {
		s.ContextGeneration, s.HasContextGeneration = *m.ContextGeneration, true
	}
	for _, tc := range m.ToolCalls {
		s.ToolCalls = append(s.ToolCalls, ScannedCall{ID: tc.ID, Name: sizeOf(tc.Function.Name), Arguments: sizeOf(tc.Function.Arguments)})
	}
	switch {
	case m.Content.IsString():
		s.ContentText = sizeOf(m.Content.String())
	case m.Content.IsParts():
		parts, _ := m.Content.Parts()
		for _, p := range parts {
			sp := ScannedPart{Type: p.Type, Fields: p.Fields, Raw: p.Raw}
			if p.Type == "text" {
				sp.Text = sizeOf(p.Text)
			}
			s.Parts = append(s.Parts, sp)
		}
	}
	return s
}

func sizeOf(s string) TextSize { return TextSize{Bytes: len(s), Runes: utf8.RuneCountInString(s)} }

// The top-level fields the one-pass reader knows, as bits of a set.
const (
	fRole = 1 << iota
	fContent
	fName
	fToolCalls
	fToolCallID
	fReasoning
	fExtra
	fTokens
	fUsage
	fContextGeneration
	fMeta
	fContentRef
)

// topField maps a top-level key to its bit; 0 is an unknown field.
func topField(k []byte) int {
	switch string(k) {
	case "role":
		return fRole
	case "content":
		return fContent
	case "name":
		return fName
	case "tool_calls":
		return fToolCalls
	case "tool_call_id":
		return fToolCallID
	case "reasoning":
		return fReasoning
	case "extra":
		return fExtra
	case "tokens":
		return fTokens
	case "usage":
		return fUsage
	case "context_generation":
		return fContextGeneration
	case "meta":
		return fMeta
	case "content_ref":
		return fContentRef
	}
	return 0
}

// scan reads data, valid UTF-8, in one pass. It returns false when data is not a
// message it is sure DecodeMessage accepts as read: the caller then decodes it.
func (s *Scanned) scan(data []byte) bool {
	sc := scanner{data: data}
	var seen int
	var content []byte
	ok := sc.object(func(key []byte) bool {
		f := topField(key)
		if f != 0 && seen&f != 0 {
			return false // a key given twice: encoding/json keeps the last
		}
		seen |= f
		if f == fContent {
			start := sc.i
			if !s.content(&sc) {
				return false
			}
			content = data[start:sc.i]
			return true
		}
		return s.field(&sc, f)
	})
	if !ok || !sc.end() {
		return false
	}
	s.ContentBytes = len(content)
	return s.valid(content)
}

// field reads the value of the top-level field f (0: an unknown one, skipped).
func (s *Scanned) field(sc *scanner, f int) bool {
	if f != fRole && f != 0 && sc.null() {
		return true // null in an optional field is absent
	}
	switch f {
	case fRole:
		body, esc, _, ok := sc.str()
		if !ok || esc {
			return false
		}
		s.Role = roleOf(body)
		return s.Role != ""
	case fName:
		return sc.text(&s.Name)
	case fReasoning:
		return sc.text(&s.Reasoning)
	case fToolCallID:
		id, ok := sc.decoded()
		s.ToolCallID = id
		return ok
	case fToolCalls:
		return s.toolCalls(sc)
	case fExtra:
		return sc.peek() == '{' && sc.skip(0)
	case fTokens:
		n, ok := sc.uint(18)
		s.Tokens = int(n)
		return ok
	case fUsage:
		s.HasUsage = true
		return s.usage(sc)
	case fContextGeneration:
		s.ContextGeneration, s.HasContextGeneration = 0, true
		n, ok := sc.uint(19)
		s.ContextGeneration = n
		return ok
	case fMeta:
		return s.meta(sc)
	case fContentRef:
		return false // a stub: rare, read by DecodeMessage
	}
	return sc.skip(0)
}

// roleOf returns the role b names, "" for none (without allocating).
func roleOf(b []byte) Role {
	switch string(b) {
	case string(RoleSystem):
		return RoleSystem
	case string(RoleUser):
		return RoleUser
	case string(RoleAssistant):
		return RoleAssistant
	case string(RoleTool):
		return RoleTool
	}
	return ""
}

// valid checks what Validate checks beyond the fields' types; content is the content's
// JSON (nil when absent).
func (s *Scanned) valid(content []byte) bool {
	if s.Role == "" {
		return false
	}
	if len(content) == 0 || string(content) == "null" {
		if s.Role != RoleAssistant || len(s.ToolCalls) == 0 {
			return false
		}
	}
	if len(s.ToolCalls) > 0 && s.Role != RoleAssistant {
		return false
	}
	if (s.Role == RoleTool) != (s.ToolCallID != "") {
		return false
	}
	return true
}

// toolCalls reads an array of tool calls.
func (s *Scanned) toolCalls(sc *scanner) bool {
	return sc.array(func() bool {
		if len(s.ToolCalls) == maxScannedCalls {
			return false // many calls: DecodeMessage checks their ids are unique
		}
		var c ScannedCall
		var typ, fn bool
		ok := sc.object(func(key []byte) bool {
			switch string(key) {
			case "id":
				if c.ID != "" {
					return false
				}
				id, ok := sc.decoded()
				c.ID = id
				return ok && id != ""
			case "type":
				if typ {
					return false
				}
				typ = true
				body, esc, _, ok := sc.str()
				return ok && !esc && string(body) == "function"
			case "function":
				if fn {
					return false
				}
				fn = true
				return sc.function(&c)
			}
			return sc.otherField(key, "id", "type", "function")
		})
		if !ok || c.ID == "" || !typ || !fn || c.Name.Bytes == 0 {
			return false
		}
		for _, prev := range s.ToolCalls {
			if prev.ID == c.ID {
				return false
			}
		}
		s.ToolCalls = append(s.ToolCalls, c)
		return true
	})
}

// maxScannedCalls is the most tool calls the one-pass reader checks for duplicate ids
// (by comparing each pair); a message with more is read by DecodeMessage.
const maxScannedCalls = 32

// function reads a tool call's function: {name, arguments}.
func (sc *scanner) function(c *ScannedCall) bool {
	var name, args bool
	return sc.object(func(key []byte) bool {
		switch string(key) {
		case "name":
			if name {
				return false
			}
			name = true
			return sc.text(&c.Name)
		case "arguments":
			if args {
				return false
			}
			args = true
			return sc.null() || sc.text(&c.Arguments)
		}
		return sc.otherField(key, "name", "arguments")
	})
}

// usage reads {prompt_tokens, completion_tokens, total_tokens, cached_tokens}.
func (s *Scanned) usage(sc *scanner) bool {
	var seen int
	return sc.object(func(key []byte) bool {
		var dst *int
		bit := 0
		switch string(key) {
		case "prompt_tokens":
			dst, bit = &s.Usage.PromptTokens, 1
		case "completion_tokens":
			dst, bit = &s.Usage.CompletionTokens, 2
		case "total_tokens":
			dst, bit = &s.Usage.TotalTokens, 4
		case "cached_tokens":
			dst, bit = &s.Usage.CachedTokens, 8
		default:
			return sc.otherField(key, "prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens")
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if sc.null() {
			return true
		}
		n, ok := sc.uint(18)
		*dst = int(n)
		return ok
	})
}

// meta reads an object of string (or null) values; meta.pin == "true" pins.
func (s *Scanned) meta(sc *scanner) bool {
	return sc.object(func(key []byte) bool {
		pin := string(key) == MetaPin
		if sc.null() {
			if pin {
				s.Pinned = false // encoding/json stores "" for null: the last value wins
			}
			return true
		}
		if !pin {
			_, _, _, ok := sc.str()
			return ok
		}
		v, ok := sc.decoded()
		s.Pinned = v == "true"
		return ok
	})
}

// content reads the content: a string, an array of parts, or null.
func (s *Scanned) content(sc *scanner) bool {
	switch sc.peek() {
	case '"':
		return sc.text(&s.ContentText)
	case '[':
		s.Parts = make([]ScannedPart, 0, 4)
		return sc.array(func() bool {
			p, ok := sc.part()
			s.Parts = append(s.Parts, p)
			return ok
		})
	}
	return sc.null()
}

// maxPartKeys is the most keys the one-pass reader reads in one content part (it
// compares each pair, to find a key given twice).
const maxPartKeys = 16

// part reads one content part, as Content.Parts and Validate read it.
func (sc *scanner) part() (ScannedPart, bool) {
	var p ScannedPart
	start := sc.i
	var keys [maxPartKeys][]byte
	nkeys := 0
	var text []byte     // the raw value of "text"
	var payload [4]bool // image_url, input_audio, file, refusal: present and not null
	ok := sc.object(func(key []byte) bool {
		if nkeys == maxPartKeys {
			return false
		}
		for _, k := range keys[:nkeys] {
			if string(k) == string(key) {
				return false
			}
		}
		keys[nkeys] = key
		nkeys++
		v := sc.i
		switch string(key) {
		case "type":
			t, ok := sc.partType()
			p.Type = t
			return ok
		case "text":
			if sc.peek() == '"' {
				if !sc.text(&p.Text) {
					return false
				}
			} else if !sc.skip(0) {
				return false
			}
			text = sc.data[v:sc.i]
			return true
		}
		if !sc.skip(0) {
			return false
		}
		if i := payloadIndex(key); i >= 0 {
			payload[i] = string(sc.data[v:sc.i]) != "null"
		}
		p.Fields += len(key) + sc.i - v
		return true
	})
	if !ok || p.Type == "" {
		return p, false
	}
	p.Raw = sc.data[start:sc.i]
	switch p.Type {
	case "text":
		if len(text) == 0 || text[0] != '"' {
			return p, false
		}
	case "image_url", "input_audio", "file", "refusal":
		if !payload[payloadIndex([]byte(p.Type))] {
			return p, false
		}
		fallthrough
	default:
		p.Text = TextSize{}
		if text != nil {
			p.Fields += len("text") + len(text)
		}
	}
	return p, true
}

// payloadIndex is the index of a part type's payload field, -1 for other keys.
func payloadIndex(k []byte) int {
	switch string(k) {
	case "image_url":
		return 0
	case "input_audio":
		return 1
	case "file":
		return 2
	case "refusal":
		return 3
	}
	return -1
}

// partType reads a part's type: a non-empty string.
func (sc *scanner) partType() (string, bool) {
	body, esc, _, ok := sc.str()
	if !ok || esc || len(body) == 0 {
		return "", false
	}
	switch string(body) {
	case "text":
		return "text", true
	case "image_url":
		return "image_url", true
	case "input_audio":
		return "input_audio", true
	case "file":
		return "file", true
	case "refusal":
		return "refusal", true
	}
	return string(body), true
}

// otherField skips the value of key, a field of an object encoding/json decodes into a
// struct whose fields are names: false when key may match one of them the way
// encoding/json matches names (without regard to case, where non-ASCII letters such as
// ſ and K fold to ASCII ones).
func (sc *scanner) otherField(key []byte, names ...string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return false
		}
	}
	return sc.skip(0)
}

// scanner reads JSON from data at i. Its methods return false for anything they are not
// sure of: not only invalid JSON, but shapes left to encoding/json.
type scanner struct {
	data []byte
	i    int
}

// maxScanDepth is the deepest nesting the one-pass reader follows; deeper values are
// left to encoding/json (which refuses them past its own limit).
const maxScanDepth = 512

func (sc *scanner) space() {
	for sc.i < len(sc.data) {
		switch sc.data[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (sc *scanner) peek() byte {
	sc.space()
	if sc.i < len(sc.data) {
		return sc.data[sc.i]
	}
	return 0
}

// end reports whether only white space is left.
func (sc *scanner) end() bool {
	sc.space()
	return sc.i == len(sc.data)
}

// null consumes a null literal if one is next.
func (sc *scanner) null() bool { return sc.literal("null") }

func (sc *scanner) literal(lit string) bool {
	if sc.peek() == lit[0] && len(sc.data)-sc.i >= len(lit) && string(sc.data[sc.i:sc.i+len(lit)]) == lit {
		sc.i += len(lit)
		return true
	}
	return false
}

// object reads an object whose keys have no escape, calling member with each key and the
// scanner at its value, which member must consume.
func (sc *scanner) object(member func(key []byte) bool) bool {
	if sc.peek() != '{' {
		return false
	}
	sc.i++
	if sc.peek() == '}' {
		sc.i++
		return true
	}
	for {
		key, esc, _, ok := sc.str()
		if !ok || esc || sc.peek() != ':' {
			return false
		}
		sc.i++
		sc.space()
		if !member(key) {
			return false
		}
		switch sc.peek() {
		case ',':
			sc.i++
		case '}':
			sc.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem with the scanner at each element, which elem must
// consume.
func (sc *scanner) array(elem func() bool) bool {
	if sc.peek() != '[' {
		return false
	}
	sc.i++
	if sc.peek() == ']' {
		sc.i++
		return true
	}
	for {
		sc.space()
		if !elem() {
			return false
		}
		switch sc.peek() {
		case ',':
			sc.i++
		case ']':
			sc.i++
			return true
		default:
			return false
		}
	}
}

// skip reads any JSON value, checking it is valid.
func (sc *scanner) skip(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	switch c := sc.peek(); {
	case c == '"':
		_, _, _, ok := sc.str()
		return ok
	case c == '{':
		return sc.object(func([]byte) bool { return sc.skip(depth + 1) })
	case c == '[':
		return sc.array(func() bool { return sc.skip(depth + 1) })
	case c == 't':
		return sc.literal("true")
	case c == 'f':
		return sc.literal("false")
	case c == 'n':
		return sc.null()
	case c == '-' || '0' <= c && c <= '9':
		return sc.number()
	}
	return false
}

// number reads a JSON number.
func (sc *scanner) number() bool {
	d, i := sc.data, sc.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return false
		}
		i = j
	}
	sc.i = i
	return true
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// uint reads a non-negative integer of at most maxDigits digits (a number that
// encoding/json puts in an int64 or a uint64 as it is).
func (sc *scanner) uint(maxDigits int) (uint64, bool) {
	start := sc.i
	if !sc.number() {
		return 0, false
	}
	lit := sc.data[start:sc.i]
	if len(lit) > maxDigits || lit[0] == '-' {
		return 0, false
	}
	var n uint64
	for _, c := range lit {
		if c < '0' || c > '9' {
			return 0, false // a fraction or an exponent
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// text reads a string, or fails, setting *size to its decoded text's.
func (sc *scanner) text(size *TextSize) bool {
	_, _, sz, ok := sc.str()
	*size = sz
	return ok
}

// decoded reads a string and returns its text; false for a surrogate escape, which it
// leaves to encoding/json.
func (sc *scanner) decoded() (string, bool) {
	sc.space()
	start := sc.i
	body, esc, _, ok := sc.str()
	if !ok {
		return "", false
	}
	if !esc {
		return string(body), true
	}
	return unquote(sc.data[start:sc.i])
}

// SWAR masks: a byte of ones, and the high bit of every byte.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special8 marks, with its high bit, a byte of the 8 bytes of x (little-endian) that is
// '"', '\\', a control character or a byte of a multi-byte UTF-8 sequence: exactly for
// the lowest such byte (a byte above it may be marked too), none when there is none.
func special8(x uint64) uint64 {
	q := x ^ (lsb * '"')
	b := x ^ (lsb * '\\')
	return ((q-lsb)&^q | (b-lsb)&^b | (x - lsb*0x20) | x) & msb
}

// str reads a string literal (of valid UTF-8, which the caller checked): its body
// between the quotes, whether it holds an escape, and its decoded text's size as
// encoding/json decodes it (an unpaired surrogate escape is U+FFFD).
func (sc *scanner) str() (body []byte, esc bool, size TextSize, ok bool) {
	d := sc.data
	if sc.peek() != '"' {
		return nil, false, size, false
	}
	start := sc.i + 1
	i := start
	for {
		for i+8 <= len(d) {
			m := special8(binary.LittleEndian.Uint64(d[i:]))
			n := 8
			if m != 0 {
				n = bits.TrailingZeros64(m) / 8
			}
			i += n
			size.Bytes += n
			size.Runes += n
			if m != 0 {
				break
			}
		}
		if i >= len(d) {
			return nil, false, size, false
		}
		switch c := d[i]; {
		case c == '"':
			sc.i = i + 1
			return d[start:i], esc, size, true
		case c == '\\':
			esc = true
			n, w, ok := escape(d[i:])
			if !ok {
				return nil, false, size, false
			}
			i += n
			size.Bytes += w
			size.Runes++
		case c < 0x20:
			return nil, false, size, false
		default:
			if c&0xC0 != 0x80 {
				size.Runes++
			}
			size.Bytes++
			i++
		}
	}
}

// escape reads the escape sequence at the start of d: its length n and the UTF-8 length
// w of the character it decodes to.
func escape(d []byte) (n, w int, ok bool) {
	if len(d) < 2 {
		return 0, 0, false
	}
	switch d[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, 1, true
	case 'u':
	default:
		return 0, 0, false
	}
	r, ok := hex4(d[2:])
	if !ok {
		return 0, 0, false
	}
	switch {
	case r < 0xD800 || r > 0xDFFF:
		return 6, utf8.RuneLen(r), true
	case r < 0xDC00 && len(d) >= 12 && d[6] == '\\' && d[7] == 'u':
		if lo, ok := hex4(d[8:]); ok && 0xDC00 <= lo && lo <= 0xDFFF {
			return 12, 4, true // a surrogate pair: one character outside the BMP
		}
	}
	return 6, utf8.RuneLen(utf8.RuneError), true // an unpaired surrogate
}

func hex4(d []byte) (rune, bool) {
	if len(d) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
