package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

// recallToolParameters decodes recall-tool.json and checks its shape: an OpenAI
// function tool whose parameters are an object schema.
func recallToolParameters(t *testing.T) map[string]any {
	t.Helper()
	var tool struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	}
	dec := json.NewDecoder(bytes.NewReader(schemas.RecallToolJSON))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tool); err != nil {
		t.Fatalf("recall-tool.json: %v", err)
	}
	f := tool.Function
	if tool.Type != "function" || f.Name != schemas.RecallToolName || len(f.Description) < 100 || f.Parameters["type"] != "object" ||
		f.Parameters["additionalProperties"] != false {
		t.Fatalf("recall-tool.json: type %q, name %q, a %d-byte description, parameters %v; want a function tool "+
			"named recall, described, with an object schema that refuses unknown arguments", tool.Type, f.Name, len(f.Description), f.Parameters)
	}
	return f.Parameters
}

// The tool's parameters are exactly the fields of a recall request but the
// conversation, and the schema and DecodeRecallArguments agree on what they accept.
func TestRecallToolParametersAreARecallRequest(t *testing.T) {
	params := recallToolParameters(t)
	var got []string
	for k := range params["properties"].(map[string]any) {
		got = append(got, k)
	}
	sort.Strings(got)
	all, _ := jsonFields(reflect.TypeFor[schemas.RecallRequest]())
	want := slices.DeleteFunc(all, func(s string) bool { return s == "conversation" })
	if !slices.Equal(got, want) {
		t.Fatalf("tool parameters %v; want the request's fields but conversation: %v", got, want)
	}
	v := newValidator(t)
	v.docs["recall-tool.json#parameters"] = params
	for _, tt := range []struct {
		name, give string
		want       schemas.RecallRequest // Conversation "c"
		wantField  string                // "" = valid
		goOnly     bool                  // the schema cannot see it
	}{
		{name: "no arguments", give: `{}`, want: schemas.RecallRequest{}},
		{name: "empty arguments text", give: ``, want: schemas.RecallRequest{}, goOnly: true},
		{name: "all", give: `{"query":"main.go","from_seq":3,"to_seq":90,"max_tokens":500}`,
			want: schemas.RecallRequest{Query: "main.go", FromSeq: 3, ToSeq: 90, MaxTokens: 500}},
		{name: "unknown argument", give: `{"regex":"x"}`, wantField: "arguments"},
		{name: "conversation is not an argument", give: `{"conversation":"other"}`, wantField: "arguments"},
		{name: "negative sequence", give: `{"from_seq":-1}`, wantField: "arguments"},
		{name: "sequence as text", give: `{"to_seq":"9"}`, wantField: "arguments"},
		{name: "budget too large", give: `{"max_tokens":1000001}`, wantField: "max_tokens"},
		{name: "range backwards", give: `{"from_seq":9,"to_seq":3}`, wantField: "from_seq", goOnly: true},
		{name: "long query", give: `{"query":"` + strings.Repeat("q", 1025) + `"}`, wantField: "query", goOnly: true},
		{name: "not an object", give: `["x"]`, wantField: "arguments"},
		{name: "trailing data", give: `{} {}`, wantField: "arguments", goOnly: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemas.DecodeRecallArguments("c", tt.give)
			if tt.wantField == "" {
				tt.want.Conversation = "c"
				if err != nil || got != tt.want {
					t.Fatalf("DecodeRecallArguments = %+v, %v; want %+v", got, err, tt.want)
				}
			} else {
				var ve *schemas.ValidationError
				if !errors.As(err, &ve) || ve.Field != tt.wantField {
					t.Fatalf("DecodeRecallArguments error = %v; want one on %s", err, tt.wantField)
				}
			}
			if tt.goOnly {
				return
			}
			if serr := v.validateJSON("recall-tool.json#parameters", []byte(tt.give)); (serr != nil) != (tt.wantField != "") {
				t.Fatalf("schema error %v; want an error: %v", serr, tt.wantField != "")
			}
		})
	}
	if _, err := schemas.DecodeRecallArguments("a.b", `{}`); !errors.Is(err, schemas.ErrInvalid) {
		t.Fatalf("a bad conversation id: %v", err)
	}
}

// A recalled message is the message's own object with seq first; it reads back.
func TestRecalledMessageJSON(t *testing.T) {
	v := newValidator(t)
	m, err := schemas.DecodeMessage([]byte(`{"role":"tool","content":[{"type":"text","text":"x"}],"tool_call_id":"t1","seq":"mine","zeta":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(schemas.RecalledMessage{Seq: 42, Message: m, Tokens: 9})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"seq":42,"role":"tool","content":[{"type":"text","text":"x"}],"tool_call_id":"t1","zeta":1}`; string(b) != want {
		t.Fatalf("encoded %s; want %s", b, want)
	}
	resp := schemas.RecallResponse{Conversation: "c", Messages: []schemas.RecalledMessage{{Seq: 42, Message: m}}, Matched: 1, Returned: 1, MaxTokens: 10}
	rb, _ := json.Marshal(resp)
	if err := v.validateJSON("service-recall-response.v1.json", rb); err != nil {
		t.Fatalf("schema refuses %s: %v", rb, err)
	}
	var back schemas.RecalledMessage
	if err := json.Unmarshal(b, &back); err != nil || back.Seq != 42 || back.Message.ToolCallID != "t1" || len(back.Message.Unknown) != 1 {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	for _, bad := range []string{`{"role":"user","content":"x"}`, `{"seq":-1,"role":"user","content":"x"}`, `{"seq":1,"role":"nobody","content":"x"}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("decoded %s; want an error", bad)
		}
		if err := v.validateJSON("service-recall-response.v1.json", fmt.Appendf(nil, `{"conversation":"c","messages":[%s],"matched":1,"returned":1,"tokens":1,"max_tokens":1,"cut_by_budget":false,"scanned_from_seq":1,"scanned_to_seq":1,"scan_complete":true}`, bad)); err == nil {
			t.Errorf("schema accepts %s", bad)
		}
	}
}

func ExampleDecodeRecallArguments() {
	// The arguments of a model's tool call named schemas.RecallToolName.
	req, err := schemas.DecodeRecallArguments("support-42", `{"query":"deploy.yaml","max_tokens":800}`)
	fmt.Printf("%+v %v\n", req, err)
	_, err = schemas.DecodeRecallArguments("support-42", `{"from_seq":90,"to_seq":12}`)
	fmt.Println(err)
	// Output:
	// {Conversation:support-42 Query:deploy.yaml FromSeq:0 ToSeq:0 MaxTokens:800} <nil>
	// from_seq: must not be after to_seq (90 > 12)
}
