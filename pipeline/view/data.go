package view

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// What the pages show. Each page renders one of List, Conversation or Messages; its
// JSON twin under /api/ is that same value encoded.

// Gauge is a conversation's context size against its budget, in tokens.
type Gauge struct {
	// Tokens is the size of the context a reader assembles now (pinned messages,
	// summary, tail), counted with the conversation's tokenizer.
	Tokens          int    `json:"tokens"`
	ContextWindow   int    `json:"context_window"`
	TargetTokens    int    `json:"target_tokens"`
	ThresholdTokens int    `json:"threshold_tokens"`
	HardLimitTokens int    `json:"hard_limit_tokens"`
	Tokenizer       string `json:"tokenizer"`
}

func newGauge(n int, b budget.Budget, tokenizer string) Gauge {
	if tokenizer == "" {
		tokenizer = "chars4"
	}
	return Gauge{Tokens: n, ContextWindow: b.ContextWindow, TargetTokens: b.TargetTokens(),
		ThresholdTokens: b.ThresholdTokens(), HardLimitTokens: b.HardLimitTokens(), Tokenizer: tokenizer}
}

// Zone names where the context stands: under the target, between target and
// threshold, past the threshold (compaction is due), or past the hard limit.
func (g Gauge) Zone() string {
	switch {
	case g.Tokens >= g.HardLimitTokens:
		return "over-hard-limit"
	case g.Tokens >= g.ThresholdTokens:
		return "over-threshold"
	case g.Tokens >= g.TargetTokens:
		return "over-target"
	}
	return "under-target"
}

// X is where n tokens fall on a gauge drawn 1,000 units wide for the context window.
func (g Gauge) X(n int) int {
	if g.ContextWindow <= 0 || n <= 0 {
		return 0
	}
	return int(min(1000, int64(n)*1000/int64(g.ContextWindow)))
}

// Percent is Tokens as a percentage of the context window.
func (g Gauge) Percent() float64 {
	if g.ContextWindow <= 0 {
		return 0
	}
	return float64(g.Tokens) * 100 / float64(g.ContextWindow)
}

// Row is one conversation of the list.
type Row struct {
	Conversation string `json:"conversation"`
	// Messages is how many messages CHAT holds for it.
	Messages       uint64     `json:"messages"`
	Generation     uint64     `json:"generation"`
	LastCompaction *time.Time `json:"last_compaction,omitempty"`
	Gauge          *Gauge     `json:"gauge,omitempty"`
	// Error says why the row is incomplete (a value it cannot read, a read that failed).
	Error string `json:"error,omitempty"`
}

// List is a page of the conversations with messages in CHAT, sorted by subject.
type List struct {
	Conversations []Row `json:"conversations"`
	Page          int   `json:"page"`
	PageSize      int   `json:"page_size"`
	// Subjects is how many CHAT subjects hold messages (about one per conversation).
	Subjects int  `json:"subjects"`
	More     bool `json:"more"`
}

// Conversation is one conversation's page. Its first fields are the answer of
// compactor.status for the conversation.
type Conversation struct {
	schemas.ConversationStatus
	// Forgotten is the tombstone when the conversation was forgotten recently.
	Forgotten *schemas.Tombstone `json:"forgotten,omitempty"`
	Profile   string             `json:"profile,omitempty"`
	Strategy  string             `json:"strategy"`
	// Notes say what the page could not show as usual: an invalid policy, a value that
	// does not decode, a history or event read cut short.
	Notes    []string `json:"notes,omitempty"`
	Gauge    Gauge    `json:"gauge"`
	Timeline []Entry  `json:"timeline"`
	Context  Context  `json:"context"`
}

// Entry kinds of the timeline.
const (
	KindCompaction = "compaction" // a revision that wrote a new generation
	KindDeclined   = "declined"   // a revision that recorded a decline
	KindFailed     = "failed"     // a failed event: the request used up its attempts, no revision
	KindDeleted    = "deleted"    // a delete or purge marker
	KindInvalid    = "invalid"    // a revision whose value does not decode
	KindGap        = "gap"        // revisions that are no longer kept, or a restart after a forget
)

