package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// SchemaVersion is the version of the KV value this code writes and fully understands.
const SchemaVersion = 1

// Trigger kinds recorded in requests, results and events.
const (
	TriggerBudget     = "budget"
	TriggerStructural = "structural"
	TriggerTemporal   = "temporal"
	TriggerManual     = "manual"
)

// Request asks the summarizer pool to compact one conversation. It is the payload of
// compact.request.<conv>.
type Request struct {
	RequestID    string    `json:"request_id"`
	Conversation string    `json:"conversation"`
	Trigger      string    `json:"trigger"`
	Reason       string    `json:"reason,omitempty"`
	Instructions string    `json:"instructions,omitempty"`
	RequestedAt  time.Time `json:"requested_at"`
	// UpToSeq is the newest CHAT sequence the requester had seen; workers compact at
	// least this far and may include anything newer.
	UpToSeq uint64 `json:"up_to_seq"`
	// Escalation asks for a more aggressive split than the policy's: 1 halves what the
	// strategy keeps, 2 summarizes everything. Set when a conversation is still over
	// budget right after a compaction.
	Escalation int `json:"escalation,omitempty"`
	// Witness is what the trigger saw of the conversation's messages from the tail
	// start through UpToSeq; a worker that reads fewer there declines (a hole). Absent
	// from requests of older triggers and manual ones: then nothing is checked.
	Witness *Witness `json:"witness,omitempty"`
}

// Validate checks a request.
func (r *Request) Validate() error {
	if r.RequestID == "" {
		return invalid("request_id", "must not be empty")
	}
	if err := ValidateConversationID(r.Conversation); err != nil {
		return err
	}
	if r.Escalation < 0 || r.Escalation > MaxEscalation {
		return invalid("escalation", "must be 0 to %d, got %d", MaxEscalation, r.Escalation)
	}
	switch r.Trigger {
	case TriggerBudget, TriggerStructural, TriggerTemporal, TriggerManual:
	default:
		return invalid("trigger", "unknown trigger %q; must be budget, structural, temporal or manual", r.Trigger)
	}
	if r.Witness != nil {
		if err := r.Witness.Validate(); err != nil {
			return err
		}
		if r.Witness.ThroughSeq > r.UpToSeq {
			return invalid("witness", "through_seq %d is past up_to_seq %d", r.Witness.ThroughSeq, r.UpToSeq)
		}
	}
	return nil
}

// MaxEscalation is the most aggressive split a request may ask for.
const MaxEscalation = 2

// Override is a per-sequence change every reader applies to a tail or pinned message.
// A truncation keeps the first KeepHead and the last KeepTail characters (Unicode code
// points) of the message's text and puts Note between them.
type Override struct {
	Seq      uint64 `json:"seq"`
	KeepHead int    `json:"keep_head"`
	KeepTail int    `json:"keep_tail"`
	Note     string `json:"note,omitempty"`
}

