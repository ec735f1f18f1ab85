// The responses wire against the OpenAI Go SDK
// (github.com/openai/openai-go/v3): a request the SDK builds parses and builds back; a
// response and the wire's stream error read as the SDK reads them.
package responses_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactor/compactor/internal/proxy/wire"
	wresponses "github.com/compactor/compactor/internal/proxy/wire/responses"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
)

func sdkRequest(t *testing.T) []byte {
	t.Helper()
	items := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfInputMessage(responses.ResponseInputMessageContentListParam{
			{OfInputText: &responses.ResponseInputTextParam{Text: "<permissions>"}}}, "developer"),
		responses.ResponseInputItemParamOfMessage("list the files", responses.EasyInputMessageRoleUser),
		{OfReasoning: &responses.ResponseReasoningItemParam{ID: "rs_1", EncryptedContent: openai.String("gAAAA-opaque"),
			Summary: []responses.ResponseReasoningItemSummaryParam{{Text: "**Listing**"}}}},
		responses.ResponseInputItemParamOfFunctionCall(`{"cmd":"ls"}`, "call_1", "exec_command"),
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String("call_1"),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("a.go\n")}}},
		responses.ResponseInputItemParamOfOutputMessage([]responses.ResponseOutputMessageContentUnionParam{
			{OfOutputText: &responses.ResponseOutputTextParam{Text: "There is a.go.", Annotations: []responses.ResponseOutputTextAnnotationUnionParam{}}}},
			"msg_1", responses.ResponseOutputMessageStatusCompleted),
		{OfCustomToolCall: &responses.ResponseCustomToolCallParam{CallID: "call_2", Name: "apply_patch", Input: "*** Begin Patch\n*** End Patch"}},
		{OfCustomToolCallOutput: &responses.ResponseCustomToolCallOutputParam{CallID: "call_2",
			Output: responses.ResponseCustomToolCallOutputOutputUnionParam{OfString: openai.String("Done!")}}},
		{OfLocalShellCall: &responses.ResponseInputItemLocalShellCallParam{ID: "lsh_1", CallID: "call_3", Status: "completed",
			Action: responses.ResponseInputItemLocalShellCallActionParam{Command: []string{"ls"}, Env: map[string]string{}}}},
		{OfLocalShellCallOutput: &responses.ResponseInputItemLocalShellCallOutputParam{ID: "call_3", Output: `{"output":"a.go"}`}},
		{OfItemReference: &responses.ResponseInputItemItemReferenceParam{ID: "msg_0"}},
		responses.ResponseInputItemParamOfMessage("thanks", responses.EasyInputMessageRoleUser),
	}
	p := responses.ResponseNewParams{
		Model:           "gpt-5.1-codex",
		Instructions:    openai.String("You are Codex."),
		Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: items},
		Store:           openai.Bool(false),
		MaxOutputTokens: openai.Int(1024),
		PromptCacheKey:  openai.String("session-1"),
		Include:         []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSDKRequest(t *testing.T) {
	body := sdkRequest(t)
	w := wresponses.Responses()
	req, err := w.Parse(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if req.Model != "gpt-5.1-codex" || req.MaxOutput != 1024 {
		t.Fatalf("model %q max %d", req.Model, req.MaxOutput)
	}
	roles := []schemas.Role{"system", "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant", "user"}
	if len(req.Messages) != len(roles) {
		t.Fatalf("%d messages: %s", len(req.Messages), body)
	}
	for i, r := range roles {
		if req.Messages[i].Role != r {
			t.Fatalf("message %d: %s", i, req.Messages[i].Role)
		}
	}
	// From the messages alone: the same request, which parses to the same messages.
	out, err := w.Build(&wire.Request{Body: body}, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !wiretest.JSONEqual(t, out, body) {
		t.Fatalf("built\n%s\nsent\n%s", out, body)
	}
	again, err := w.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range req.Messages {
		a, _ := req.Messages[i].Encode()
		b, _ := again.Messages[i].Encode()
		if !bytes.Equal(a, b) {
			t.Fatalf("message %d: %s, then %s", i, a, b)
		}
	}
}

const sdkResponse = `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"gpt-5.1-codex","output":[` +
	`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Answering**"}],"encrypted_content":"gAAAA"},` +
	`{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hello ","annotations":[]},{"type":"output_text","text":"there.","annotations":[]}]},` +
	`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}","status":"completed"}],` +
	`"usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":64},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":120}}`

// The wire reads a response as the SDK does: the text, the calls and the usage.
func TestSDKResponse(t *testing.T) {
	var r responses.Response
	if err := json.Unmarshal([]byte(sdkResponse), &r); err != nil {
		t.Fatal(err)
	}
	m, u, err := wresponses.Responses().Reply([]byte(sdkResponse))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := m.Content.Parts()
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, p := range parts {
		text += p.Text
	}
	if text != r.OutputText() {
		t.Fatalf("text %q, the SDK's %q", text, r.OutputText())
	}
	var calls []schemas.ToolCall
	for _, o := range r.Output {
		if o.Type == "function_call" {
			calls = append(calls, schemas.ToolCall{ID: o.CallID, Type: "function", Function: schemas.FunctionCall{Name: o.Name, Arguments: o.Arguments.OfString}})
		}
	}
	if !reflect.DeepEqual(m.ToolCalls, calls) {
		t.Fatalf("calls %+v, the SDK's %+v", m.ToolCalls, calls)
	}
	if *u != (wire.Usage{Input: int(r.Usage.InputTokens), Output: int(r.Usage.OutputTokens), CacheRead: int(r.Usage.InputTokensDetails.CachedTokens)}) {
		t.Fatalf("usage %+v, the SDK's %+v", u, r.Usage)
	}
}

// The SDK reads the wire's stream error as an error event, then a failed response
// with its message.
func TestSDKStreamError(t *testing.T) {
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(wresponses.Responses().StreamError("the upstream went away")))}
	s := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
	var types []string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "error":
			if e := ev.AsError(); e.Message != "the upstream went away" {
				t.Fatalf("error event %+v", e)
			}
		case "response.failed":
			f := ev.AsResponseFailed()
			if f.Response.Status != "failed" || f.Response.Error.Message != "the upstream went away" {
				t.Fatalf("response.failed %+v", f.Response)
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(types, []string{"error", "response.failed"}) {
		t.Fatalf("events %v", types)
	}
}
