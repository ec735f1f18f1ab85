// Package summary is what a summarizer is given and what it returns, and the one-method
// interface every summarizer implements (the LLM one in summarizer/llm, the extractive
// fallback in summarizer/extractive). It links no NATS: summarizers know nothing of
// streams, queues or workers.
package summary

import (
	"context"
	"errors"

	"github.com/compactor/compactor/schemas"
)

// Input is everything one summarization sees.
type Input struct {
	Conversation string
	// PreviousSummary is the summary the new one replaces and must carry forward ("" on
	// the first compaction).
	PreviousSummary string
	// SystemPrompt is the agent's own system prompt, given as context so the summary
	// keeps the agent's identity; it is never summarized away (it stays pinned).
	SystemPrompt string
	// Pinned are the messages the agent's reader shows ahead of the summary and that
	// stay there (its system prompt first, then pinned and kept messages), in order and
	// exactly as the reader shows them: with overrides applied, without Compactor's
	// metadata. With SummaryMessage and the oldest Messages they are the start of the
	// agent's own request, which an LLM summarizer sends first so a prefix cache hits.
	// Summarizers that do not reproduce the prefix read SystemPrompt instead.
	Pinned []schemas.Message
	// SummaryMessage is PreviousSummary as readers render it
	// (schemas/assemble.SummaryMessage); nil when there is no previous summary, or when
	// the request does not carry it (a chunk of a larger input).
	SummaryMessage *schemas.Message
	// Messages are the newly covered messages, in order, already pre-trimmed.
	Messages []schemas.Message
	// Instructions are extra wishes from the request or the policy; they are data
	// added to the default prompt and never replace it.
	Instructions string
	// MaxSummaryTokens caps the summary's length.
	MaxSummaryTokens int
}

// Output is one summary.
type Output struct {
	Summary string
	// Model names what wrote the summary ("extractive" for the fallback).
	Model string
	// PromptHash is the first 8 hex digits of the SHA-256 of the system prompt used.
	PromptHash string
	Usage      *schemas.Usage
	// Fallback is true when no LLM wrote the summary.
	Fallback bool
}

// Summarizer writes a summary. *llm.Summarizer and *extractive.Summarizer implement it.
type Summarizer interface {
	Summarize(ctx context.Context, in Input) (Output, error)
}

// ErrContextLength is what a Summarizer returns (wrapped) when its model refused the
// input as longer than its context window. The worker then sends less.
var ErrContextLength = errors.New("summarizer context length exceeded")

// chargeKey is the context key of ChargeTo's tag.
type chargeKey struct{}

// ChargeTo returns ctx carrying tag, the quota reservation an LLM call made with it is
// charged to: a summarizer's usage hook reads it (ChargeOf), so what a call spent comes
// out of the reservation of the compaction that made it, not of another running beside.
func ChargeTo(ctx context.Context, tag string) context.Context {
	if tag == "" {
		return ctx
	}
	return context.WithValue(ctx, chargeKey{}, tag)
}

// ChargeOf is the tag ChargeTo put on ctx ("": none).
func ChargeOf(ctx context.Context) string {
	tag, _ := ctx.Value(chargeKey{}).(string)
	return tag
}
