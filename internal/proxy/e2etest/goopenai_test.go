package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/internal/fakeupstream"
)

var goWeatherTool = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "get_weather", Description: "the weather in a city",
	Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}

// goTurn sends req with c (streamed when req.Stream) and returns the reply put back
// together, or the error the client saw.
func goTurn(t *testing.T, c *openai.Client, req openai.ChatCompletionRequest) (openai.ChatCompletionMessage, error) {
	t.Helper()
	return goTurnCtx(ctxFor(t, 60*time.Second), c, req)
}

// goTurnCtx is goTurn within ctx.
func goTurnCtx(ctx context.Context, c *openai.Client, req openai.ChatCompletionRequest) (openai.ChatCompletionMessage, error) {
	if !req.Stream {
		resp, err := c.CreateChatCompletion(ctx, req)
		if err != nil {
			return openai.ChatCompletionMessage{}, err
		}
		return resp.Choices[0].Message, nil
	}
	st, err := c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return openai.ChatCompletionMessage{}, err
	}
	defer st.Close()
	msg := openai.ChatCompletionMessage{Role: "assistant"}
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return msg, nil
		}
		if err != nil {
			return msg, err
		}
		for _, d := range ch.Choices {
			msg.Content += d.Delta.Content
			for _, tc := range d.Delta.ToolCalls {
				i := 0
				if tc.Index != nil {
					i = *tc.Index
				}
				for len(msg.ToolCalls) <= i {
					msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{Type: openai.ToolTypeFunction})
				}
				cur := &msg.ToolCalls[i]
				if tc.ID != "" {
					cur.ID = tc.ID
				}
				cur.Function.Name += tc.Function.Name
				cur.Function.Arguments += tc.Function.Arguments
			}
		}
	}
}

// go-openai through the proxy, streamed and not, with tools: the same checks as the
// official npm packages get (TestOpenAISDKThroughProxy), and upstream failures: a 429
// verbatim (status, body, retry-after), a broken stream and an error event as errors.
func TestGoOpenAIThroughProxy(t *testing.T) {
	s := startStack(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			goScenario(t, target{up: s.up, root: s.proxy, conv: fmt.Sprintf("e2e-go-openai-%v", stream), st: s}, stream)
		})
	}
	t.Run("errors", func(t *testing.T) {
		for _, c := range errorCases(openAI429) {
			t.Run(c.name, func(t *testing.T) {
				goErrorCase(t, target{up: s.up, root: s.proxy, conv: "e2e-go-openai-err-" + c.name, st: s}, c)
			})
		}
	})
	s.checkSummarizerKey(t)
}

