package schemas_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// scanSeeds are shapes of the wire contract for FuzzScanMessage, beside those of
// testdata/fuzz/FuzzScanMessage (corpus messages among them).
var scanSeeds = []struct {
	json    string
	onePass bool // read by the one-pass reader alone
}{
	{`{"role":"user","content":"hi"}`, true},
	{` {"role" : "user" , "content" : "h\u00e9\ud83d\ude00\ud800x\n\"" } `, true},
	{`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"cat","arguments":null},"index":1}]}`, true},
	{`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls"}}],"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":3}},"context_generation":2}`, true},
	{`{"role":"assistant","content":"x","tool_calls":[{"id":"c1","ID":"c2","type":"function","function":{"name":"ls"}}]}`, false},
	{`{"role":"assistant","content":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls"}},{"id":"c1","type":"function","function":{"name":"ls"}}]}`, false},
	{`{"role":"tool","content":"42","tool_call_id":"c1","tokens":3}`, true},
	{`{"role":"tool","content":"42","tool_call_id":"c\u0031","tokens":3000}`, true},
	{`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:,x"},"detail":"low"},{"type":"x-new","text":5},{"type":"refusal","refusal":"no"},{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},{"type":"file","file":{"filename":"a.pdf","file_data":"QQ=="}}]}`, true},
	{`{"role":"user","content":[{"type":"image_url","image_url":null}]}`, false},
	{`{"role":"user","content":[{"text":"a","type":"text","text":"b"}]}`, false},
	{`{"role":"user","content":[]}`, true},
	{`{"role":"user","content":[null]}`, false},
	{`{"role":"assistant","content":"ok","extra":{ "sig" : "abc=="},"reasoning":"r","usage":{"prompt_tokens":1,"completion_tokens":2},"context_generation":0,"meta":{"pin":"true"},"Role":"x","zz":[1, 2.5e-3, true, false, null, {"a":{}}]}`, true},
	{`{"role":"user","content":"a","meta":{"pin":"true","pin":null}}`, true},
	{`{"role":"user","content":"a","meta":{"pin":"tru\u0065","x":"y"}}`, true},
	{`{"role":"system","content":"a","meta":{},"tool_calls":[],"extra":null,"name":"","usage":null,"context_generation":null,"tokens":null,"content_ref":null}`, true},
	{`{"role":"user","content":"a","role":"tool"}`, false},
	{`{"r\u006fle":"user","content":"a"}`, false},
	{`{"role":"user","content":"a","tokens":-1}`, false},
	{`{"role":"user","content":"a","tokens":1.5}`, false},
	{`{"role":"user","content":"a","tokens":1e2}`, false},
	{`{"role":"user","content":"a","context_generation":18446744073709551615}`, false},
	{`{"role":"user","content":"a","usage":{"prompt_tokens":1,"Prompt_Tokens":2}}`, false},
	{`{"role":"user","content":"a","usage":{"prompt_tokenſ":2}}`, false},
	{`{"role":"user","content":"a","extra":[1]}`, false},
	{`{"role":"user","content":"a",}`, false},
	{`{"role":"user","content":"a"} x`, false},
	{`{"role":"user","content":"\u0000\t"}`, true},
	{`{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"compaction-objects","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":99,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":3}}`, false},
	{`{"role":"assistant","content":"ok","content":[{"type":"image_url","image_url":{"url":"data:,AAAA"},"detail":"low"}]}`, false},
	{`[1]`, false},
	{`null`, false},
}

// FuzzScanMessage: ScanMessage accepts and refuses what DecodeMessage does, and reads
// what the trigger reads of a decoded message (role, tool call ids, tool_call_id,
// usage, context_generation, pin, and tokens.Message's count through tokens.Scanned);
// where its one-pass reader alone is sure, it reads every size as ScanMessage does of
// the decoded message.
func FuzzScanMessage(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s.json))
	}
	for _, m := range scanBenchMessages {
		f.Add([]byte(m.json))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data)
		checkScan(t, buildMessage(data))
	})
}

// maxBuiltMembers is the most members buildMessage adds to its base.
const maxBuiltMembers = 3

// scanBases are the messages buildMessage starts from: valid ones, so that the members
// it adds (duplicates of theirs among them) are what decides.
var scanBases = []string{
	`{"role":"user","content":"hi"`,
	`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f"}}]`,
	`{"role":"tool","tool_call_id":"c1","content":"x"`,
	`{"role":"assistant","content":"ok"`,
	`{"content":"hi"`,
}

