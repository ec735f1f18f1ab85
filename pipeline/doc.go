// Package pipeline is the Go client of Compactor: what a service imports to publish its
// chat events, read the compacted context it sends its model, and ask for a compaction.
//
// It pulls in neither the LLM client nor the embedded NATS server. Services in other
// languages do the same with any NATS client; the README shows the reader algorithm
// step by step.
//
//	c, _ := pipeline.New(ctx, nc)
//	seq, _ := c.Publish(ctx, "conv-1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")})
//	cx, _ := c.Context(ctx, "conv-1", pipeline.AtLeastSeq(seq))
//	// send cx.Messages to the model
//	r, _ := c.Compact(ctx, "conv-1", pipeline.Instructions("keep every path"), pipeline.Wait(30*time.Second))
//	// r.Status: queued, busy, completed, declined or failed; r.Result: the new value
//
// Compact (and RequestCompaction) ask the compactor service, compactor.compact, which
// any `compactor serve` process runs; ErrNoService says when none answers. Forget asks
// it (compactor.forget) to delete a conversation everywhere, for good.
//
// Recall reads raw messages back from CHAT (by text and/or sequence range, newest first
// within a budget, tool rounds whole), what an agent's model asks for with the recall
// tool (schemas.RecallToolJSON); AnswerRecall answers such a tool call.
package pipeline
