package schemas

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The compactor service (NATS micro): its name, which is also its endpoints' group, and
// the subjects of its endpoints (wire contract v1).
const (
	ServiceName    = "compactor"
	CompactSubject = ServiceName + ".compact"
	ContextSubject = ServiceName + ".context"
	StatusSubject  = ServiceName + ".status"
	PolicySubject  = ServiceName + ".policy"
	ForgetSubject  = ServiceName + ".forget"
)

// Statuses of a compactor.compact answer. completed, declined and failed are the
// outcome events' types.
const (
	CompactQueued    = "queued"
	CompactBusy      = "busy"
	CompactCompleted = EventCompleted
	CompactDeclined  = EventDeclined
	CompactFailed    = EventFailed
)

// MaxInstructionsBytes bounds the instructions of one compaction request.
const MaxInstructionsBytes = 8192

// CompactRequest is the payload of compactor.compact (service-compact-request.v1.json).
type CompactRequest struct {
	Conversation string `json:"conversation"`
	// RequestID names the request (1-128 characters of [A-Za-z0-9_-]); empty: a new
	// one. The same id sent again within the queue's duplicate window is the same
	// request, not a second one.
	RequestID    string `json:"request_id,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	// WaitMS > 0 waits up to that many milliseconds (capped by the service) for the
	// request's outcome.
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// Validate checks the request against the wire contract; an error is a
// *ValidationError naming the field and the rule.
func (r *CompactRequest) Validate() error {
	if err := ValidateConversationID(r.Conversation); err != nil {
		return err
	}
	if r.RequestID != "" {
		if err := ValidateConversationID(r.RequestID); err != nil {
			// The same rule as a conversation id, named for this field.
			var ve *ValidationError
			errors.As(err, &ve)
			return &ValidationError{Field: "request_id", Rule: ve.Rule}
		}
	}
	if n := len(r.Instructions); n > MaxInstructionsBytes {
		return invalid("instructions", "is %d bytes long; at most %d are allowed", n, MaxInstructionsBytes)
	}
	if r.WaitMS < 0 {
		return invalid("wait_ms", "must not be negative (0: do not wait)")
	}
	return nil
}

// CompactResponse is the answer of compactor.compact (service-compact-response.v1.json).
type CompactResponse struct {
	// Status is queued, busy (a request was already pending: this one, with its
	// instructions, was NOT queued; ask again when the pending one completes), or after
	// a wait the outcome: completed, declined or failed. A wait that ends first, or a
	// service that stops meanwhile, answers queued with Error saying so.
	Status string `json:"status"`
	// RequestID is the request's id; for busy, the id of the request already pending
	// (when the service could read it).
	RequestID string `json:"request_id,omitempty"`
	// Result is the conversation's KV value after a completed request.
	Result *Result `json:"result,omitempty"`
	// Error explains busy, failed and a queued answer after a wait, and carries the
	// outcome event's error (e.g. the LLM failure behind a fallback summary).
	Error string `json:"error,omitempty"`
}

// ConversationRequest is the payload of compactor.status
// (service-conversation-request.v1.json). compactor.status without a conversation
// answers the pipeline's streams and consumers instead. (compactor.context takes a
// ContextRequest, which this is a subset of.)
type ConversationRequest struct {
	Conversation string `json:"conversation,omitempty"`
}

// Validate checks the conversation id (required: compactor.status checks a request
// only when it names one).
func (r *ConversationRequest) Validate() error { return ValidateConversationID(r.Conversation) }

// ContextFormats returns the formats compactor.context renders a context in (package
// schemas/formats implements them): openai, anthropic, responses, gemini.
func ContextFormats() []string { return []string{"openai", "anthropic", "responses", "gemini"} }

// ContextRequest is the payload of compactor.context (service-context-request.v1.json).
type ContextRequest struct {
	Conversation string `json:"conversation"`
	// Format, when set (one of ContextFormats), makes the answer carry the context
	// itself, rendered as that API's request fragment, in ContextResponse.Rendered.
	Format string `json:"format,omitempty"`
}

// Validate checks the conversation id and the format; an error is a
// *ValidationError naming the field and the rule.
func (r *ContextRequest) Validate() error {
	if err := ValidateConversationID(r.Conversation); err != nil {
		return err
	}
	if r.Format != "" && !slices.Contains(ContextFormats(), r.Format) {
		shown := r.Format
		if len(shown) > 64 {
			shown = strings.ToValidUTF8(shown[:64], "") + "…"
		}
		return invalid("format", "%q is not a format; use one of %s", shown, strings.Join(ContextFormats(), ", "))
	}
	return nil
}

// ContextResponse is the answer of compactor.context (service-context-response.v1.json):
// where the context starts, not the messages (readers fetch the tail with batched
// direct gets, which keeps the answer under the max payload). Asked for a format, it
// also carries the context rendered in it, if that fits in the max payload.
type ContextResponse struct {
	Conversation string `json:"conversation"`
	// Value is the KV value, null when the conversation was never compacted.
	Value *Result `json:"value"`
	// TailStartSeq is the first CHAT sequence of the verbatim tail (1 without a value).
	TailStartSeq uint64 `json:"tail_start_seq"`
	// LastSeq is the conversation's newest CHAT sequence (0: no messages).
	LastSeq uint64 `json:"last_seq"`
	// Format is the request's format, when it named one.
	Format string `json:"format,omitempty"`
	// Rendered is the assembled context (pinned + summary + tail, the reader
	// algorithm) as Format's request fragment, one JSON object: {"messages"} for
	// openai, {"system", "messages"} for anthropic, {"input"} for responses,
	// {"systemInstruction", "contents"} for gemini.
	Rendered json.RawMessage `json:"rendered,omitempty"`
}

// ConversationStatus is the answer of compactor.status for one conversation
// (service-status-response.v1.json).
type ConversationStatus struct {
	Conversation string `json:"conversation"`
	// Value is the KV value, null when the conversation was never compacted.
	Value   *Result `json:"value"`
	LastSeq uint64  `json:"last_seq"`
	// Pending says whether a compaction request waits in the queue (or is being worked on).
	Pending          bool   `json:"pending"`
	PendingRequestID string `json:"pending_request_id,omitempty"`
}

// PolicyRequest is the payload of compactor.policy (service-policy-request.v1.json).
// Without set or clear it reads.
type PolicyRequest struct {
	Conversation string `json:"conversation"`
	// Set merges keys into the policy: a string or a number each; "" removes the key.
	// Which keys a conversation may set is the policy's rule (package schemas/policy).
	Set map[string]any `json:"set,omitempty"`
	// Clear removes the policy (before Set is applied, so both replace it).
	Clear bool `json:"clear,omitempty"`
}

// Validate checks the conversation id and that every value of Set is a string or a
// number; an error is a *ValidationError naming the field (set.<key>) and the rule.
func (r *PolicyRequest) Validate() error {
	if err := ValidateConversationID(r.Conversation); err != nil {
		return err
	}
	keys := make([]string, 0, len(r.Set))
	for k := range r.Set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch r.Set[k].(type) {
		case string, json.Number, float64, float32, int, int8, int16, int32, int64,
			uint, uint8, uint16, uint32, uint64:
		default:
			return invalid("set."+k, "must be a string or a number (\"\" removes the key)")
		}
	}
	return nil
}

// PolicyResponse is the answer of compactor.policy (service-policy-response.v1.json),
// and what `compactor policy` prints.
type PolicyResponse struct {
	Conversation string `json:"conversation"`
	// Policy is the conversation's own policy: key → value as text.
	Policy map[string]string `json:"policy"`
	// Settings are the settings the policy resolves to, by key name, plus "profile"
	// (policy.Settings.ByKey).
	Settings map[string]any `json:"settings"`
}

// ForgetRequest is the payload of compactor.forget (service-forget-request.v1.json).
type ForgetRequest struct {
	Conversation string `json:"conversation"`
}

// Validate checks the conversation id; an error is a *ValidationError naming the field
// and the rule.
func (r *ForgetRequest) Validate() error { return ValidateConversationID(r.Conversation) }

// ForgetResponse is the answer of compactor.forget (service-forget-response.v1.json),
// and what `compactor forget` prints. Forgetting a conversation that has nothing
// stored is not an error: every count is 0.
type ForgetResponse struct {
	Conversation string `json:"conversation"`
	// ThroughSeq is the CHAT sequence the conversation was forgotten through: its
	// messages up to it are deleted; messages published to the same id afterwards are a
	// new conversation.
	ThroughSeq  uint64    `json:"through_seq"`
	ForgottenAt time.Time `json:"forgotten_at"`
	// Deleted counts what was deleted, by place.
	Deleted ForgetCounts `json:"deleted"`
}

// ForgetCounts are the stored messages and objects a forget deleted, by place.
type ForgetCounts struct {
	ChatMessages uint64 `json:"chat_messages"`
	// ChatMessagesErased is the part of ChatMessages overwritten in the server's files;
	// the rest (past the forget's erase budget) is deleted, its bytes left in the files
	// until the server compacts them.
	ChatMessagesErased uint64 `json:"chat_messages_erased"`
	// ResultRevisions and PolicyRevisions count the KV revisions (history included).
	ResultRevisions uint64 `json:"result_revisions"`
	PolicyRevisions uint64 `json:"policy_revisions"`
	Requests        uint64 `json:"requests"`
	Events          uint64 `json:"events"`
	DeadLetters     uint64 `json:"dead_letters"`
	ActivityMarkers uint64 `json:"activity_markers"`
	Objects         uint64 `json:"objects"`
	// LedgerEntries counts the savings ledger's entries of the conversation (omitted by
	// a service of an earlier version).
	LedgerEntries uint64 `json:"ledger_entries,omitempty"`
}

// Add adds o's counts to c's.
func (c *ForgetCounts) Add(o ForgetCounts) {
	c.ChatMessages += o.ChatMessages
	c.ChatMessagesErased += o.ChatMessagesErased
	c.ResultRevisions += o.ResultRevisions
	c.PolicyRevisions += o.PolicyRevisions
	c.Requests += o.Requests
	c.Events += o.Events
	c.DeadLetters += o.DeadLetters
	c.ActivityMarkers += o.ActivityMarkers
	c.Objects += o.Objects
	c.LedgerEntries += o.LedgerEntries
}

// Tombstone is the value a forget leaves, for a while, in KV bucket
// compaction-forgotten under ForgetKey(conversation) (tombstone.v1.json): the
// conversation's messages up to ThroughSeq were deleted. Processes that were working on
// the conversation when it was forgotten find it there and take back what they wrote.
// It holds no byte of the conversation: its key is a hash of the id.
type Tombstone struct {
	ThroughSeq  uint64    `json:"through_seq"`
	ForgottenAt time.Time `json:"forgotten_at"`
}

// Covers reports whether something that depends on CHAT sequence seq (a value's
// FirstSeq, a request's UpToSeq) belongs to the forgotten conversation. A nil
// tombstone covers nothing.
func (t *Tombstone) Covers(seq uint64) bool { return t != nil && seq <= t.ThroughSeq }

// RecallSubject is the endpoint that returns a conversation's raw messages (see
// RecallRequest).
const RecallSubject = ServiceName + ".recall"

// Bounds of a recall request.
const (
	// DefaultRecallMaxTokens is the token budget of a recall that names none.
	DefaultRecallMaxTokens = 4000
	// MaxRecallMaxTokens is the largest budget a recall may ask for.
	MaxRecallMaxTokens = 1_000_000
	// MaxRecallQueryBytes bounds the text a recall searches for.
	MaxRecallQueryBytes = 1024
	// DefaultAnswerRecallMaxTokens caps the budget of a model's call of the recall tool
	// (pipeline.Client.AnswerRecall) when the application names no other cap: a call
	// that asks for more gets this much, and the answer's asked_max_tokens says what
	// it asked. A call that asks for nothing (or 0) gets DefaultRecallMaxTokens.
	DefaultAnswerRecallMaxTokens = 8000
)

// RecallRequest is the payload of compactor.recall (service-recall-request.v1.json),
// and the arguments of the recall tool a model calls (RecallTool). Query and the range
// combine: the messages in [from_seq, to_seq] that match the query.
type RecallRequest struct {
	// Conversation is required on the wire; the tool's arguments leave it out (the
	// agent knows which conversation it is in).
	Conversation string `json:"conversation,omitempty"`
	// Query matches, case-insensitively, a substring of a message's text, name,
	// reasoning, tool calls' names and arguments, or tool results. Empty: every message.
	Query string `json:"query,omitempty"`
	// FromSeq and ToSeq bound the CHAT sequences searched, both inclusive; 0: the
	// conversation's first or newest message.
	FromSeq uint64 `json:"from_seq,omitempty"`
	ToSeq   uint64 `json:"to_seq,omitempty"`
	// MaxTokens is the budget of the returned messages; 0: DefaultRecallMaxTokens.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Validate checks the request; an error is a *ValidationError naming the field and the
// rule. The conversation is checked only when set: the tool's arguments carry none.
func (r *RecallRequest) Validate() error {
	if r.Conversation != "" {
		if err := ValidateConversationID(r.Conversation); err != nil {
			return err
		}
	}
	if n := len(r.Query); n > MaxRecallQueryBytes {
		return invalid("query", "is %d bytes long; at most %d are allowed", n, MaxRecallQueryBytes)
	}
	if !utf8.ValidString(r.Query) {
		return invalid("query", "must be valid UTF-8")
	}
	if r.ToSeq > 0 && r.FromSeq > r.ToSeq {
		return invalid("from_seq", "must not be after to_seq (%d > %d)", r.FromSeq, r.ToSeq)
	}
	if r.MaxTokens < 0 || r.MaxTokens > MaxRecallMaxTokens {
		return invalid("max_tokens", "must be between 0 (the default, %d) and %d", DefaultRecallMaxTokens, MaxRecallMaxTokens)
	}
	return nil
}

// RecallResponse is the answer of compactor.recall (service-recall-response.v1.json)
// and of pipeline.Client.Recall.
type RecallResponse struct {
	Conversation string `json:"conversation"`
	// Messages are the recalled messages, each with its CHAT sequence: tool rounds
	// (an assistant's tool calls with all their results) newest first, the messages of
	// one round in stream order. A round is returned whole or not at all.
	Messages []RecalledMessage `json:"messages"`
	// Matched counts the messages in the scanned range that matched (a round counts
	// all its messages when one of them matched); Returned those in Messages.
	Matched  int `json:"matched"`
	Returned int `json:"returned"`
	// Tokens is the estimate of Messages; MaxTokens the budget it had to fit.
	Tokens    int `json:"tokens"`
	MaxTokens int `json:"max_tokens"`
	// AskedMaxTokens is the budget a model's call of the recall tool asked for when
	// it was over the application's cap (pipeline.Client.AnswerRecall): MaxTokens is
	// the cap that was applied. 0 (left out): what was asked was applied.
	AskedMaxTokens int `json:"asked_max_tokens,omitempty"`
	// CutByBudget says matching messages were left out to fit MaxTokens; SkippedSeqs
	// names the first sequence of each round or message left out for the budget or the
	// payload (at most MaxRecallSkippedSeqs), to recall with a range and a larger budget.
	CutByBudget bool     `json:"cut_by_budget"`
	SkippedSeqs []uint64 `json:"skipped_seqs,omitempty"`
	// CutByPayload says matching messages were left out to stay within the recall's
	// byte bound: the NATS max payload for compactor.recall, 16 MiB of JSON by default
	// for a Go recall. Their first sequences are in SkippedSeqs.
	CutByPayload bool `json:"cut_by_payload,omitempty"`
	// ScannedFromSeq and ScannedToSeq are the range of CHAT sequences searched.
	// ScanComplete is false when the scan stopped at its bound before reaching from_seq
	// (or the first message): older messages were not searched; ask again with to_seq
	// below ScannedFromSeq to go on. A tool round the bound cut through is left whole
	// to that next page (ScannedFromSeq is then above its messages), so paging this way
	// returns every round in one page.
	ScannedFromSeq uint64 `json:"scanned_from_seq"`
	ScannedToSeq   uint64 `json:"scanned_to_seq"`
	ScanComplete   bool   `json:"scan_complete"`
	// Incomplete counts the messages left out because their tool round is not whole in
	// the range: a result whose call is before from_seq or gone from the stream, or a
	// call whose results are after to_seq or not there (yet).
	Incomplete int `json:"incomplete,omitempty"`
	// Invalid counts stored messages that broke the wire contract (skipped).
	Invalid int `json:"invalid,omitempty"`
}

// MaxRecallSkippedSeqs bounds RecallResponse.SkippedSeqs.
const MaxRecallSkippedSeqs = 32

// RecalledMessage is one raw message of a recall with its CHAT sequence. It encodes as
// the message's own JSON object with a leading "seq" field (a producer's own top-level
// "seq" field, if any, is left out).
type RecalledMessage struct {
	Seq     uint64
	Message Message
	// Tokens is the message's weight against the budget; not encoded.
	Tokens int
}

// MarshalJSON writes {"seq":N, <the message's fields>}.
func (r RecalledMessage) MarshalJSON() ([]byte, error) {
	m := r.Message
	if _, ok := m.Unknown["seq"]; ok {
		m.Unknown = maps.Clone(m.Unknown)
		delete(m.Unknown, "seq")
	}
	body, err := m.Encode()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+24)
	out = append(out, `{"seq":`...)
	out = strconv.AppendUint(out, r.Seq, 10)
	out = append(out, ',')
	return append(out, body[1:]...), nil // body is {"role":...}
}

// UnmarshalJSON reads what MarshalJSON writes; "seq" is required and the message must
// be valid (DecodeMessage).
func (r *RecalledMessage) UnmarshalJSON(data []byte) error {
	var head struct {
		Seq *uint64 `json:"seq"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return invalid("seq", "must be a non-negative integer")
	}
	if head.Seq == nil {
		return invalid("seq", "is required")
	}
	m, err := DecodeMessage(data)
	if err != nil {
		return err
	}
	delete(m.Unknown, "seq")
	if len(m.Unknown) == 0 {
		m.Unknown = nil
	}
	r.Seq, r.Message = *head.Seq, m
	return nil
}
