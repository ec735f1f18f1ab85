package schemas_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

// messageCases are wire messages with the field their *ValidationError must name
// ("" for a valid message). The JSON Schema test runs them too.
var messageCases = []struct {
	name     string
	give     string
	wantErr  string // the field named by the error; "" when the message is valid
	wantRule string // a part of the rule the error states
	goOnly   bool   // a rule JSON Schema cannot state
}{
	// valid messages
	{name: "system", give: `{"role":"system","content":"be brief"}`},
	{name: "user", give: `{"role":"user","content":"hi"}`},
	{name: "assistant", give: `{"role":"assistant","content":"hello"}`},
	{name: "empty string content", give: `{"role":"user","content":""}`},
	{name: "tool result", give: `{"role":"tool","content":"ok","tool_call_id":"c1"}`},
	{name: "tool result with parts", give: `{"role":"tool","content":[{"type":"text","text":"ok"}],"tool_call_id":"c1"}`},
	{name: "assistant calls with null content", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
	{name: "assistant calls without content", give: `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
	{name: "parallel calls", give: `{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"g"}}]}`},
	{name: "all part types", give: `{"role":"user","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"u"}},{"type":"input_audio","input_audio":{"data":"d","format":"mp3"}},{"type":"file","file":{"file_id":"f"}},{"type":"refusal","refusal":"no"}]}`},
	{name: "unknown part type kept", give: `{"role":"user","content":[{"type":"x-custom","blob":1}]}`},
	{name: "empty parts", give: `{"role":"user","content":[]}`},
	{name: "extra object", give: `{"role":"assistant","content":"a","extra":{"thinking":[{"signature":"s"}]}}`},
	{name: "null optionals", give: `{"role":"user","content":"a","name":null,"tool_calls":null,"tool_call_id":null,"reasoning":null,"extra":null,"tokens":null,"usage":null,"context_generation":null,"meta":null}`},
	{name: "null meta value", give: `{"role":"user","content":"a","meta":{"pin":null,"k":"v"}}`},
	{name: "empty tool_call_id on user", give: `{"role":"user","content":"a","tool_call_id":""}`},
	{name: "empty tool_calls on user", give: `{"role":"user","content":"a","tool_calls":[]}`},
	{name: "metadata", give: `{"role":"assistant","content":"a","tokens":0,"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"cached_tokens":1},"context_generation":4,"meta":{"pin":"true"}}`},
	{name: "unknown fields", give: `{"role":"user","content":"a","x":{"y":[1]},"Role":"tool"}`},

	// role
	{name: "missing role", give: `{"content":"a"}`, wantErr: "role", wantRule: "is required"},
	{name: "null role", give: `{"role":null,"content":"a"}`, wantErr: "role", wantRule: "is required"},
	{name: "unknown role", give: `{"role":"robot","content":"a"}`, wantErr: "role", wantRule: `unknown role "robot"`},
	{name: "role in capitals", give: `{"role":"User","content":"a"}`, wantErr: "role", wantRule: "unknown role"},
	{name: "role not a string", give: `{"role":1,"content":"a"}`, wantErr: "role", wantRule: "must be a string"},

	// content
	{name: "user null content", give: `{"role":"user","content":null}`, wantErr: "content", wantRule: "null is allowed only beside tool_calls"},
	{name: "user without content", give: `{"role":"user"}`, wantErr: "content", wantRule: "is required"},
	{name: "assistant null content without calls", give: `{"role":"assistant","content":null}`, wantErr: "content", wantRule: "is required"},
	{name: "tool null content", give: `{"role":"tool","content":null,"tool_call_id":"c1"}`, wantErr: "content", wantRule: "is required"},
	{name: "content number", give: `{"role":"user","content":3}`, wantErr: "content", wantRule: "must be a string, an array"},
	{name: "content object", give: `{"role":"user","content":{"text":"a"}}`, wantErr: "content", wantRule: "must be a string, an array"},
	{name: "content true", give: `{"role":"user","content":true}`, wantErr: "content", wantRule: "must be a string, an array"},
	{name: "part not an object", give: `{"role":"user","content":["a"]}`, wantErr: "content[0]", wantRule: "must be a JSON object"},
	{name: "null part", give: `{"role":"user","content":[null]}`, wantErr: "content[0]", wantRule: "must be a JSON object"},
	{name: "part without type", give: `{"role":"user","content":[{"text":"a"}]}`, wantErr: "content[0].type", wantRule: "is required"},
	{name: "part with empty type", give: `{"role":"user","content":[{"type":"","text":"a"}]}`, wantErr: "content[0].type", wantRule: "is required"},
	{name: "part type not a string", give: `{"role":"user","content":[{"type":1}]}`, wantErr: "content[0].type", wantRule: "must be a string"},
	{name: "text part without text", give: `{"role":"user","content":[{"type":"text"}]}`, wantErr: "content[0].text", wantRule: `is required on a "text" part`},
	{name: "text part null text", give: `{"role":"user","content":[{"type":"text","text":null}]}`, wantErr: "content[0].text", wantRule: "is required"},
	{name: "text part number text", give: `{"role":"user","content":[{"type":"text","text":5}]}`, wantErr: "content[0].text", wantRule: "must be a string"},
	{name: "image part without image_url", give: `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}`, wantErr: "content[1].image_url", wantRule: `"image_url" part`},
	{name: "image part null image_url", give: `{"role":"user","content":[{"type":"image_url","image_url":null}]}`, wantErr: "content[0].image_url", wantRule: "is required"},
	{name: "audio part without payload", give: `{"role":"user","content":[{"type":"input_audio"}]}`, wantErr: "content[0].input_audio", wantRule: "is required"},
	{name: "file part without payload", give: `{"role":"user","content":[{"type":"file"}]}`, wantErr: "content[0].file", wantRule: "is required"},
	{name: "refusal part without payload", give: `{"role":"assistant","content":[{"type":"refusal"}]}`, wantErr: "content[0].refusal", wantRule: "is required"},

	// tool calls
	{name: "tool_calls on user", give: `{"role":"user","content":"a","tool_calls":[{"id":"c1","type":"function","function":{"name":"f"}}]}`, wantErr: "tool_calls", wantRule: "only assistant messages may call tools"},
	{name: "tool_calls on tool", give: `{"role":"tool","content":"a","tool_call_id":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"f"}}]}`, wantErr: "tool_calls", wantRule: "only assistant"},
	{name: "tool_calls on system", give: `{"role":"system","content":"a","tool_calls":[{"id":"c1","type":"function","function":{"name":"f"}}]}`, wantErr: "tool_calls", wantRule: "not system"},
	{name: "empty call id", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"","type":"function","function":{"name":"f"}}]}`, wantErr: "tool_calls[0].id", wantRule: "must not be empty"},
	{name: "missing call id", give: `{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f"}}]}`, wantErr: "tool_calls[0].id", wantRule: "must not be empty"},
	{name: "empty function name", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f"}},{"id":"b","type":"function","function":{"name":""}}]}`, wantErr: "tool_calls[1].function.name", wantRule: "must not be empty"},
	{name: "missing function", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function"}]}`, wantErr: "tool_calls[0].function.name", wantRule: "must not be empty"},
	{name: "wrong call type", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"fn","function":{"name":"f"}}]}`, wantErr: "tool_calls[0].type", wantRule: `must be "function"`},
	{name: "missing call type", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"a","function":{"name":"f"}}]}`, wantErr: "tool_calls[0].type", wantRule: `must be "function"`},
	{name: "duplicate call ids", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f"}},{"id":"a","type":"function","function":{"name":"g"}}]}`, wantErr: "tool_calls[1].id", wantRule: "used twice", goOnly: true},
	{name: "tool_calls not an array", give: `{"role":"assistant","content":null,"tool_calls":{"id":"a"}}`, wantErr: "tool_calls", wantRule: "must be an array"},
	{name: "arguments not a string", give: `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":{}}}]}`, wantErr: "tool_calls", wantRule: "must be an array"},

	// tool_call_id
	{name: "tool without tool_call_id", give: `{"role":"tool","content":"ok"}`, wantErr: "tool_call_id", wantRule: "is required on a tool message"},
	{name: "tool with empty tool_call_id", give: `{"role":"tool","content":"ok","tool_call_id":""}`, wantErr: "tool_call_id", wantRule: "is required"},
	{name: "tool_call_id on assistant", give: `{"role":"assistant","content":"a","tool_call_id":"c1"}`, wantErr: "tool_call_id", wantRule: "only allowed on a tool message"},
	{name: "tool_call_id on user", give: `{"role":"user","content":"a","tool_call_id":"c1"}`, wantErr: "tool_call_id", wantRule: "not user"},

	// extra
	{name: "extra string", give: `{"role":"user","content":"a","extra":"x"}`, wantErr: "extra", wantRule: "must be a JSON object"},
	{name: "extra array", give: `{"role":"user","content":"a","extra":[{}]}`, wantErr: "extra", wantRule: "must be a JSON object"},
	{name: "extra number", give: `{"role":"user","content":"a","extra":1}`, wantErr: "extra", wantRule: "must be a JSON object"},

	// metadata
	{name: "negative tokens", give: `{"role":"user","content":"a","tokens":-1}`, wantErr: "tokens", wantRule: "must not be negative"},
	{name: "fractional tokens", give: `{"role":"user","content":"a","tokens":1.5}`, wantErr: "tokens", wantRule: "must be an integer"},
	{name: "negative prompt tokens", give: `{"role":"user","content":"a","usage":{"prompt_tokens":-1,"completion_tokens":0}}`, wantErr: "usage", wantRule: "must not be negative"},
	{name: "negative completion tokens", give: `{"role":"user","content":"a","usage":{"prompt_tokens":1,"completion_tokens":-2}}`, wantErr: "usage", wantRule: "must not be negative"},
	{name: "negative total tokens", give: `{"role":"user","content":"a","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":-3}}`, wantErr: "usage", wantRule: "must not be negative"},
	{name: "negative cached tokens", give: `{"role":"user","content":"a","usage":{"prompt_tokens":1,"completion_tokens":2,"cached_tokens":-1}}`, wantErr: "usage", wantRule: "must not be negative"},
	{name: "usage not an object", give: `{"role":"user","content":"a","usage":[1]}`, wantErr: "usage", wantRule: "must be an object"},
	{name: "negative generation", give: `{"role":"user","content":"a","context_generation":-1}`, wantErr: "context_generation", wantRule: "non-negative integer"},
	{name: "meta not strings", give: `{"role":"user","content":"a","meta":{"pin":true}}`, wantErr: "meta", wantRule: "string values"},
	{name: "name not a string", give: `{"role":"user","content":"a","name":1}`, wantErr: "name", wantRule: "must be a string"},

	// content_ref (a stub of a message over the max payload)
	{name: "stub with content_ref", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"compaction-objects","name":"conv-1/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":25}}`, wantErr: "", wantRule: ""},
	{name: "null content_ref", give: `{"role":"user","content":"a","content_ref":null}`, wantErr: "", wantRule: ""},
	{name: "content_ref not an object", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":"x"}`, wantErr: "content_ref", wantRule: "must be an object"},
	{name: "content_ref without tokens", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}`, wantErr: "content_ref", wantRule: "tokens is required"},
	{name: "content_ref keys in capitals", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"BUCKET":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":1}}`, wantErr: "content_ref", wantRule: "bucket is required"},
	{name: "content_ref bucket with a dot", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"a.b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":1}}`, wantErr: "content_ref.bucket", wantRule: "[A-Za-z0-9_-]"},
	{name: "content_ref name without conversation", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":1}}`, wantErr: "content_ref.name", wantRule: "<conversation>/<sha256"},
	{name: "content_ref name with a wildcard", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"*/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":1}}`, wantErr: "content_ref.name", wantRule: "<conversation>/<sha256"},
	{name: "content_ref sha256 in capitals", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF","tokens":1}}`, wantErr: "content_ref.sha256", wantRule: "64 lower-case hex"},
	{name: "content_ref name of another sha256", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210","tokens":1}}`, wantErr: "content_ref.name", wantRule: "must end in", goOnly: true},
	{name: "content_ref empty size", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":0,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":1}}`, wantErr: "content_ref.size", wantRule: "at least 14"},
	{name: "content_ref negative tokens", give: `{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":{"bucket":"b","name":"c/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":100,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","tokens":-1}}`, wantErr: "content_ref.tokens", wantRule: "must not be negative"},

	// not a message
	{name: "array", give: `[{"role":"user","content":"a"}]`, wantErr: "message", wantRule: "must be a JSON object"},
	{name: "string", give: `"hi"`, wantErr: "message", wantRule: "must be a JSON object"},
	{name: "not JSON", give: `{"role":"user",`, wantErr: "message", wantRule: "must be a JSON object"},
	{name: "empty", give: ``, wantErr: "message", wantRule: "must be a JSON object"},
}

func TestDecodeMessageValidation(t *testing.T) {
	for _, tt := range messageCases {
		t.Run(tt.name, func(t *testing.T) {
			m, err := schemas.DecodeMessage([]byte(tt.give))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeMessage got error %v; want nil", err)
				}
				if err := m.Validate(); err != nil {
					t.Fatalf("Validate of a decoded message got %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeMessage got nil error; want one naming %s", tt.wantErr)
			}
			if !errors.Is(err, schemas.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) got false; want true", err)
			}
			var ve *schemas.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T %v; want a *ValidationError", err, err)
			}
			if ve.Field != tt.wantErr {
				t.Errorf("Field got %q; want %q (error %v)", ve.Field, tt.wantErr, err)
			}
			if !strings.Contains(ve.Rule, tt.wantRule) {
				t.Errorf("Rule got %q; want it to contain %q", ve.Rule, tt.wantRule)
			}
			if got, want := err.Error(), ve.Field+": "+ve.Rule; got != want {
				t.Errorf("Error() got %q; want %q", got, want)
			}
			if !reflect.DeepEqual(m, schemas.Message{}) {
				t.Errorf("DecodeMessage returned %+v with an error; want the zero Message", m)
			}
		})
	}
}

func TestValidateBuiltMessages(t *testing.T) {
	call := schemas.ToolCall{ID: "c", Type: "function", Function: schemas.FunctionCall{Name: "f"}}
	tests := []struct {
		name    string
		give    schemas.Message
		wantErr string
	}{
		{name: "text", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a")}},
		{name: "zero content beside calls", give: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{call}}},
		{name: "zero message", give: schemas.Message{}, wantErr: "role"},
		{name: "raw content not JSON", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.RawContent([]byte(`"abc`))}, wantErr: "content"},
		{name: "raw parts not JSON", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.RawContent([]byte(`[{`))}, wantErr: "content"},
		{name: "extra not JSON", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a"), Extra: []byte(`{"a":`)}, wantErr: "extra"},
		{name: "extra null", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a"), Extra: []byte(`null`)}, wantErr: "extra"},
		{name: "negative tokens", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a"), Tokens: -5}, wantErr: "tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			var ve *schemas.ValidationError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate got %v; want nil", err)
			case tt.wantErr != "" && !errors.As(err, &ve):
				t.Fatalf("Validate got %v; want a *ValidationError naming %s", err, tt.wantErr)
			case tt.wantErr != "" && ve.Field != tt.wantErr:
				t.Fatalf("Validate named %q; want %q", ve.Field, tt.wantErr)
			}
		})
	}
}

