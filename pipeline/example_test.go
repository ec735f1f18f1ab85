package pipeline_test

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/formats"
)

func Example() {
	dir, _ := os.MkdirTemp("", "compactor-example")
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
	c.Publish(ctx, "conv-1", schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are a helpful agent.")})
	seq, _ := c.Publish(ctx, "conv-1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("What is 2+2?")})

	cx, _ := c.Context(ctx, "conv-1", pipeline.AtLeastSeq(seq))
	for _, m := range cx.Messages {
		fmt.Printf("%s: %s\n", m.Role, m.Content.String())
	}

	_, err = c.Publish(ctx, "conv 1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("x")})
	fmt.Println(err)
	// Output:
	// system: You are a helpful agent.
	// user: What is 2+2?
	// conversation: character ' ' at position 4 is not allowed; use only [A-Za-z0-9_-] (1-128 characters)
}

func ExampleClient_Render() {
	dir, _ := os.MkdirTemp("", "compactor-example")
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
	c.Publish(ctx, "conv-2", schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are a helpful agent.")})
	seq, _ := c.Publish(ctx, "conv-2", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("What is 2+2?")})

	req, err := c.Render(ctx, "conv-2", formats.Gemini, pipeline.AtLeastSeq(seq))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(req.JSON))
	// Output:
	// {"systemInstruction":{"parts":[{"text":"You are a helpful agent."}]},"contents":[{"role":"user","parts":[{"text":"What is 2+2?"}]}]}
}

// PublishBatch publishes many messages, of one conversation or many, with up to a
// window of them in flight; each conversation's messages are stored in their order.
// With a MsgID on each message the whole batch may be published again after an error:
// what was stored the first time is not stored twice.
func ExampleClient_PublishBatch() {
	dir, _ := os.MkdirTemp("", "compactor-example")
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
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "call-1", Type: "function", Function: schemas.FunctionCall{Name: "add", Arguments: `{"a":2,"b":2}`}}}}
	batch := []pipeline.BatchMsg{
		{Conv: "conv-3", MsgID: "conv-3-1", Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("What is 2+2?")}},
		{Conv: "conv-4", MsgID: "conv-4-1", Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Hi!")}},
		{Conv: "conv-3", MsgID: "conv-3-2", Message: call},
		{Conv: "conv-3", MsgID: "conv-3-3", Message: schemas.Message{Role: schemas.RoleTool, ToolCallID: "call-1", Content: schemas.Text("4")}},
		{Conv: "conv-3", MsgID: "conv-3-4", Message: schemas.Message{Role: schemas.RoleUser}}, // no content: refused
	}
	seqs, err := c.PublishBatch(ctx, batch, pipeline.BatchOptions{Window: 100})
	fmt.Println(seqs, err)

	batch[4].Message.Content = schemas.Text("Thanks.")
	seqs, err = c.PublishBatch(ctx, batch, pipeline.BatchOptions{Window: 100})
	fmt.Println(seqs, err)
	// Output:
	// [1 2 3 4 0] batch message 4 (conversation conv-3): content: is required on a user message (null is allowed only beside tool_calls)
	// [1 2 3 4 5] <nil>
}
