package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/evidence"
)

// RecallArgs are the recall tool's arguments.
type RecallArgs struct {
	Conversation string `json:"conversation,omitempty" jsonschema:"the conversation id"`
	Query        string `json:"query,omitempty" jsonschema:"Text to find, ignoring case: a file name, a command, an error message, an id. Leave out to get every message of the range."`
	FromSeq      uint64 `json:"from_seq,omitempty" jsonschema:"First sequence number to search (inclusive). Leave out to start at the beginning."`
	ToSeq        uint64 `json:"to_seq,omitempty" jsonschema:"Last sequence number to search (inclusive). Leave out to end at the newest message."`
	MaxTokens    int    `json:"max_tokens,omitempty" jsonschema:"Budget of the answer in tokens."`
}

// Recalled is the recall tool's answer.
type Recalled struct {
	Conversation string `json:"conversation"`
	// Messages are the recalled messages, newest tool round first, the messages of a
	// round in stream order; secrets redacted.
	Messages []Message `json:"messages"`
	Matched  int       `json:"matched"`
	Returned int       `json:"returned"`
	// Tokens is the estimate of Messages as stored; MaxTokens the budget applied.
	Tokens    int `json:"tokens"`
	MaxTokens int `json:"max_tokens"`
	// AskedMaxTokens is what the call asked for when it was over the server's cap.
	AskedMaxTokens int  `json:"asked_max_tokens,omitempty"`
	CutByBudget    bool `json:"cut_by_budget"`
	CutByPayload   bool `json:"cut_by_payload,omitempty"`
	// SkippedSeqs is the first sequence of each round left out by the budget.
	SkippedSeqs    []uint64 `json:"skipped_seqs,omitempty"`
	ScannedFromSeq uint64   `json:"scanned_from_seq"`
	ScannedToSeq   uint64   `json:"scanned_to_seq"`
	ScanComplete   bool     `json:"scan_complete"`
	Incomplete     int      `json:"incomplete,omitempty"`
	Invalid        int      `json:"invalid,omitempty"`
	// Redacted counts the messages a secret was redacted from.
	Redacted int `json:"redacted,omitempty"`
	// Note says in a sentence what was left out and how to get it.
	Note string `json:"note"`
}