// scanMembers are the members buildMessage adds: each top-level key (cased and escaped
// ones among them) with values of the shapes it takes and of shapes it does not.
var scanMembers = []struct {
	key    string
	values []string
}{
	{`"role"`, []string{`"user"`, `"assistant"`, `"tool"`, `"system"`, `""`, `"x"`, `"us\u0065r"`, `null`, `1`}},
	{`"content"`, []string{`"hi"`, `"\ud83d\ude00\ud800é\u0000\t\"\\\/"`, `null`, `[]`, `1`, `{}`, `[null]`, `[{}]`,
		`[{"type":"text","text":"hi"}]`, `[{"type":"text","text":null}]`, `[{"type":"text"}]`, `[{"type":"text","text":3}]`,
		`[{"type":"image_url","image_url":{"url":"data:,AAAA"},"detail":"low"}]`, `[{"type":"image_url"}]`, `[{"type":"image_url","image_url":null}]`,
		`[{"type":"x","text":"t","y":[1]}]`, `[{"type":""}]`, `[{"type":null}]`, `[{"type":"refusal","refusal":"no"}]`,
		`[{"type":"file","file":{"filename":"a","file_data":"QUFB"}},{"type":"input_audio","input_audio":{"data":"AA"}}]`,
		`[{"type":"text","text":"a","text":"b"}]`, `[{"type":"text","Text":"a","text":"b"}]`, `[{"t\u0079pe":"text","text":"a"}]`}},
	{`"name"`, []string{`"n"`, `"\u00e9x"`, `""`, `null`, `1`}},
	{`"tool_calls"`, []string{`[]`, `null`, `[null]`, `{}`,
		`[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]`,
		`[{"id":"c2","type":"function","function":{"name":"g"}},{"id":"c3","type":"function","function":{"name":"h","arguments":null}}]`,
		`[{"id":"c1","type":"function","function":{"name":"f"}},{"id":"c1","type":"function","function":{"name":"f"}}]`,
		`[{"id":"c1","Id":"c4","type":"function","function":{"name":"f"}}]`,
		`[{"id":"c1","type":"function","function":{"name":"f","Name":"g"},"index":0}]`,
		`[{"id":"c1","type":"tool","function":{"name":"f"}}]`,
		`[{"id":"","type":"function","function":{"name":"f"}}]`,
		`[{"id":"c1","type":"function","function":{"name":""}}]`,
		`[{"id":"c1","type":"function","function":null}]`,
		`[{"id":"c1","id":"c5","type":"function","function":{"name":"f"}}]`,
		`[{"ıd":"c1","type":"function","function":{"name":"f"}}]`,
		`[{"id":"c1","type":"function","function":{"name":"f"},"FUNCTION":{"name":"longer"}}]`,
		`[{"id":"c1","type":"function","function":{"name":"f","ARGUMENTS":"{\"a\":1}"}}]`,
		`[{"id":"c1","TYPE":"x","type":"function","function":{"name":"f"}}]`}},
	{`"tool_call_id"`, []string{`"c1"`, `"c\u0031"`, `"c2"`, `""`, `null`, `1`, `"\ud800"`}},
	{`"reasoning"`, []string{`"why"`, `"\n"`, `null`, `[]`}},
	{`"extra"`, []string{`{}`, `{"a":[1,{"b":null}]}`, `null`, `[1]`, `"x"`}},
	{`"tokens"`, []string{`0`, `7`, `100000`, `-1`, `1.5`, `1e2`, `null`, `12345678901234567890`, `"7"`}},
	{`"usage"`, []string{`{"prompt_tokens":100,"completion_tokens":5}`, `{"prompt_tokens":1,"prompt_tokens":2}`, `{}`, `null`, `[]`,
		`{"Prompt_tokens":3}`, `{"prompt_tokens":null,"total_tokens":4,"cached_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}`,
		`{"prompt_tokens":-5}`, `{"completion_tokenſ":2}`, `{"prompt_tokens":1.0}`}},
	{`"context_generation"`, []string{`0`, `2`, `-1`, `null`, `1.5`, `18446744073709551615`, `18446744073709551616`, `"2"`}},
	{`"meta"`, []string{`{"pin":"true"}`, `{"pin":null}`, `{"pin":"false","a":"b"}`, `{"pin":"true","pin":"no"}`, `{"pin":1}`,
		`{"Pin":"true"}`, `{"p\u0069n":"true"}`, `{"pin":"tru\u0065"}`, `{}`, `null`, `[]`}},
	{`"content_ref"`, []string{`null`, `{}`,
		`{"bucket":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":99,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":3}`}},
	{`"Role"`, []string{`"tool"`, `1`}},
	{`"r\u006fle"`, []string{`"tool"`, `"user"`}},
	{`"x"`, []string{`[1,{"b":null},"\u00e9",-0.5e+3,true,false]`, `{"role":"x"}`}},
	{`"CONTENT"`, []string{`null`, `"x"`}},
}