// goScenario is openAIScenario with go-openai.
func goScenario(t *testing.T, tg target, stream bool) {
	client, tr := goClient(tg.root, openAIKey, tg.conv)
	msgs := []openai.ChatCompletionMessage{{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "What is the weather in Oslo? FACT-osl=12C"}}
	req := openai.ChatCompletionRequest{Model: "gpt-e2e", Messages: msgs, Tools: []openai.Tool{goWeatherTool},
		ToolChoice: "auto", Temperature: 0.3, MaxCompletionTokens: 200, User: "user-7", Stream: stream}
	if stream {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	turn := func(rep fakeupstream.Reply) (openai.ChatCompletionMessage, turnResult) {
		n := len(tg.up.Agent())
		tg.up.Script(rep)
		msg, err := goTurn(t, client, req)
		if err != nil {
			t.Fatalf("go-openai: %v", err)
		}
		got, _ := json.Marshal(msg)
		h := map[string]string{}
		for k := range tr.last {
			h[strings.ToLower(k)] = tr.last.Get(k)
		}
		return msg, turnResult{sent: tr.sent[len(tr.sent)-1], got: nodeResult{OK: true, Message: got, Headers: h}, up: lastAgent(t, tg.up, n)}
	}
	call := fakeupstream.ToolCall{ID: "call_w1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}
	reply, r1 := turn(fakeupstream.Reply{Text: "Let me check.", ToolCalls: []fakeupstream.ToolCall{call}})
	checkOpenAITurn(t, tg, r1, "Let me check.", []string{`call_w1 get_weather {"city":"Oslo"}`})
	req.Messages = append(msgs, reply, openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_w1", Content: "12C and clear"})
	_, r2 := turn(fakeupstream.Reply{Text: "It is 12C and clear in Oslo."})
	checkOpenAITurn(t, tg, r2, "It is 12C and clear in Oslo.", nil)
	if tg.st == nil {
		return
	}
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(r2.sent, &sent)
	want := append(flatOpenAI(t, sent.Messages), flat{Role: "assistant", Text: "It is 12C and clear in Oslo."})
	if got := flatStored(tg.st.waitStored(t, tg.conv, len(want))); !sameFlat(got, want) {
		t.Fatalf("CHAT holds\n%swant\n%s", flatLines(got), flatLines(want))
	}
}

// goErrorCase runs one failure with go-openai.
func goErrorCase(t *testing.T, tg target, c errorCase) {
	client, tr := goClient(tg.root, openAIKey, tg.conv)
	tg.up.Script(c.rep)
	_, err := goTurn(t, client, openai.ChatCompletionRequest{Model: "gpt-e2e", Stream: c.stream,
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hello " + c.name}}})
	if err == nil {
		t.Fatalf("%s: go-openai got a reply", c.name)
	}
	res := nodeResult{Kind: fmt.Sprintf("%T", err), Headers: map[string]string{}}
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		res.Status = apiErr.HTTPStatusCode
		res.Error, _ = json.Marshal(map[string]any{"message": apiErr.Message, "type": apiErr.Type, "param": apiErr.Param, "code": apiErr.Code})
		res.Kind = "APIError"
	case errors.As(err, &reqErr):
		res.Status = reqErr.HTTPStatusCode
	}
	for k := range tr.last {
		res.Headers[strings.ToLower(k)] = tr.last.Get(k)
	}
	t.Logf("%s: go-openai failed with %v", c.name, err)
	checkErrorCase(t, tg, c, openAI429, turnResult{got: res}, tg.conv, 1)
}

// Through the proxy with go-openai: a request without a conversation passes through
// untouched, marked so; a conversation written with one credential is refused to
// another (403), which never reaches the upstream; a path the proxy does not rewrite
// passes through.
func TestGoOpenAIPassthroughAndOwner(t *testing.T) {
	s := startStack(t)
	req := openai.ChatCompletionRequest{Model: "gpt-e2e", Messages: []openai.ChatCompletionMessage{
		{Role: "system", Content: "You are terse."}, {Role: "user", Content: "no conversation named"}}}

	client, tr := goClient(s.proxy, openAIKey, "")
	n := len(s.up.Agent())
	if _, err := goTurn(t, client, req); err != nil {
		t.Fatal(err)
	}
	if got, sent := lastAgent(t, s.up, n).Body, tr.sent[len(tr.sent)-1]; !bytes.Equal(got, sent) {
		t.Fatalf("passed through as\n%s\nthe client sent\n%s", got, sent)
	}
	if st, why := tr.last.Get("X-Compactor-Status"), tr.last.Get("X-Compactor-Passthrough"); st != "passthrough" || why != "no-conversation-id" {
		t.Fatalf("X-Compactor-Status %q, X-Compactor-Passthrough %q", st, why)
	}

	owner, _ := goClient(s.proxy, openAIKey, "e2e-owned")
	if _, err := goTurn(t, owner, req); err != nil {
		t.Fatal(err)
	}
	other, _ := goClient(s.proxy, "sk-another-client", "e2e-owned")
	n = len(s.up.Agent())
	_, err := goTurn(t, other, req)
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 403 {
		t.Fatalf("another credential on the conversation got %v", err)
	}
	if len(s.up.Agent()) != n {
		t.Fatal("the refused request reached the upstream")
	}
	for _, r := range s.up.Requests() {
		if strings.Contains(r.Header.Get("Authorization"), "sk-another-client") {
			t.Fatalf("the upstream got the other client's credential on %s", r.Path)
		}
	}

	models, err := client.ListModels(ctxFor(t, 10*time.Second))
	if err != nil || len(models.Models) != 1 || models.Models[0].ID != "fake-model" {
		t.Fatalf("models %+v: %v", models, err)
	}
}
