package triggers

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/holes"
	"github.com/compactor/compactor/schemas/tokens"
)

// convState is the trigger's cached view of one conversation: the estimate of pinned +
// summary + tail and what the trigger rules need besides it. It is a cache: dropped when
// idle or stale, rebuilt from KV and the stream on the next message. Its methods are pure:
// no NATS, no clock (the caller passes the time).
type convState struct {
	id        string
	watermark uint64 // the newest CHAT sequence already counted
	tokens    int    // pinned + summary + tail, estimated
	// open holds the ids of the newest round's tool calls still unanswered.
	open []string
	// shared holds the conversation's resolved policy (settings), its budget and its
	// tokenizer's counter (count), shared with every conversation of the same policy.
	*shared
	// generation is the compaction generation of the value the estimate builds on.
	generation uint64

	// rounds counts assistant messages after loadedThrough, the newest sequence the last
	// compaction read (max_rounds), up to MaxInt32. It shares a word with forgotten:
	// the state is kept small (docs/benchmarks.md, the trigger's heap).
	rounds int32
	// forgotten marks a state found to hold a forgotten conversation: it is dropped and
	// rebuilt before it is used again.
	forgotten     bool
	loadedThrough uint64
	// structural is the reason of a pending structural trigger (a large tool output).
	structural string
	// lastMsgAt is the stream time of the newest message (idle detection).
	lastMsgAt stamp

	// tailStart is where the value the state was built on starts its tail: a message
	// before it is in the summary (or pinned), never counted on its own.
	tailStart uint64

	declinedAtSeq   uint64
	tokensAtDecline int

	// base is the lowest CHAT sequence the state depends on: the value's FirstSeq, the
	// messages it counted (math.MaxUint64 when none). A tombstone through it means the
	// state holds a forgotten conversation.
	base uint64
	// forgottenThrough is the tombstone's sequence when the state was built after a
	// forget: messages at or below it are the forgotten conversation's, not counted.
	forgottenThrough uint64
	// seen is the witness of every message of the conversation the state counted or
	// skipped as invalid from its tail start on: carried in the request, so the worker
	// finds out when one of them is no longer stored (a hole).
	seen holes.Acc
	// timers carries what outlives a rebuild: backoffs, the request in flight, the
	// retry timer.
	timers
}

// stamp is a wall-clock instant in Unix nanoseconds, 0 for none: a third of a
// time.Time, for the many instants every tracked conversation keeps.
type stamp int64

func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	return stamp(t.UnixNano())
}

func (s stamp) time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s))
}

// timers is the part of a conversation's state that a rebuild keeps.
type timers struct {
	inFlightUntil stamp
	// failures counts failed compactions in a row; retryErrors (below) the
	// re-evaluations in a row that could not rebuild the state. Both stop counting at
	// MaxInt32, and share a word.
	failures     int32
	retryErrors  int32
	backoffUntil stamp
	// retry is the pending re-evaluation, due at retryAt; retryGen tells the timer that
	// is current from one replaced by a later deadline.
	retry    *time.Timer
	retryAt  stamp
	retryGen uint64
	// retryInFlight marks a retry scheduled only to look for a request in flight whose
	// outcome may never come: the outcome, when it does come, cancels it, so that the
	// next message may ask at once instead of waiting for it.
	retryInFlight bool
	// lastArm is when the idle timer was last re-armed; idleFiredFor the lastMsgAt of
	// the quiet period an idle request was already made for.
	lastArm      stamp
	idleFiredFor stamp

	// inFlightCheckAt is when the work queue may next be asked whether the request in
	// flight is still there (its outcome event may never come).
	inFlightCheckAt stamp
}

// usageFloorDivisor says how far below the estimate a reply's usage may be and still be
// believed: a usage under estimate/usageFloorDivisor is ignored. A model's own count
// of a context is rarely under half the chars/4 estimate (and it includes the system
// prompt and tools, which the estimate leaves out); a usage that is, is a producer
// sending the wrong field (Anthropic's input_tokens without the cache reads).
const usageFloorDivisor = 2

// ignoredUsage is a reply's usage the trigger did not believe: what it reported
// (prompt + completion) and the estimate it was checked against. The zero value means
// none.
type ignoredUsage struct{ reported, estimate int }

