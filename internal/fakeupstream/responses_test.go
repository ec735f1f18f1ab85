package fakeupstream

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func responsesClient(s *Server) *oai.Client {
	c := oai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return &c
}

var weatherFunction = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}

// openai-go's Responses client reads a non-streamed reply with text and a function
// call; the next request, which extends the first with the call and its output, is
// billed the shared prefix as cached, as the other wires are.
func TestResponsesNonStreamedToolCallAndCachedPrefix(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "checking", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		Reply{Text: "sunny"})
	c := responsesClient(s)
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("weather in Oslo?", responses.EasyInputMessageRoleUser)}
	resp, err := c.Responses.New(ctx(t), responses.ResponseNewParams{Model: "gpt-x", Instructions: oai.String("be brief"),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}, Tools: []responses.ToolUnionParam{weatherFunction}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "response" || resp.Status != "completed" || resp.OutputText() != "checking" || len(resp.Output) != 2 {
		t.Fatalf("response %s", resp.RawJSON())
	}
	call := resp.Output[1].AsFunctionCall()
	if resp.Output[1].Type != "function_call" || call.CallID != "call_1" || call.Name != "get_weather" || call.Arguments != `{"city":"Oslo"}` {
		t.Fatalf("call %+v", call)
	}
	if resp.Usage.InputTokensDetails.CachedTokens != 0 || resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 {
		t.Fatalf("first usage %+v", resp.Usage)
	}
	first := s.Agent()[0]
	if first.API != Responses || string(first.System) != `"be brief"` || len(first.Messages) != 1 || Text(first.Messages[0]) != "weather in Oslo?" ||
		first.Header.Get("Authorization") != "Bearer sk-test" || first.Stream {
		t.Fatalf("recorded %+v", first)
	}
	input = append(input, responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
		responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: oai.String(call.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: oai.String("12C")}}})
	resp, err = c.Responses.New(ctx(t), responses.ResponseNewParams{Model: "gpt-x", Instructions: oai.String("be brief"),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}, Tools: []responses.ToolUnionParam{weatherFunction}})
	if err != nil {
		t.Fatal(err)
	}
	second := s.Agent()[1]
	shared := commonPrefix(conversationBytes(first), conversationBytes(second))
	if shared != len(conversationBytes(first)) {
		t.Fatalf("shared prefix %d of %d bytes", shared, len(conversationBytes(first)))
	}
	if got := resp.Usage.InputTokensDetails.CachedTokens; got != int64(tokens(shared)) || resp.Usage.InputTokens != int64(tokens(len(conversationBytes(second)))) ||
		*second.Usage != (Usage{Input: int(resp.Usage.InputTokens), CacheRead: int(got), Output: int(resp.Usage.OutputTokens)}) {
		t.Fatalf("usage %+v, recorded %+v, want %d cached", resp.Usage, second.Usage, tokens(shared))
	}
	if len(second.Messages) != 3 || Text(second.Messages[2]) != "12C" || !EndsWithToolResult(second) || resp.OutputText() != "sunny" {
		t.Fatalf("second request %d items, reply %q", len(second.Messages), resp.OutputText())
	}
}

