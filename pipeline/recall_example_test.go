package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// An agent's loop with the recall tool: it sends the context (summary + tail) and the
// tool to its model; when the model calls recall, the agent answers with the raw
// messages (Client.AnswerRecall), publishes both to the conversation, and asks again.
// The model here is a fake OpenAI server that calls recall once, then answers with
// what the tool message held; the client is the real go-openai one. The recall finds
// the question that names db.yaml (seq 5, newest first) and the tool round that read
// it (seq 2 and its result 3, whole and in order).
func ExampleClient_AnswerRecall() {
	dir, _ := os.MkdirTemp("", "compactor-recall-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	ctx := context.Background()
	c, err := pipeline.New(ctx, nc, pipeline.WithProvision())
	if err != nil {
		fmt.Println(err)
		return
	}

	// Earlier in the conversation (long since summarized in a real one): a tool round.
	const conv = "agent-7"
	for _, m := range []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("Check the database config.")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "call-1", Type: "function",
			Function: schemas.FunctionCall{Name: "read_file", Arguments: `{"path":"db.yaml"}`}}}},
		{Role: schemas.RoleTool, ToolCallID: "call-1", Content: schemas.Text("host: db.internal\nport: 6432")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("The config looks fine.")},
		{Role: schemas.RoleUser, Content: schemas.Text("Which port did db.yaml say, exactly?")},
	} {
		if _, err := c.Publish(ctx, conv, m); err != nil {
			fmt.Println(err)
			return
		}
	}

	llm := httptest.NewServer(http.HandlerFunc(fakeRecallingModel))
	defer llm.Close()
	cfg := openai.DefaultConfig("test-key")
	cfg.BaseURL = llm.URL + "/v1"
	model := openai.NewClientWithConfig(cfg)

	var recall openai.Tool
	if err := json.Unmarshal(schemas.RecallToolJSON, &recall); err != nil {
		fmt.Println(err)
		return
	}
	for turn := 0; turn < 4; turn++ {
		cx, err := c.Context(ctx, conv)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp, err := model.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
			Model: "any", Messages: toOpenAI(cx.Messages), Tools: []openai.Tool{recall}})
		if err != nil {
			fmt.Println(err)
			return
		}
		reply := resp.Choices[0].Message
		if len(reply.ToolCalls) == 0 {
			fmt.Println("model:", reply.Content)
			return
		}
		// The model's tool calls, then one result each, go into the conversation.
		call := schemas.Message{Role: schemas.RoleAssistant}
		for _, tc := range reply.ToolCalls {
			call.ToolCalls = append(call.ToolCalls, schemas.ToolCall{ID: tc.ID, Type: "function",
				Function: schemas.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		c.Publish(ctx, conv, call)
		for _, tc := range reply.ToolCalls {
			fmt.Printf("model calls %s(%s)\n", tc.Function.Name, tc.Function.Arguments)
			answer := `{"error":"unknown tool"}`
			if tc.Function.Name == schemas.RecallToolName {
				if answer, err = c.AnswerRecall(ctx, conv, tc.Function.Arguments); err != nil {
					fmt.Println(err)
					return
				}
			}
			c.Publish(ctx, conv, schemas.Message{Role: schemas.RoleTool, ToolCallID: tc.ID, Content: schemas.Text(answer)})
		}
	}
	// Output:
	// model calls recall({"query":"db.yaml"})
	// model: db.yaml said "port: 6432" (recalled seqs [5 2 3])
}

// toOpenAI converts messages for go-openai (text content only, enough for this example).
func toOpenAI(ms []schemas.Message) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(ms))
	for _, m := range ms {
		o := openai.ChatCompletionMessage{Role: string(m.Role), Content: m.Content.String(), ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			o.ToolCalls = append(o.ToolCalls, openai.ToolCall{ID: tc.ID, Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		out = append(out, o)
	}
	return out
}

// fakeRecallingModel is the example's model: without a recall result in its input it
// calls recall; with one, it answers from the recalled messages.
func fakeRecallingModel(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatCompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Tools) != 1 || req.Tools[0].Function.Name != "recall" {
		http.Error(w, "want messages and the recall tool", http.StatusBadRequest)
		return
	}
	msg := openai.ChatCompletionMessage{Role: "assistant"}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "tool" {
		msg.ToolCalls = []openai.ToolCall{{ID: "call-2", Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: "recall", Arguments: `{"query":"db.yaml"}`}}}
	} else {
		var got schemas.RecallResponse
		if err := json.Unmarshal([]byte(last.Content), &got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		port, seqs := "", []uint64{}
		for _, m := range got.Messages {
			seqs = append(seqs, m.Seq)
			for _, line := range strings.Split(m.Message.Content.String(), "\n") {
				if strings.HasPrefix(line, "port:") {
					port = line
				}
			}
		}
		msg.Content = fmt.Sprintf("db.yaml said %q (recalled seqs %v)", port, seqs)
	}
	json.NewEncoder(w).Encode(openai.ChatCompletionResponse{ID: "x", Object: "chat.completion", Model: req.Model,
		Choices: []openai.ChatCompletionChoice{{Message: msg, FinishReason: "stop"}}})
}

func ExampleClient_Recall() {
	dir, _ := os.MkdirTemp("", "compactor-recall")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	ctx := context.Background()
	c, err := pipeline.New(ctx, nc, pipeline.WithProvision())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, text := range []string{"deploy to staging", "tests pass", "Deploy to production", "done"} {
		c.Publish(ctx, "ops-1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)})
	}

	r, err := c.Recall(ctx, "ops-1", pipeline.Query("deploy"), pipeline.MaxTokens(1000))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range r.Messages {
		fmt.Println(m.Seq, m.Message.Content.String())
	}
	fmt.Printf("matched %d, scanned %d to %d\n", r.Matched, r.ScannedFromSeq, r.ScannedToSeq)
	// Output:
	// 3 Deploy to production
	// 1 deploy to staging
	// matched 2, scanned 1 to 4
}
