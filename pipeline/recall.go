package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compactor/compactor/schemas"
)

// Query makes Recall return only the messages that hold text, ignoring case (in their
// content, name, reasoning, tool call ids, tool calls' names and arguments). A match in
// a tool round returns the whole round. Context ignores it.
func Query(text string) ContextOption { return func(o *contextOptions) { o.query = text } }

// FromSeq makes Recall search from CHAT sequence n on (inclusive). Context ignores it.
func FromSeq(n uint64) ContextOption { return func(o *contextOptions) { o.fromSeq = n } }

// ToSeq makes Recall search up to CHAT sequence n (inclusive). Context ignores it.
func ToSeq(n uint64) ContextOption { return func(o *contextOptions) { o.toSeq = n } }

// ScanLimit bounds how many of the conversation's messages Recall reads, newest first
// (default jetstream.DefaultRecallScanLimit). Context ignores it.
func ScanLimit(n int) ContextOption { return func(o *contextOptions) { o.scanLimit = n } }

// Recalled is the answer of Recall.
type Recalled = schemas.RecallResponse

// Recall returns raw messages of a conversation, each with its CHAT sequence: those
// that match Query and lie in [FromSeq, ToSeq], newest first within MaxTokens (0 or
// none: schemas.DefaultRecallMaxTokens) and jetstream.DefaultRecallMaxBytes of JSON, a
// tool round whole or not at all. It is what the
// recall tool (schemas.RecallTool) answers a model with; the summary message tells the
// model which sequences it covers.
//
// It reads CHAT directly, like Context, so any role that may read a conversation's
// messages may recall without the compactor service; in service mode (ViaService) it
// asks compactor.recall, whose answer is checked. It reads at most ScanLimit
// messages, in bounded windows newest to oldest; Recalled.ScanComplete says whether it
// reached FromSeq (or the first message). The other ContextOptions (AtLeastSeq, Raw,
// WaitPending) do not apply: recalled messages are always stripped of Compactor's
// metadata. An invalid option is a *schemas.ValidationError naming it.
func (c *Client) Recall(ctx context.Context, conv string, opts ...ContextOption) (_ *Recalled, err error) {
	ctx, done := c.readable(ctx, c.conversationStreams()...)
	defer func() { err = done(err) }()
	var o contextOptions
	for _, opt := range opts {
		opt(&o)
	}
	req := schemas.RecallRequest{Conversation: conv, Query: o.query, FromSeq: o.fromSeq, ToSeq: o.toSeq, MaxTokens: o.maxTokens}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if c.svc != nil {
		return c.serviceRecall(ctx, req, o.scanLimit)
	}
	return c.store.Recall(ctx, req, o.scanLimit)
}

// AnswerRecall answers a model's call of the recall tool (schemas.RecallToolJSON) in
// conversation conv: arguments is the call's arguments text; the answer is the content
// of the tool message to send back, the Recalled JSON. Arguments that break a rule
// are answered as {"error": "..."} naming it, so the model can correct its call; the
// error is for failures of the read itself.
//
// The budget is capped: MaxTokens among opts sets the cap (0 or none:
// schemas.DefaultAnswerRecallMaxTokens), so a model cannot fill its own context with
// one call. A call that asks for more gets the cap, and the answer's asked_max_tokens
// says what it asked; one that asks for nothing (or 0) gets schemas.DefaultRecallMaxTokens,
// or the cap when that is lower. ScanLimit applies as in Recall; the other options are
// ignored.
func (c *Client) AnswerRecall(ctx context.Context, conv, arguments string, opts ...ContextOption) (string, error) {
	var o contextOptions
	for _, opt := range opts {
		opt(&o)
	}
	capTokens, err := answerRecallCap(o.maxTokens)
	if err != nil {
		return "", err
	}
	req, err := schemas.DecodeRecallArguments(conv, arguments)
	if err != nil {
		if errors.Is(err, schemas.ErrInvalid) && schemas.ValidateConversationID(conv) == nil {
			b, _ := json.Marshal(map[string]string{"error": err.Error()})
			return string(b), nil
		}
		return "", err
	}
	budget := req.MaxTokens
	if budget == 0 {
		budget = schemas.DefaultRecallMaxTokens
	}
	budget = min(budget, capTokens)
	r, err := c.Recall(ctx, conv, Query(req.Query), FromSeq(req.FromSeq), ToSeq(req.ToSeq), MaxTokens(budget), ScanLimit(o.scanLimit))
	if err != nil {
		return "", err
	}
	if req.MaxTokens > capTokens {
		r.AskedMaxTokens = req.MaxTokens
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// answerRecallCap is AnswerRecall's cap: n, or the default for 0.
func answerRecallCap(n int) (int, error) {
	switch {
	case n == 0:
		return schemas.DefaultAnswerRecallMaxTokens, nil
	case n < 0 || n > schemas.MaxRecallMaxTokens:
		return 0, &schemas.ValidationError{Field: "max_tokens", Rule: fmt.Sprintf("the cap of AnswerRecall must be between 0 (the default, %d) and %d, got %d",
			schemas.DefaultAnswerRecallMaxTokens, schemas.MaxRecallMaxTokens, n)}
	}
	return n, nil
}