// incoming is what the trigger counts of one message: its token count and what the
// trigger rules read. read fills it from the message's bytes; decoded from a decoded
// message.
type incoming struct {
	role   schemas.Role
	tokens int
	// callIDs are the ids of the message's tool calls.
	callIDs    []string
	toolCallID string
	// usage and generation are set when hasUsage and hasGeneration say so.
	usage         schemas.Usage
	hasUsage      bool
	generation    uint64
	hasGeneration bool
}

// read reads one message's bytes for counting with count: with chars/4 (the default
// tokenizer) in one pass (schemas.ScanMessage), without decoding the message; with
// another tokenizer, which counts text, by decoding it. An error is DecodeMessage's.
func read(data []byte, count tokens.Counter) (incoming, error) {
	if _, chars4 := count.(tokens.Chars4); !chars4 {
		m, err := schemas.DecodeMessage(data)
		if err != nil {
			return incoming{}, err
		}
		return decoded(&m, count), nil
	}
	s, err := schemas.ScanMessage(data)
	if err != nil {
		return incoming{}, err
	}
	return incoming{
		role: s.Role, tokens: tokens.Scanned(&s), toolCallID: s.ToolCallID,
		callIDs: idsOf(s.ToolCalls, func(tc *schemas.ScannedCall) string { return tc.ID }),
		usage:   s.Usage, hasUsage: s.HasUsage, generation: s.ContextGeneration, hasGeneration: s.HasContextGeneration,
	}, nil
}

// idsOf is the ids of calls (nil when there are none), id reading one's.
func idsOf[T any](calls []T, id func(*T) string) []string {
	if len(calls) == 0 {
		return nil
	}
	ids := make([]string, len(calls))
	for i := range calls {
		ids[i] = id(&calls[i])
	}
	return ids
}

// decoded is what the trigger counts of the decoded message m, counted with count.
func decoded(m *schemas.Message, count tokens.Counter) incoming {
	in := incoming{role: m.Role, tokens: tokens.MessageWith(count, m), toolCallID: m.ToolCallID,
		callIDs: idsOf(m.ToolCalls, func(tc *schemas.ToolCall) string { return tc.ID })}
	if m.Usage != nil {
		in.usage, in.hasUsage = *m.Usage, true
	}
	if m.ContextGeneration != nil {
		in.generation, in.hasGeneration = *m.ContextGeneration, true
	}
	return in
}

// add counts one message and follows the open tool calls of the newest round. It keeps
// m.callIDs.
//
// A reply that carries the usage its model reported, measured on the context of the
// conversation's current generation (context_generation), resets the estimate to what
// the model counted: prompt_tokens + completion_tokens, unless that is under half the
// estimate with the reply counted, which it then keeps (the usage is returned, to be
// logged and counted). Usage measured on an older generation's context is ignored.
//
// It also counts assistant rounds since the last compaction, and marks a tool output
// over tool_output_trigger_tokens for a structural trigger.
func (c *convState) add(m incoming, seq uint64) (ignored ignoredUsage) {
	c.base = min(c.base, seq)
	t := m.tokens
	if u := m.usage; m.hasUsage && m.hasGeneration && m.generation == c.generation && u.PromptTokens > 0 {
		reported, estimate := u.PromptTokens+u.CompletionTokens, c.tokens+t
		if reported < estimate/usageFloorDivisor {
			c.tokens, ignored = estimate, ignoredUsage{reported: reported, estimate: estimate}
		} else {
			c.tokens = reported
		}
	} else {
		c.tokens += t
	}
	if m.role == schemas.RoleAssistant && seq > c.loadedThrough && c.rounds < math.MaxInt32 {
		c.rounds++
	}
	if lim := c.settings.ToolOutputTriggerTokens; lim > 0 && m.role == schemas.RoleTool && t > lim {
		c.structural = fmt.Sprintf("tool output of %d tokens at seq %d > tool_output_trigger_tokens %d", t, seq, lim)
	}
	switch {
	case m.role == schemas.RoleAssistant && len(m.callIDs) > 0:
		// A slice, not a set: a few bytes per call instead of a map's hundreds. An id
		// listed twice is answered by one result (every copy is removed below), and
		// adding is linear however many calls a hostile message lists.
		c.open = m.callIDs
	case m.role == schemas.RoleTool:
		if c.open = slices.DeleteFunc(c.open, func(id string) bool { return id == m.toolCallID }); len(c.open) == 0 {
			c.open = nil
		}
	case m.role == schemas.RoleAssistant:
		c.open = nil // the agent moved on; the round stays incomplete forever
	}
	return ignored
}

