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