func TestValidateConversationID(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		wantRule string // "" when valid
	}{
		{name: "one char", give: "a"},
		{name: "all classes", give: "Conv_01-abc-XYZ"},
		{name: "uuid", give: "3f2b8c1e-9a7d-4e2f-8b1a-0c9d8e7f6a5b"},
		{name: "128 chars", give: strings.Repeat("x", 128)},
		{name: "empty", give: "", wantRule: "must not be empty (1-128 characters of [A-Za-z0-9_-])"},
		{name: "129 chars", give: strings.Repeat("x", 129), wantRule: "is 129 characters long; at most 128 of [A-Za-z0-9_-] are allowed"},
		{name: "dot", give: "a.b", wantRule: `character '.' at position 1 is not allowed; use only [A-Za-z0-9_-]`},
		{name: "space", give: "a b", wantRule: `character ' ' at position 1 is not allowed`},
		{name: "leading space", give: " a", wantRule: `character ' ' at position 0`},
		{name: "unicode", give: "ab\u00e9c", wantRule: `character 'é' at position 2 is not allowed; use only [A-Za-z0-9_-]`},
		{name: "unicode after unicode", give: "\u00e9\u00e8", wantRule: `character 'é' at position 0`},
		{name: "emoji", give: "x\U0001F600", wantRule: `character '😀' at position 1`},
		{name: "nats wildcard star", give: "a*", wantRule: `character '*'`},
		{name: "nats wildcard gt", give: ">", wantRule: `character '>'`},
		{name: "slash", give: "a/b", wantRule: `character '/'`},
		{name: "invalid utf-8", give: "a\xffb", wantRule: "is not allowed"},
		{name: "long with a dot names the character", give: strings.Repeat("x", 200) + ".", wantRule: "character '.' at position 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := schemas.ValidateConversationID(tt.give)
			if tt.wantRule == "" {
				if err != nil {
					t.Fatalf("got %v; want nil", err)
				}
				return
			}
			var ve *schemas.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, schemas.ErrInvalid) {
				t.Fatalf("got %v; want a *ValidationError", err)
			}
			if ve.Field != "conversation" {
				t.Errorf("Field got %q; want %q", ve.Field, "conversation")
			}
			if !strings.Contains(ve.Rule, tt.wantRule) {
				t.Errorf("Rule got %q; want it to contain %q", ve.Rule, tt.wantRule)
			}
		})
	}
}

func TestValidationErrorIs(t *testing.T) {
	err := error(&schemas.ValidationError{Field: "f", Rule: "r"})
	tests := []struct {
		name string
		give error
		want bool
	}{
		{name: "ErrInvalid", give: schemas.ErrInvalid, want: true},
		{name: "other", give: errors.New("invalid"), want: false},
	}
	for _, tt := range tests {
		if got := errors.Is(err, tt.give); got != tt.want {
			t.Errorf("%s: errors.Is got %v; want %v", tt.name, got, tt.want)
		}
	}
	if got, want := err.Error(), "f: r"; got != want {
		t.Errorf("Error() got %q; want %q", got, want)
	}
}