// decide says whether the conversation needs compacting and why: the kinds are OR-ed,
// structural first, then the budget rules.
func (c *convState) decide() (kind, reason string) {
	b, s := c.budget, c.settings
	switch {
	case c.structural != "":
		return schemas.TriggerStructural, c.structural
	case c.tokens >= b.ThresholdTokens():
		return schemas.TriggerBudget, fmt.Sprintf("context %d tokens ≥ threshold %d (%g × %d)", c.tokens, b.ThresholdTokens(), b.Threshold, b.ContextWindow)
	case s.TokenLimit > 0 && c.tokens >= s.TokenLimit:
		return schemas.TriggerBudget, fmt.Sprintf("context %d tokens ≥ token_limit %d", c.tokens, s.TokenLimit)
	case s.SoftThreshold > 0 && c.tokens >= int(s.SoftThreshold*float64(b.ContextWindow)):
		return schemas.TriggerBudget, fmt.Sprintf("context %d tokens ≥ soft threshold %d (%g × %d): compacting ahead of time",
			c.tokens, int(s.SoftThreshold*float64(b.ContextWindow)), s.SoftThreshold, b.ContextWindow)
	case s.MaxRounds > 0 && int(c.rounds) >= s.MaxRounds:
		return schemas.TriggerBudget, fmt.Sprintf("%d assistant rounds since the last compaction ≥ max_rounds %d", c.rounds, s.MaxRounds)
	}
	return "", ""
}

// hold says why a request must wait now, "" when it may be queued. regrow is the
// fraction of the window a declined conversation must grow by first.
//
// Past the hard limit neither a failure's backoff nor the retry scheduled for its end
// holds the request back: the worker keeps the bound with its fallback. Nor does a
// decline made under the hard limit, however little the conversation grew since: it
// was declined with the LLM's summary in view, and is now asked for once more with the
// fallback's. A decline past the hard limit still holds (no loop), and so does a
// request in flight (one at a time).
func (c *convState) hold(now time.Time, regrow float64) string {
	hard := c.budget.HardLimitTokens()
	pastHard := c.tokens >= hard
	switch {
	case c.forgotten:
		return "the conversation was forgotten: the state is rebuilt before it asks again"
	case len(c.open) > 0:
		return "tool calls unanswered"
	case now.Before(c.inFlightUntil.time()):
		return "a request is in flight"
	case c.retry != nil && !(pastHard && c.retryWaitsForBackoff(now)):
		return "a retry is scheduled"
	case now.Before(c.backoffUntil.time()) && !pastHard:
		return "backing off after a failure"
	case c.declinedAtSeq > 0 && c.tokens < c.tokensAtDecline+int(regrow*float64(c.budget.ContextWindow)) &&
		!(pastHard && c.tokensAtDecline < hard):
		return "declined; waiting for the conversation to grow"
	}
	return ""
}

// retryWaitsForBackoff reports whether the pending retry is due no sooner than the end
// of a failure's backoff still running: the retry a backoff schedules (request), or a
// later one.
func (c *convState) retryWaitsForBackoff(now time.Time) bool {
	return c.retry != nil && now.Before(c.backoffUntil.time()) && c.retryAt >= c.backoffUntil
}

// failed spaces the next request out after a failed compaction: base doubled per
// failure in a row, at most max.
func (c *convState) failed(now time.Time, base, maxBackoff time.Duration) {
	c.inFlightUntil = 0
	if c.failures < math.MaxInt32 {
		c.failures++
	}
	d := base
	for i := int32(1); i < c.failures && d < maxBackoff; i++ {
		d *= 2
	}
	c.backoffUntil = stampOf(now.Add(min(d, maxBackoff)))
}