// openai-go's Responses stream puts the text and the function call's arguments back
// together from their deltas; the events come in the API's order with increasing
// sequence numbers, response.completed carries the whole response with its usage,
// and a request that asks for encrypted reasoning gets a reasoning item.
func TestResponsesStreamed(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "a fairly long reply, cut in pieces", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Bergen, Norway"}`}}})
	st := responsesClient(s).Responses.NewStreaming(ctx(t), responses.ResponseNewParams{Model: "gpt-x",
		Input:   responses.ResponseNewParamsInputUnion{OfString: oai.String("hi")},
		Tools:   []responses.ToolUnionParam{weatherFunction},
		Include: []responses.ResponseIncludable{"reasoning.encrypted_content"}})
	defer st.Close()
	var types []string
	var text, args string
	var done responses.Response
	seq := int64(0)
	for st.Next() {
		ev := st.Current()
		if ev.SequenceNumber != seq {
			t.Fatalf("event %s has sequence number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.function_call_arguments.delta":
			args += ev.Delta
		case "response.completed":
			done = ev.AsResponseCompleted().Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(types, " ")
	want := "response.created response.in_progress " +
		"response.output_item.added response.output_item.done " + // the reasoning item
		"response.output_item.added response.content_part.added response.output_text.delta"
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed") {
		t.Fatalf("events %s", got)
	}
	r := s.Agent()[0]
	if text != "a fairly long reply, cut in pieces" || args != `{"city":"Bergen, Norway"}` || done.Usage.InputTokens == 0 ||
		done.OutputText() != text || len(done.Output) != 3 || done.Output[0].Type != "reasoning" ||
		len(r.Signatures) != 1 || done.Output[0].EncryptedContent != r.Signatures[0] {
		t.Fatalf("text %q args %q completed %s, signatures %v", text, args, done.RawJSON(), r.Signatures)
	}
	if !r.Stream || len(r.Messages) != 1 || Text(r.Messages[0]) != "hi" || LastUserText(r) != "hi" {
		t.Fatalf("recorded %+v", r)
	}
}

// A scripted 429 reaches openai-go as an *Error with its status, and a raw client
// sees the retry-after header and OpenAI's error body; a stream that breaks is an
// error for openai-go; one that ends in the error event ends with error and
// response.failed.
func TestResponsesErrors(t *testing.T) {
	s := New(t)
	s.Push(Reply{Status: 429, RetryAfter: "7"})
	_, err := responsesClient(s).Responses.New(ctx(t), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("x")}})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type != "requests" {
		t.Fatalf("err %v", err)
	}
	s.Push(Reply{Status: 503, RetryAfter: "2"})
	resp, err := http.Post(s.URL()+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || !strings.Contains(string(body), `"type":"server_error"`) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}

	s.Push(Reply{Text: "one two three four five six", BreakAfter: 4})
	st := responsesClient(s).Responses.NewStreaming(ctx(t), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("x")}})
	for st.Next() {
	}
	if st.Err() == nil {
		t.Fatal("a broken stream ended cleanly")
	}
	st.Close()

	s.Push(Reply{Text: "one two three four five six", ErrorEventAfter: 4})
	st = responsesClient(s).Responses.NewStreaming(ctx(t), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("x")}})
	defer st.Close()
	var types []string
	var failed responses.Response
	for st.Next() {
		types = append(types, st.Current().Type)
		if st.Current().Type == "response.failed" {
			failed = st.Current().AsResponseFailed().Response
		}
	}
	if len(types) != 6 || types[4] != "error" || types[5] != "response.failed" || failed.Status != "failed" || failed.Error.Code != "server_error" {
		t.Fatalf("events %v, failed %s (err %v)", types, failed.RawJSON(), st.Err())
	}
}

// The input may be a string, role/content shorthand items, and the other items
// agents send (reasoning with encrypted_content, custom and local shell calls): each
// is recorded as sent, instructions as System; a bad input is a 400 in OpenAI's
// shape; /v1/responses/compact is not the fake's.
func TestResponsesInputItems(t *testing.T) {
	s := New(t)
	body := `{"model":"m","instructions":"sys FACT-9","input":[
		{"role":"developer","content":"dev"},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"hello FACT-1"}]},
		{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"ENC=="},
		{"type":"local_shell_call","id":"lsh_1","call_id":"c1","status":"completed","action":{"type":"exec","command":["ls"]}},
		{"type":"local_shell_call_output","call_id":"c1","output":"a.txt"}]}`
	resp, err := http.Post(s.URL()+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := s.Agent()[0]
	if resp.StatusCode != 200 || len(r.Messages) != 5 || string(r.System) != `"sys FACT-9"` || Text(r.Messages[1]) != "hello FACT-1" ||
		Text(r.Messages[4]) != "a.txt" || !EndsWithToolResult(r) || LastUserText(r) != "" ||
		!strings.Contains(string(r.Messages[2]), `"encrypted_content":"ENC=="`) {
		t.Fatalf("%d recorded %+v", resp.StatusCode, r)
	}
	for _, bad := range []string{`{"model":"m"}`, `{"model":"m","input":[]}`, `{"model":"m","input":7}`} {
		resp, err := http.Post(s.URL()+"/v1/responses", "application/json", strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Type, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "input") {
			t.Fatalf("%s: %d %+v", bad, resp.StatusCode, e)
		}
	}
	resp, err = http.Post(s.URL()+"/v1/responses/compact", "application/json", strings.NewReader(`{"model":"m","input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("/v1/responses/compact: %d", resp.StatusCode)
	}
}