// buildMessage makes a message of data: its first byte picks one of scanBases, then two
// bytes a member of scanMembers, its key and one of its values (with white space around
// its colon and comma when the second byte's high bit is set), at most
// maxBuiltMembers (more would nearly always repeat a key, which the one-pass reader
// leaves to DecodeMessage).
func buildMessage(data []byte) []byte {
	if len(data) == 0 {
		return nil
	}
	b := []byte(scanBases[int(data[0])%len(scanBases)])
	for i := 1; i+1 < len(data) && i < 2*maxBuiltMembers; i += 2 {
		m := scanMembers[int(data[i])%len(scanMembers)]
		comma, colon := ",", ":"
		if data[i+1]&0x80 != 0 {
			comma, colon = " \n,\t", "\r: "
		}
		b = append(b, comma...)
		b = append(b, m.key...)
		b = append(b, colon...)
		b = append(b, m.values[int(data[i+1])%len(m.values)]...)
	}
	return append(b, '}')
}

// checkScan compares ScanMessage and its one-pass reader with DecodeMessage on data.
func checkScan(t *testing.T, data []byte) {
	t.Helper()
	m, derr := schemas.DecodeMessage(data)
	s, serr := schemas.ScanMessage(data)
	fast, sure := schemas.ScanFast(data)
	if sure && derr != nil {
		t.Fatalf("the one-pass reader accepted %q, which DecodeMessage refuses: %v", data, derr)
	}
	if derr != nil {
		if serr == nil || serr.Error() != derr.Error() {
			t.Fatalf("ScanMessage(%q) error %v; want DecodeMessage's %v", data, serr, derr)
		}
		return
	}
	if serr != nil {
		t.Fatalf("ScanMessage(%q) refused what DecodeMessage accepts: %v", data, serr)
	}
	scans := []schemas.Scanned{s}
	if sure {
		scans = append(scans, fast)
	}
	for _, got := range scans {
		checkScanned(t, data, &got, &m)
		if want := schemas.ScannedOf(&m); !sameScanned(&got, &want) {
			t.Fatalf("scanning %q read\n %#v\nwant\n %#v", data, got, want)
		}
	}
}

// checkScanned compares what the trigger reads of s and of m.
func checkScanned(t *testing.T, data []byte, s *schemas.Scanned, m *schemas.Message) {
	t.Helper()
	var ids []string
	for _, c := range m.ToolCalls {
		ids = append(ids, c.ID)
	}
	var sids []string
	for _, c := range s.ToolCalls {
		sids = append(sids, c.ID)
	}
	switch {
	case s.Role != m.Role:
		t.Fatalf("%q: role %q; want %q", data, s.Role, m.Role)
	case !reflect.DeepEqual(sids, ids):
		t.Fatalf("%q: tool call ids %q; want %q", data, sids, ids)
	case s.ToolCallID != m.ToolCallID:
		t.Fatalf("%q: tool_call_id %q; want %q", data, s.ToolCallID, m.ToolCallID)
	case s.Pinned != m.Pinned():
		t.Fatalf("%q: pinned %v; want %v", data, s.Pinned, m.Pinned())
	case s.HasUsage != (m.Usage != nil) || m.Usage != nil && s.Usage != *m.Usage:
		t.Fatalf("%q: usage %v %+v; want %+v", data, s.HasUsage, s.Usage, m.Usage)
	case s.HasContextGeneration != (m.ContextGeneration != nil) || m.ContextGeneration != nil && s.ContextGeneration != *m.ContextGeneration:
		t.Fatalf("%q: context_generation %v %d; want %v", data, s.HasContextGeneration, s.ContextGeneration, m.ContextGeneration)
	}
	if got, want := tokens.Scanned(s), tokens.MessageWith(tokens.Chars4{}, m); got != want {
		t.Fatalf("%q: tokens.Scanned %d; want tokens.MessageWith(Chars4) %d", data, got, want)
	}
}

// sameScanned compares two scans, parts by their bytes.
func sameScanned(a, b *schemas.Scanned) bool {
	if len(a.Parts) != len(b.Parts) {
		return false
	}
	for i := range a.Parts {
		p, q := a.Parts[i], b.Parts[i]
		if !bytes.Equal(p.Raw, q.Raw) {
			return false
		}
		if p.Type != q.Type || p.Text != q.Text || p.Fields != q.Fields {
			return false
		}
	}
	x, y := *a, *b
	x.Parts, y.Parts = nil, nil
	if len(x.ToolCalls) == 0 && len(y.ToolCalls) == 0 {
		x.ToolCalls, y.ToolCalls = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

// TestScanReadsInOnePass: the shapes producers send are read by the one-pass reader,
// not left to DecodeMessage (which FuzzScanMessage alone would not notice).
func TestScanReadsInOnePass(t *testing.T) {
	for _, s := range scanSeeds {
		if _, sure := schemas.ScanFast([]byte(s.json)); sure != s.onePass {
			t.Errorf("%s: read in one pass %v; want %v", s.json, sure, s.onePass)
		}
	}
}
