package schemas_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

func TestMessageEncodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string // "" means the same bytes as give
	}{
		{
			name: "string content with escapes kept",
			give: `{"role":"user","content":"caf\u00e9 \"quoted\" <b>\n"}`,
		},
		{
			name: "content parts with image_url and odd spacing",
			give: `{"role":"user","content":[ {"type":"text", "text":"look"},` +
				`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0K","detail":"low"}} ]}`,
		},
		{
			name: "input_audio and file parts",
			give: `{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklGR","format":"wav"}},` +
				`{"type":"file","file":{"file_id":"file-1"}}]}`,
		},
		{
			name: "extra with odd whitespace",
			give: "{\"role\":\"assistant\",\"content\":\"ok\",\"extra\":{ \"sig\" :  \"abc==\",\n\t\"n\":[1, 2.50, 1e3] }}",
		},
		{
			name: "unknown top-level fields kept in sorted order",
			give: `{"role":"user","content":"x","alpha":[1, 2],"zeta":{"a" : 1}}`,
		},
		{
			name: "unknown fields out of order are written sorted",
			give: `{"role":"user","content":"x","zeta":true,"alpha":null}`,
			want: `{"role":"user","content":"x","alpha":null,"zeta":true}`,
		},
		{
			name: "a differently cased known name is an unknown field",
			give: `{"role":"user","content":"a","Content":"b"}`,
		},
		{
			name: "every field",
			give: `{"role":"assistant","content":null,"name":"bot",` +
				`"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"p\":\"/\"}"}}],` +
				`"reasoning":"think","extra":{"k":1},"tokens":12,"usage":{"prompt_tokens":10,"completion_tokens":5},` +
				`"context_generation":3,"meta":{"a":"b","pin":"true"},"x-trace":"t1"}`,
		},
		{
			name: "tool result",
			give: `{"role":"tool","content":"42","tool_call_id":"c1"}`,
		},
		{
			name: "generation zero is kept",
			give: `{"role":"user","content":"x","context_generation":0}`,
		},
		{
			name: "absent content is written as null",
			give: `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}`,
			want: `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}`,
		},
		{
			name: "null extra is absent",
			give: `{"role":"user","content":"a","extra":null}`,
			want: `{"role":"user","content":"a"}`,
		},
		{
			name: "field order is the contract's",
			give: `{"content":"a","role":"user"}`,
			want: `{"role":"user","content":"a"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == "" {
				want = tt.give
			}
			m, err := schemas.DecodeMessage([]byte(tt.give))
			if err != nil {
				t.Fatalf("DecodeMessage: %v", err)
			}
			got, err := m.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if string(got) != want {
				t.Fatalf("Encode got\n%s\nwant\n%s", got, want)
			}
			// Encoding is a fixed point: decode(encode(m)) is decode(want).
			m2, err := schemas.DecodeMessage(got)
			if err != nil {
				t.Fatalf("DecodeMessage(Encode): %v", err)
			}
			wantMsg, err := schemas.DecodeMessage([]byte(want))
			if err != nil {
				t.Fatalf("DecodeMessage(want): %v", err)
			}
			if !reflect.DeepEqual(m2, wantMsg) {
				t.Fatalf("decode(encode(m)) got %+v; want %+v", m2, wantMsg)
			}
			// json.Marshal goes through MarshalJSON and only compacts.
			viaJSON, err := json.Marshal(m)
			if err != nil {
				t.Fatalf("json.Marshal: %v", err)
			}
			if !json.Valid(viaJSON) || compact(t, viaJSON) != compact(t, got) {
				t.Fatalf("json.Marshal got %s; want %s", viaJSON, compact(t, got))
			}
		})
	}
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var buf strings.Builder
	var out json.RawMessage
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	c, _ := json.Marshal(out)
	buf.Write(c)
	return buf.String()
}

func TestMessageUnmarshalKeepsBytes(t *testing.T) {
	give := "{\"role\":\"assistant\",\"content\":[ {\"type\":\"text\",\"text\":\"a\"} ],\"extra\":{ \"x\" : 1 },\"unk\": [ 1 ]}"
	var m schemas.Message
	if err := json.Unmarshal([]byte(give), &m); err != nil {
		t.Fatal(err)
	}
	if got, want := string(m.Content.Raw()), `[ {"type":"text","text":"a"} ]`; got != want {
		t.Errorf("Content.Raw() got %s; want %s", got, want)
	}
	if got, want := string(m.Extra), `{ "x" : 1 }`; got != want {
		t.Errorf("Extra got %s; want %s", got, want)
	}
	if got, want := string(m.Unknown["unk"]), `[ 1 ]`; got != want {
		t.Errorf("Unknown[unk] got %s; want %s", got, want)
	}
}

func TestMessageMethods(t *testing.T) {
	gen := uint64(2)
	full := schemas.Message{
		Role: schemas.RoleAssistant, Content: schemas.Text("x"), Name: "n", Reasoning: "r",
		ToolCalls: []schemas.ToolCall{{ID: "c", Type: "function", Function: schemas.FunctionCall{Name: "f"}}},
		Extra:     json.RawMessage(`{"a":1}`), Tokens: 9, Usage: &schemas.Usage{PromptTokens: 1},
		ContextGeneration: &gen, Meta: map[string]string{"pin": "true"},
		Unknown: map[string]json.RawMessage{"u": json.RawMessage(`1`)},
	}
	tests := []struct {
		name         string
		give         schemas.Message
		wantPinned   bool
		wantTools    bool
		wantStripped schemas.Message
	}{
		{
			name: "plain user", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")},
			wantStripped: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")},
		},
		{
			name: "pin false", give: schemas.Message{Role: schemas.RoleUser, Meta: map[string]string{"pin": "yes"}},
			wantStripped: schemas.Message{Role: schemas.RoleUser},
		},
		{
			name:         "tool calls on a user do not count",
			give:         schemas.Message{Role: schemas.RoleUser, ToolCalls: full.ToolCalls},
			wantStripped: schemas.Message{Role: schemas.RoleUser, ToolCalls: full.ToolCalls},
		},
		{
			name: "everything", give: full, wantPinned: true, wantTools: true,
			wantStripped: schemas.Message{
				Role: full.Role, Content: full.Content, Name: "n", Reasoning: "r", ToolCalls: full.ToolCalls,
				Extra: full.Extra, Unknown: full.Unknown,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.Pinned(); got != tt.wantPinned {
				t.Errorf("Pinned() got %v; want %v", got, tt.wantPinned)
			}
			if got := tt.give.HasToolCalls(); got != tt.wantTools {
				t.Errorf("HasToolCalls() got %v; want %v", got, tt.wantTools)
			}
			before := tt.give
			if got := tt.give.StripMetadata(); !reflect.DeepEqual(got, tt.wantStripped) {
				t.Errorf("StripMetadata() got %+v; want %+v", got, tt.wantStripped)
			}
			if !reflect.DeepEqual(tt.give, before) {
				t.Errorf("StripMetadata changed its receiver")
			}
		})
	}
}

func TestRoleValid(t *testing.T) {
	tests := []struct {
		give schemas.Role
		want bool
	}{
		{schemas.RoleSystem, true}, {schemas.RoleUser, true}, {schemas.RoleAssistant, true},
		{schemas.RoleTool, true}, {"", false}, {"User", false}, {"function", false}, {"developer", false},
	}
	for _, tt := range tests {
		if got := tt.give.Valid(); got != tt.want {
			t.Errorf("Role(%q).Valid() got %v; want %v", tt.give, got, tt.want)
		}
	}
}

func TestContent(t *testing.T) {
	tests := []struct {
		name       string
		give       schemas.Content
		wantRaw    string
		wantNull   bool
		wantString bool
		wantParts  bool
		wantText   string
		wantTypes  []string
		wantErr    bool
	}{
		{name: "zero", give: schemas.Content{}, wantNull: true, wantRaw: ""},
		{name: "null", give: schemas.RawContent(json.RawMessage(` null `)), wantRaw: ` null `, wantNull: true},
		{name: "Text", give: schemas.Text("a\"b"), wantRaw: `"a\"b"`, wantString: true, wantText: `a"b`},
		{name: "empty Text", give: schemas.Text(""), wantRaw: `""`, wantString: true},
		{
			name:      "Parts",
			give:      schemas.Parts(json.RawMessage(`{"type":"text","text":"a"}`), json.RawMessage(`{"type":"image_url","image_url":{"url":"u"}}`), json.RawMessage(`{"type":"text","text":"b"}`)),
			wantRaw:   `[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"b"}]`,
			wantParts: true, wantText: "a\nb", wantTypes: []string{"text", "image_url", "text"},
		},
		{name: "no parts", give: schemas.Parts(), wantRaw: `[]`, wantParts: true, wantTypes: []string{}},
		{name: "raw string with space", give: schemas.RawContent(json.RawMessage(` "x"`)), wantRaw: ` "x"`, wantString: true, wantText: "x"},
		{name: "bad parts", give: schemas.RawContent(json.RawMessage(`[1]`)), wantRaw: `[1]`, wantParts: true, wantErr: true},
		{name: "number", give: schemas.RawContent(json.RawMessage(`7`)), wantRaw: `7`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.give
			if got := string(c.Raw()); got != tt.wantRaw {
				t.Errorf("Raw() got %q; want %q", got, tt.wantRaw)
			}
			if got := c.IsNull(); got != tt.wantNull {
				t.Errorf("IsNull() got %v; want %v", got, tt.wantNull)
			}
			if got := c.IsString(); got != tt.wantString {
				t.Errorf("IsString() got %v; want %v", got, tt.wantString)
			}
			if got := c.IsParts(); got != tt.wantParts {
				t.Errorf("IsParts() got %v; want %v", got, tt.wantParts)
			}
			if got := c.String(); got != tt.wantText {
				t.Errorf("String() got %q; want %q", got, tt.wantText)
			}
			parts, err := c.Parts()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parts() error %v; want error %v", err, tt.wantErr)
			}
			if tt.wantTypes != nil {
				types := []string{}
				for _, p := range parts {
					types = append(types, p.Type)
					if !json.Valid(p.Raw) {
						t.Errorf("part Raw %q is not JSON", p.Raw)
					}
				}
				if !reflect.DeepEqual(types, tt.wantTypes) {
					t.Errorf("Parts() types got %v; want %v", types, tt.wantTypes)
				}
			}
			b, err := c.MarshalJSON()
			if err != nil {
				t.Fatalf("MarshalJSON: %v", err)
			}
			want := tt.wantRaw
			if tt.wantNull {
				want = "null"
			}
			if string(b) != want {
				t.Errorf("MarshalJSON() got %s; want %s", b, want)
			}
			var back schemas.Content
			if err := back.UnmarshalJSON(b); err != nil {
				t.Fatalf("UnmarshalJSON: %v", err)
			}
			if string(back.Raw()) != string(b) {
				t.Errorf("UnmarshalJSON kept %s; want %s", back.Raw(), b)
			}
		})
	}
}

func TestRawContentCopies(t *testing.T) {
	raw := []byte(`"abc"`)
	c := schemas.RawContent(raw)
	raw[1] = 'X'
	if got := c.String(); got != "abc" {
		t.Fatalf("String() got %q after the caller changed its bytes; want %q", got, "abc")
	}
}

func TestEntryValid(t *testing.T) {
	tests := []struct {
		name string
		give schemas.Entry
		want bool
	}{
		{name: "ok", give: schemas.Entry{Seq: 1, Message: schemas.Message{Role: schemas.RoleUser}}, want: true},
		{name: "err", give: schemas.Entry{Seq: 1, Err: errors.New("bad")}, want: false},
	}
	for _, tt := range tests {
		if got := tt.give.Valid(); got != tt.want {
			t.Errorf("%s: Valid() got %v; want %v", tt.name, got, tt.want)
		}
	}
}