// Result is the KV value of key <conv> in bucket "compaction": one summary plus the
// sequence where the verbatim tail starts.
type Result struct {
	SchemaVersion     int      `json:"schema_version"`
	Conversation      string   `json:"conversation"`
	Generation        uint64   `json:"generation"`
	Summary           string   `json:"summary"`
	EvidenceText      string   `json:"evidence_text,omitempty"`
	SummaryRole       Role     `json:"summary_role,omitempty"`
	TailStartSeq      uint64   `json:"tail_start_seq"`
	CoveredThroughSeq uint64   `json:"covered_through_seq"`
	PinnedSeqs        []uint64 `json:"pinned_seqs,omitempty"`
	// KeptSeqs is the part of PinnedSeqs a strategy kept ahead of the summary for now
	// (user-messages) rather than pinned forever; the next compaction reconsiders them.
	// Readers need not know it: they read PinnedSeqs.
	KeptSeqs  []uint64   `json:"kept_seqs,omitempty"`
	Overrides []Override `json:"overrides,omitempty"`
	Strategy  string     `json:"strategy,omitempty"`
	Trigger   string     `json:"trigger,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	RequestID string     `json:"request_id,omitempty"`
	// RequestSeq is the work-queue sequence of the request, stable across redeliveries.
	RequestSeq uint64 `json:"request_seq,omitempty"`
	// LLMBaseGeneration is the last LLM-written generation this one builds on.
	LLMBaseGeneration uint64 `json:"llm_base_generation"`
	Fallback          bool   `json:"fallback"`
	Model             string `json:"model,omitempty"`
	PromptHash        string `json:"prompt_hash,omitempty"`
	TokensBefore      int    `json:"tokens_before"`
	TokensAfter       int    `json:"tokens_after"`
	MessagesBefore    int    `json:"messages_before"`
	MessagesAfter     int    `json:"messages_after"`
	Usage             *Usage `json:"usage,omitempty"`
	DeclinedAtSeq     uint64 `json:"declined_at_seq,omitempty"`
	// LoadedThroughSeq is the newest CHAT sequence the compaction read: rounds and idle
	// time are counted from there.
	LoadedThroughSeq uint64 `json:"loaded_through_seq,omitempty"`
	// FirstSeq is the lowest CHAT sequence the value depends on: its oldest input
	// message, the previous value's FirstSeq, or the newest sequence its request had
	// seen, whichever is lowest (0 when unknown, as in values of older writers). A
	// forget of the conversation through sequence T covers every value with
	// FirstSeq <= T: such a value holds something of the forgotten conversation.
	FirstSeq  uint64    `json:"first_seq,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// BuiltOnFallback says the summary is an extractive fallback written because the LLM
	// failed, or was built on one: some of the messages it covers were never summarized
	// by the LLM. It passes from generation to generation until a repair summarizes them
	// again (RepairOf).
	BuiltOnFallback bool `json:"built_on_fallback,omitempty"`
	// RepairOf is the generation of the fallback (or built-on-fallback) value this one
	// repaired: its summary was written by the LLM from the raw messages in CHAT, not
	// from the fallback text.
	RepairOf uint64 `json:"repair_of,omitempty"`
	// RepairGap says the value cannot be repaired: messages its fallback covers left
	// CHAT (its age limit, a purge). The fallback stays, and no repair is tried again.
	RepairGap bool `json:"repair_gap,omitempty"`
	// RepairFailures counts the repairs of the value's fallback that the summarizer
	// could not make (its summaries stay over their cap, nothing fits its window, it
	// refuses the messages for good) since the fallback was written; RepairNotBefore is
	// when the next may be tried: each failure doubles the wait, up to a day. Both pass
	// from generation to generation with BuiltOnFallback, and go with it.
	RepairFailures  int        `json:"repair_failures,omitempty"`
	RepairNotBefore *time.Time `json:"repair_not_before,omitempty"`
	// Evidence is what compactions extracted from the messages they covered, carried
	// forward between them; EvidenceText is its rendered section, which readers append
	// to the summary message (see assemble.SummaryMessage).
	Evidence *Evidence `json:"evidence,omitempty"`
	// Holes are the holes a worker found in the conversation's raw history (messages
	// seen, then no longer stored): the value is not compacted across them again.
	Holes []Hole `json:"holes,omitempty"`
	// LossAcceptedThroughSeq says an operator accepted the loss of the messages missing
	// at or below this sequence (compactor verify --accept): they are no longer holes,
	// and compactions summarize across them. Later holes above it are still holes.
	LossAcceptedThroughSeq uint64 `json:"loss_accepted_through_seq,omitempty"`
	// Witnessed is what the compactions read of the conversation's raw history, from
	// its first message through LoadedThroughSeq, in ranges that follow each other;
	// compactor verify checks CHAT against it.
	Witnessed []Witness `json:"witnessed,omitempty"`

	// Unknown keeps fields written by a newer writer, so a rewrite does not drop them.
	Unknown map[string]json.RawMessage `json:"-"`
}

// ErrNewerSchema is returned when a KV value was written by a newer schema version.
type ErrNewerSchema struct{ Version int }

func (e *ErrNewerSchema) Error() string {
	return fmt.Sprintf("compaction value has schema_version %d; this reader understands %d: upgrade the reader", e.Version, SchemaVersion)
}

type resultFields Result

// knownResultFields holds the JSON names of Result's fields, read from its tags.
var knownResultFields = jsonFieldNames(reflect.TypeFor[resultFields]())

// jsonFieldNames returns the JSON names of a struct type's encoded fields.
func jsonFieldNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// UnmarshalJSON decodes a value and keeps unknown fields. Only exact field names are
// read; a differently cased known name is an unknown field, kept as it is.
func (r *Result) UnmarshalJSON(data []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	known := make(map[string]json.RawMessage, len(all))
	var unknown map[string]json.RawMessage
	for k, v := range all {
		if knownResultFields[k] {
			known[k] = v
			continue
		}
		if unknown == nil {
			unknown = map[string]json.RawMessage{}
		}
		unknown[k] = bytes.Clone(v)
	}
	b, err := json.Marshal(known)
	if err != nil {
		return err
	}
	var f resultFields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*r = Result(f)
	r.Unknown = unknown
	return nil
}