// Message is one recalled message as the model reads it: its text, with any non-text
// part named in brackets ([image], [file: name]).
type Message struct {
	Seq        uint64     `json:"seq"`
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	Name       string     `json:"name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	Reasoning  string     `json:"reasoning,omitempty"`
}

// ToolCall is one function call of a recalled assistant message.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func (s *server) recall(ctx context.Context, _ *mcp.CallToolRequest, in RecallArgs) (*mcp.CallToolResult, *Recalled, error) {
	conv, err := s.conversation(in.Conversation)
	if err != nil {
		return nil, nil, err
	}
	req := schemas.RecallRequest{Query: in.Query, FromSeq: in.FromSeq, ToSeq: in.ToSeq, MaxTokens: in.MaxTokens}
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.callTimeout())
	defer cancel()
	if err := s.mustExist(ctx, conv); err != nil {
		return nil, nil, err
	}
	budget := in.MaxTokens
	if budget == 0 {
		budget = schemas.DefaultRecallMaxTokens
	}
	budget = min(budget, s.cfg.maxTokens())
	r, err := s.cl.Recall(ctx, conv, pipeline.Query(in.Query), pipeline.FromSeq(in.FromSeq), pipeline.ToSeq(in.ToSeq),
		pipeline.MaxTokens(budget), pipeline.ScanLimit(s.cfg.ScanLimit))
	if err != nil {
		return nil, nil, fmt.Errorf("recall %s: %w", conv, err)
	}
	out := &Recalled{Conversation: conv, Messages: make([]Message, 0, len(r.Messages)), Matched: r.Matched, Returned: r.Returned,
		Tokens: r.Tokens, MaxTokens: r.MaxTokens, CutByBudget: r.CutByBudget, CutByPayload: r.CutByPayload, SkippedSeqs: r.SkippedSeqs,
		ScannedFromSeq: r.ScannedFromSeq, ScannedToSeq: r.ScannedToSeq, ScanComplete: r.ScanComplete, Incomplete: r.Incomplete, Invalid: r.Invalid}
	if in.MaxTokens > budget {
		out.AskedMaxTokens = in.MaxTokens
	}
	for _, m := range r.Messages {
		msg, redacted := render(m)
		out.Messages = append(out.Messages, msg)
		if redacted {
			out.Redacted++
		}
	}
	out.Note = recallNote(out)
	return nil, out, nil
}

// render is m as the model reads it, its secrets redacted (evidence.Redact, as the
// summary's evidence is); redacted says whether any was.
func render(m schemas.RecalledMessage) (msg Message, redacted bool) {
	red := func(s string) string {
		r := evidence.Redact(s)
		redacted = redacted || r != s
		return r
	}
	msg = Message{Seq: m.Seq, Role: string(m.Message.Role), Content: red(text(m.Message.Content)), Name: red(m.Message.Name),
		ToolCallID: m.Message.ToolCallID, Reasoning: red(m.Message.Reasoning)}
	for _, tc := range m.Message.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: red(tc.Function.Arguments)})
	}
	return msg, redacted
}

// text is a content's text: a string's, or the parts' joined by newlines, a non-text
// part by its placeholder.
func text(c schemas.Content) string {
	if !c.IsParts() {
		return c.String()
	}
	parts, err := c.Parts()
	if err != nil {
		return c.String()
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		} else {
			texts = append(texts, p.Placeholder())
		}
	}
	return strings.Join(texts, "\n")
}

// recallNote says what the answer holds and what it left out, and how to get that.
func recallNote(r *Recalled) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d matching messages returned", r.Returned, r.Matched)
	if r.AskedMaxTokens > 0 {
		fmt.Fprintf(&b, "; the budget asked for (%d tokens) is over this server's cap, %d was applied", r.AskedMaxTokens, r.MaxTokens)
	}
	if len(r.SkippedSeqs) > 0 {
		seqs := make([]string, len(r.SkippedSeqs))
		for i, q := range r.SkippedSeqs {
			seqs[i] = fmt.Sprint(q)
		}
		fmt.Fprintf(&b, "; left out by the budget: the rounds starting at seq %s (recall a range around them)", strings.Join(seqs, ", "))
	}
	if r.Incomplete > 0 {
		fmt.Fprintf(&b, "; %d in tool rounds not whole in the range left out (widen the range)", r.Incomplete)
	}
	switch {
	case r.ScannedToSeq == 0:
		b.WriteString("; no message in the range")
	case !r.ScanComplete:
		fmt.Fprintf(&b, "; only seq %d to %d were searched: ask again with to_seq %d to go on", r.ScannedFromSeq, r.ScannedToSeq, r.ScannedFromSeq-1)
	}
	if r.Redacted > 0 {
		fmt.Fprintf(&b, "; secrets redacted in %d", r.Redacted)
	}
	return b.String()
}

// StatusArgs are the status tool's arguments.
type StatusArgs struct {
	Conversation string `json:"conversation,omitempty" jsonschema:"the conversation id"`
}

// Status is the status tool's answer.
type Status struct {
	Conversation string `json:"conversation"`
	// Generation counts the compactions; 0: never compacted.
	Generation uint64 `json:"generation"`
	// CompactedAt is when the last compaction was written (RFC 3339), by what trigger.
	CompactedAt string `json:"compacted_at,omitempty"`
	Trigger     string `json:"trigger,omitempty"`
	// TokensBefore and TokensAfter are the context's tokens before and after the last
	// compaction; ContextTokens and ContextMessages what a read sends now.
	TokensBefore    int `json:"tokens_before"`
	TokensAfter     int `json:"tokens_after"`
	ContextTokens   int `json:"context_tokens"`
	ContextMessages int `json:"context_messages"`
	// CoveredThroughSeq is the newest sequence the summary covers (recall them);
	// TailStartSeq the first sequence of the verbatim tail.
	CoveredThroughSeq uint64 `json:"covered_through_seq"`
	TailStartSeq      uint64 `json:"tail_start_seq"`
	// PinnedSeqs are the messages kept verbatim ahead of the summary.
	PinnedSeqs []uint64 `json:"pinned_seqs"`
	// Fallback says the summary is extractive (the summarizer's LLM was not used).
	Fallback bool `json:"fallback"`
	// DeclinedAtSeq is where the last compaction was declined (it waits for more).
	DeclinedAtSeq uint64 `json:"declined_at_seq,omitempty"`
	Note          string `json:"note"`
}

func (s *server) status(ctx context.Context, _ *mcp.CallToolRequest, in StatusArgs) (*mcp.CallToolResult, *Status, error) {
	conv, err := s.conversation(in.Conversation)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.callTimeout())
	defer cancel()
	if err := s.mustExist(ctx, conv); err != nil {
		return nil, nil, err
	}
	v, err := s.cl.Result(ctx, conv)
	if err != nil {
		return nil, nil, fmt.Errorf("read the compaction of %s: %w", conv, err)
	}
	cx, err := s.cl.Context(ctx, conv)
	if err != nil {
		return nil, nil, fmt.Errorf("read the context of %s: %w", conv, err)
	}
	out := &Status{Conversation: conv, ContextTokens: cx.Tokens, ContextMessages: len(cx.Messages), TailStartSeq: cx.TailStartSeq,
		PinnedSeqs: []uint64{}}
	if v != nil {
		out.DeclinedAtSeq = v.DeclinedAtSeq
	}
	if v != nil && v.Generation > 0 {
		out.Generation, out.Trigger, out.Fallback = v.Generation, v.Trigger, v.Fallback
		out.CompactedAt = v.CreatedAt.UTC().Format(time.RFC3339)
		out.TokensBefore, out.TokensAfter = v.TokensBefore, v.TokensAfter
		out.CoveredThroughSeq = v.CoveredThroughSeq
		out.PinnedSeqs = append(out.PinnedSeqs, v.PinnedSeqs...)
	}
	if out.Generation == 0 {
		out.Note = fmt.Sprintf("never compacted: the context is the whole conversation (%d messages, about %d tokens)", out.ContextMessages, out.ContextTokens)
	} else {
		out.Note = fmt.Sprintf("compaction %d at %s summarized seq 1 to %d (recall them by query or range); the verbatim tail starts at seq %d; "+
			"the context now holds %d messages, about %d tokens", out.Generation, out.CompactedAt, out.CoveredThroughSeq, out.TailStartSeq,
			out.ContextMessages, out.ContextTokens)
	}
	return nil, out, nil
}