// Entry is one step of a conversation's timeline.
type Entry struct {
	Kind string `json:"kind"`
	// Revision is the KV revision (0 for an event or a gap).
	Revision       uint64    `json:"revision,omitempty"`
	At             time.Time `json:"at"`
	Generation     uint64    `json:"generation"`
	Trigger        string    `json:"trigger,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Strategy       string    `json:"strategy,omitempty"`
	Model          string    `json:"model,omitempty"`
	Fallback       bool      `json:"fallback,omitempty"`
	TokensBefore   int       `json:"tokens_before"`
	TokensAfter    int       `json:"tokens_after"`
	MessagesBefore int       `json:"messages_before,omitempty"`
	MessagesAfter  int       `json:"messages_after,omitempty"`
	// DurationMS is the request's time in the worker, from its outcome event; absent
	// when that event is no longer stored.
	DurationMS    *int64 `json:"duration_ms,omitempty"`
	Error         string `json:"error,omitempty"`
	TailStartSeq  uint64 `json:"tail_start_seq,omitempty"`
	DeclinedAtSeq uint64 `json:"declined_at_seq,omitempty"`
	// Folded is the CHAT sequence range this compaction moved from the tail into the
	// summary (the conversation's messages in it; pinned ones stay verbatim).
	Folded *Range `json:"folded,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Range is a range of CHAT sequences.
type Range struct {
	// From is 0 when unknown: the revision before is no longer kept.
	From    uint64 `json:"from"`
	Through uint64 `json:"through"`
}

// Context is the context a reader assembles now, as a model would be sent it, with
// Compactor's metadata kept.
type Context struct {
	Generation   uint64    `json:"generation"`
	TailStartSeq uint64    `json:"tail_start_seq"`
	Tokens       int       `json:"tokens"`
	Pinned       []Message `json:"pinned"`
	Summary      *Summary  `json:"summary,omitempty"`
	Tail         []Message `json:"tail"`
	// Omitted is the older part of the tail the page does not show (it shows the
	// newest messages only); nil when it shows all of it.
	Omitted *Range           `json:"omitted,omitempty"`
	Skipped []rounds.Skipped `json:"skipped,omitempty"`
}

// Summary is the summary message readers build.
type Summary struct {
	Role   string `json:"role"`
	Text   string `json:"text"`
	Cut    int    `json:"cut_chars,omitempty"`
	Tokens int    `json:"tokens"`
}

// Message is one chat message as a page shows it: texts longer than the view's bound
// are cut, and Cut says how many characters were left out.
type Message struct {
	Seq        uint64     `json:"seq"`
	Time       *time.Time `json:"time,omitempty"`
	Role       string     `json:"role"`
	Name       string     `json:"name,omitempty"`
	Text       string     `json:"text"`
	Cut        int        `json:"cut_chars,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Reasoning  string     `json:"reasoning,omitempty"`
	// ReasoningCut is how many characters of the reasoning were left out.
	ReasoningCut int  `json:"reasoning_cut_chars,omitempty"`
	Tokens       int  `json:"tokens"`
	Pinned       bool `json:"pinned,omitempty"`
	// Object describes a message over the max payload, stored as an object: the view
	// shows its stub and does not fetch it.
	Object *Object `json:"object,omitempty"`
	// Invalid says why a stored message breaks the contract (readers skip it).
	Invalid string `json:"invalid,omitempty"`
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Cut       int    `json:"cut_chars,omitempty"`
}

// Object is the stub of a message stored as an object.
type Object struct {
	Size   int64 `json:"size"`
	Tokens int   `json:"tokens"`
}

// Messages is a page of a conversation's raw messages in a sequence range: what a
// compaction folded away, or the older part of a tail.
type Messages struct {
	Conversation string `json:"conversation"`
	From         uint64 `json:"from"`
	// Through is the end of the range asked for; 0: to the end.
	Through  uint64    `json:"through"`
	Messages []Message `json:"messages"`
	// Next, when set, is where the next page of the range starts.
	Next uint64 `json:"next,omitempty"`
}

// cut returns at most n characters of s, and how many it left out. Text that is not
// valid UTF-8 is shown with replacement characters.
func cut(s string, n int) (string, int) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s, 0
	}
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s, 0
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k], total - n
		}
		i++
	}
	return s, 0
}

// newMessage is m as a page shows it, with at most maxChars characters of each text.
func newMessage(m *schemas.Message, seq uint64, count tokens.Counter, maxChars int) Message {
	out := Message{Seq: seq, Role: string(m.Role), Name: m.Name, ToolCallID: m.ToolCallID,
		Tokens: tokens.MessageWith(count, m), Pinned: m.Pinned()}
	out.Text, out.Cut = cut(m.Content.TextWithPlaceholders(), maxChars)
	out.Reasoning, out.ReasoningCut = cut(m.Reasoning, maxChars)
	for _, tc := range m.ToolCalls {
		c := ToolCall{ID: tc.ID, Name: tc.Function.Name}
		c.Arguments, c.Cut = cut(tc.Function.Arguments, maxChars)
		out.ToolCalls = append(out.ToolCalls, c)
	}
	if ref := m.ContentRef; ref != nil {
		out.Object = &Object{Size: ref.Size, Tokens: ref.Tokens}
	}
	return out
}
