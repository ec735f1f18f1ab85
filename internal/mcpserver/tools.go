package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// MoreSkipped says the budget left out more matching rounds of a query than
	// SkippedSeqs names (only those checked to match outside secrets are named).
	MoreSkipped bool `json:"more_skipped,omitempty"`
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
	if in.Query != "" && evidence.Redact(in.Query) != in.Query {
		return nil, nil, errors.New("refused: the query looks like a secret (a key, a token, a password): " +
			"recall redacts secrets, and does not search for them")
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
	if in.Query != "" {
		if err := s.visibleMatches(ctx, conv, in.Query, out); err != nil {
			return nil, nil, fmt.Errorf("recall %s: %w", conv, err)
		}
	}
	out.Note = recallNote(out)
	text, err := encode(out)
	if err != nil {
		return nil, nil, err
	}
	// The text the model reads is written here, without escaping <, > and & (the SDK's
	// own encoding of out would make each six bytes).
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// maxVerified bounds the rounds a query's answer checks beyond what it returns (those
// the budget left out): past it, they are not named (MoreSkipped says there are more,
// when a checked one matched outside a secret).
const maxVerified = 8

// visibleMatches keeps of a query's answer what matches the query in the text the model
// reads, secrets redacted: a round that matched only inside a secret is left out,
// whether returned or left out by the budget (each of those is read again, at most
// maxVerified), and the counts are of what is left. Otherwise the answer would tell,
// guess after guess, whether a redacted secret starts with a given text.
func (s *server) visibleMatches(ctx context.Context, conv, query string, out *Recalled) error {
	lq := strings.ToLower(query)
	var kept []Message
	matched := 0
	for start := 0; start < len(out.Messages); {
		end := start + 1
		for end < len(out.Messages) && out.Messages[end].Seq > out.Messages[end-1].Seq {
			end++
		}
		if unit := out.Messages[start:end]; anyHolds(unit, lq) {
			kept = append(kept, unit...)
			matched += len(unit) // a round counts all its messages, as the recall operation counts
		}
		start = end
	}
	out.Messages = kept
	if out.Messages == nil {
		out.Messages = []Message{}
	}
	out.Returned = len(kept)
	var skipped []uint64
	unchecked := false
	for i, seq := range out.SkippedSeqs {
		if i >= maxVerified {
			unchecked = true
			break
		}
		// The round is read whole (its first message alone is no unit the recall
		// operation returns); one that cannot be read whole is not named.
		seqs, err := s.unitOf(ctx, conv, seq)
		if err != nil {
			continue
		}
		r, err := s.cl.Recall(ctx, conv, pipeline.FromSeq(seqs[0]), pipeline.ToSeq(seqs[len(seqs)-1]),
			pipeline.MaxTokens(schemas.MaxRecallMaxTokens), pipeline.ScanLimit(s.cfg.ScanLimit))
		if err != nil {
			return err
		}
		var unit []Message
		for _, m := range r.Messages {
			if slices.Contains(seqs, m.Seq) {
				msg, _ := render(m)
				unit = append(unit, msg)
			}
		}
		if anyHolds(unit, lq) {
			skipped = append(skipped, seq)
			matched += len(unit)
		}
	}
	out.SkippedSeqs = skipped
	// Rounds past those checked are told of only when a checked one matched where the
	// model can read it: otherwise their being there could be a secret's match.
	out.MoreSkipped = unchecked && len(skipped) > 0
	out.CutByBudget = len(skipped) > 0
	out.Matched = matched
	return nil
}

// anyHolds says a message of ms holds lq (lower case).
func anyHolds(ms []Message, lq string) bool {
	return slices.ContainsFunc(ms, func(m Message) bool { return m.holds(lq) })
}

// holds says the message as the model reads it holds lq (lower case), as the recall
// operation matches a query.
func (m Message) holds(lq string) bool {
	has := func(s string) bool { return s != "" && strings.Contains(strings.ToLower(s), lq) }
	if has(m.Content) || has(m.Name) || has(m.Reasoning) || has(m.ToolCallID) {
		return true
	}
	for _, tc := range m.ToolCalls {
		if has(tc.Name) || has(tc.Arguments) {
			return true
		}
	}
	return false
}

// encode is v as JSON, <, > and & as they are.
func encode(v any) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// render is m as the model reads it, its secrets redacted (evidence.Redact, as the
// summary's evidence is); redacted says whether any was.
func render(m schemas.RecalledMessage) (msg Message, redacted bool) {
	red := func(s string) string {
		r := evidence.Redact(s)
		redacted = redacted || r != s
		return r
	}
	msg = Message{Seq: m.Seq, Role: string(m.Message.Role), Content: red(m.Message.Content.TextWithPlaceholders()), Name: red(m.Message.Name),
		ToolCallID: m.Message.ToolCallID, Reasoning: red(m.Message.Reasoning)}
	for _, tc := range m.Message.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: red(tc.Function.Arguments)})
	}
	return msg, redacted
}

// recallNote says what the answer holds and what it left out, and how to get that.
func recallNote(r *Recalled) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d matching messages returned", r.Returned, r.Matched)
	if r.AskedMaxTokens > 0 {
		fmt.Fprintf(&b, "; the budget asked for (%d tokens) is over this server's cap, %d was applied", r.AskedMaxTokens, r.MaxTokens)
	}
	if len(r.SkippedSeqs) > 0 {
		fmt.Fprintf(&b, "; left out by the budget: the rounds starting at seq %s (recall a range around them)", list(r.SkippedSeqs))
	}
	if r.MoreSkipped {
		b.WriteString("; more matching rounds were left out by the budget (narrow the range, or raise max_tokens)")
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