// MarshalJSON encodes a value with its unknown fields.
func (r Result) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(resultFields(r))
	if err != nil || len(r.Unknown) == 0 {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	for k, v := range r.Unknown {
		if _, known := all[k]; !known {
			all[k] = v
		}
	}
	return json.Marshal(all)
}

// DecodeResult parses a KV value. A value of a newer schema version is refused with
// *ErrNewerSchema rather than guessed at.
func DecodeResult(data []byte) (*Result, error) {
	// The version is read first: a newer value may have changed any other field.
	var head map[string]json.RawMessage
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, invalid("value", "does not decode: %v", err)
	}
	var version int
	if v, ok := head["schema_version"]; ok {
		if err := json.Unmarshal(v, &version); err != nil {
			return nil, invalid("schema_version", "must be an integer: %v", err)
		}
	}
	if version > SchemaVersion {
		return nil, &ErrNewerSchema{Version: version}
	}
	if version < 1 {
		return nil, invalid("schema_version", "must be at least 1, got %d", version)
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, invalid("value", "does not decode: %v", err)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// validate checks what readers compute with: a value that breaks it would make them
// read the wrong messages (tail_start_seq 0 underflows, for one).
func (r *Result) validate() error {
	switch {
	case ValidateConversationID(r.Conversation) != nil:
		return invalid("conversation", "%v", ValidateConversationID(r.Conversation))
	case r.TailStartSeq < 1:
		return invalid("tail_start_seq", "must be at least 1, got %d", r.TailStartSeq)
	case r.CoveredThroughSeq >= r.TailStartSeq:
		return invalid("covered_through_seq", "must be below tail_start_seq %d, got %d", r.TailStartSeq, r.CoveredThroughSeq)
	case slices.Contains(r.PinnedSeqs, 0):
		return invalid("pinned_seqs", "sequences start at 1")
	}
	return nil
}

// NeedsRepair reports whether the value's summary is, or was built on, an extractive
// fallback written because the LLM failed (BuiltOnFallback), that a repair can still
// replace (no RepairGap). A summary that is extractive because no LLM is configured
// (Fallback alone) needs none.
func (r *Result) NeedsRepair() bool {
	return r != nil && r.Generation > 0 && r.BuiltOnFallback && !r.RepairGap
}

// SummaryRoleOrDefault returns the role the summary message is given (default user).
func (r *Result) SummaryRoleOrDefault() Role {
	if r.SummaryRole == "" {
		return RoleUser
	}
	return r.SummaryRole
}

// Event types on compact.event.<conv>.
const (
	EventRequested = "requested"
	EventStarted   = "started"
	EventCompleted = "completed"
	EventDeclined  = "declined"
	EventFailed    = "failed"
	// EventForgotten says the conversation was forgotten (compactor.forget): whoever
	// holds state of it drops that state. It is published before the conversation's
	// events are deleted, so it is seen live, never stored for long.
	EventForgotten = "forgotten"
)

// Event reports one step of a compaction request.
type Event struct {
	Type         string    `json:"type"`
	Conversation string    `json:"conversation"`
	RequestID    string    `json:"request_id"`
	Generation   uint64    `json:"generation"`
	Trigger      string    `json:"trigger,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	TokensBefore int       `json:"tokens_before"`
	TokensAfter  int       `json:"tokens_after"`
	DurationMS   int64     `json:"duration_ms"`
	Error        string    `json:"error,omitempty"`
	At           time.Time `json:"at"`
	// RepairOf is set on the completed event of a repair: the generation it repaired.
	RepairOf uint64 `json:"repair_of,omitempty"`
	// RepairGap is set on the outcome of a repair that cannot be made: messages the
	// fallback covers left CHAT.
	RepairGap bool `json:"repair_gap,omitempty"`
	// Holes is set on a declined event when messages are missing from the history the
	// worker read: which sequences (when they can be named) and where.
	Holes []Hole `json:"holes,omitempty"`
}

// DeadLetter is what COMPACT_DEAD keeps of a request that used up its attempts.
type DeadLetter struct {
	Request  Request   `json:"request"`
	Error    string    `json:"error"`
	Attempts uint64    `json:"attempts"`
	At       time.Time `json:"at"`
}
