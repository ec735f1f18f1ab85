package recall

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// Options configure a selection.
type Options struct {
	// Query is the text to find (case-insensitive substring); "" matches everything.
	Query string
	// MaxTokens is the budget of the selected messages; 0 or less:
	// schemas.DefaultRecallMaxTokens.
	MaxTokens int
	// Counter counts text tokens; nil: chars/4 (tokens.Chars4).
	Counter tokens.Counter
	// MaxBytes bounds the JSON bytes of the selected messages (the answer's size
	// without its other fields); 0 or less: no bound but the budget's. A unit that
	// does not fit the bytes left is skipped like one over the budget, but sets
	// CutByPayload.
	MaxBytes int
	// StubMatches tells whether a stub (a message whose content is stored as an
	// object) holds the query, which its own fields do not show: the reader fetches
	// the object to find out (one at a time, dropping it again). nil: the stub's own
	// fields are matched.
	StubMatches func(e *schemas.Entry) bool
}

// Selector accumulates a recall over chunks of entries given newest chunk first.
type Selector struct {
	query       string // lower case
	counter     tokens.Counter
	maxBytes    int
	bytes       int // the JSON bytes of out.Messages, a stub counted with its object
	stubMatches func(e *schemas.Entry) bool
	out         schemas.RecallResponse
}

// NewSelector returns an empty selection.
func NewSelector(o Options) *Selector {
	if o.MaxTokens <= 0 {
		o.MaxTokens = schemas.DefaultRecallMaxTokens
	}
	if o.Counter == nil {
		o.Counter = tokens.Chars4{}
	}
	return &Selector{query: strings.ToLower(o.Query), counter: o.Counter, maxBytes: o.MaxBytes, stubMatches: o.StubMatches,
		out: schemas.RecallResponse{MaxTokens: o.MaxTokens, Messages: []schemas.RecalledMessage{}}}
}

// Select is a whole selection over es (one chunk, in stream order).
func Select(es []schemas.Entry, o Options) schemas.RecallResponse {
	s := NewSelector(o)
	s.Add(es)
	return s.Result()
}

// Carry returns k such that es[:k] may belong to a tool round that starts before es[0]
// (the results of calls made in an older chunk, and what landed between them): the
// reader appends them to the next older chunk's entries instead of selecting them now. A round ends at the next assistant message, so k is at most the index of the
// first one; k is 0 when es[:k] holds no tool message.
func Carry(es []schemas.Entry) int {
	k, tool := 0, false
	for ; k < len(es); k++ {
		e := &es[k]
		if e.Err != nil {
			continue
		}
		if e.Message.Role == schemas.RoleAssistant {
			break
		}
		if e.Message.Role == schemas.RoleTool {
			tool = true
		}
	}
	if !tool {
		return 0
	}
	return k
}

// Add selects from the next chunk: entries in stream order, all older than those of
// the chunks added before (after Carry's part of those was moved into this one).
func (s *Selector) Add(es []schemas.Entry) {
	us := rounds.Units(es)
	for i := len(us) - 1; i >= 0; i-- {
		u := us[i]
		switch u.Kind {
		case rounds.Invalid:
			s.out.Invalid++
		case rounds.Orphan:
			s.out.Incomplete++
		case rounds.Single:
			s.take(es[u.Start:u.End])
		case rounds.Round:
			s.round(es[u.Start:u.End], u.Complete)
		}
	}
}

// round selects a round: whole when complete; otherwise its call and results are left
// out and the messages that landed inside it are units of their own.
func (s *Selector) round(es []schemas.Entry, complete bool) {
	calls := make(map[string]bool, len(es[0].Message.ToolCalls))
	for _, tc := range es[0].Message.ToolCalls {
		calls[tc.ID] = true
	}
	if !complete {
		for k := len(es) - 1; k >= 1; k-- {
			switch e := &es[k]; {
			case e.Err != nil:
				s.out.Invalid++
			case e.Message.Role == schemas.RoleTool:
				s.out.Incomplete++
			default:
				s.take(es[k : k+1])
			}
		}
		s.out.Incomplete++ // the call
		return
	}
	unit := make([]schemas.Entry, 0, len(es))
	for k := range es {
		e := &es[k]
		switch {
		case e.Err != nil:
			s.out.Invalid++
		case k > 0 && e.Message.Role == schemas.RoleTool && !calls[e.Message.ToolCallID]:
			s.out.Incomplete++ // a second result for a call, or one for no call of this round
		default:
			if k > 0 && e.Message.Role == schemas.RoleTool {
				delete(calls, e.Message.ToolCallID)
			}
			unit = append(unit, *e)
		}
	}
	s.take(unit)
}

// take selects one unit when it matches and fits the budget and the bytes left. A
// stub is weighed by its reference (Weigh, Bytes) and selected as it is: the reader
// fetches the objects of what was selected only (ResolveStubs).
func (s *Selector) take(unit []schemas.Entry) {
	if !s.matches(unit) {
		return
	}
	s.out.Matched += len(unit)
	n, size := 0, 0
	for k := range unit {
		n += Weigh(s.counter, &unit[k].Message)
		size += Bytes(unit[k].Seq, &unit[k].Message)
	}
	overBudget := s.out.Tokens+n > s.out.MaxTokens
	overBytes := s.maxBytes > 0 && s.bytes+size > s.maxBytes
	if overBudget || overBytes {
		s.out.CutByBudget = s.out.CutByBudget || overBudget
		s.out.CutByPayload = s.out.CutByPayload || (overBytes && !overBudget)
		if len(s.out.SkippedSeqs) < schemas.MaxRecallSkippedSeqs {
			s.out.SkippedSeqs = append(s.out.SkippedSeqs, unit[0].Seq)
		}
		return
	}
	s.out.Tokens += n
	s.bytes += size
	for k := range unit {
		e := &unit[k]
		s.out.Messages = append(s.out.Messages, schemas.RecalledMessage{Seq: e.Seq, Message: e.Message.StripMetadata(),
			Tokens: Weigh(s.counter, &e.Message)})
	}
	s.out.Returned += len(unit)
}

// Weigh is a message's weight against a recall's budget (tokens.MessageWith); a stub
// weighs at least its own fields and its object's bytes over 4, whatever its reference
// declares, so what a stub is selected for is never far below what its object holds.
func Weigh(c tokens.Counter, m *schemas.Message) int {
	n := tokens.MessageWith(c, m)
	if ref := m.ContentRef; ref != nil {
		own := *m
		own.ContentRef, own.Tokens, own.Content = nil, 0, schemas.Content{}
		n = max(n, tokens.EstimateWith(c, &own)+int((ref.Size+3)/4))
	}
	return n
}

// Bytes is the size of a message in a recall answer: its JSON with the leading seq
// field and a separator; a stub counts its object's bytes too (an upper bound of the
// message once restored).
func Bytes(seq uint64, m *schemas.Message) int {
	sm := m.StripMetadata()
	body, err := sm.Encode()
	n := len(body) + len(`{"seq":,`) + len(strconv.FormatUint(seq, 10))
	if err != nil {
		n = 0
	}
	if ref := m.ContentRef; ref != nil {
		n += int(ref.Size)
	}
	return n
}

func (s *Selector) matches(unit []schemas.Entry) bool {
	if s.query == "" {
		return true
	}
	for k := range unit {
		e := &unit[k]
		if e.Message.ContentRef != nil && s.stubMatches != nil {
			if s.stubMatches(e) {
				return true
			}
			continue
		}
		if matchLower(&e.Message, s.query) {
			return true
		}
	}
	return false
}

// Matches reports whether m holds query in its text, name, reasoning, tool_call_id, or
// a tool call's name or arguments, ignoring case. Every message holds "".
func Matches(m *schemas.Message, query string) bool {
	return query == "" || matchLower(m, strings.ToLower(query))
}

// matchLower is Matches for a non-empty query already in lower case.
func matchLower(m *schemas.Message, lowerQuery string) bool {
	has := func(s string) bool { return s != "" && strings.Contains(strings.ToLower(s), lowerQuery) }
	if has(m.Content.String()) || has(m.Name) || has(m.Reasoning) || has(m.ToolCallID) {
		return true
	}
	for _, tc := range m.ToolCalls {
		if has(tc.Function.Name) || has(tc.Function.Arguments) {
			return true
		}
	}
	return false
}

// ResolveStubs restores the selected stubs with fetch, which returns the whole message
// (what the stub and its object hold), or ok false when the object is gone, corrupt or
// refused: the unit holding that stub is then left out, the stub counted invalid and
// the unit's other messages incomplete. An error of fetch stops it and is returned.
// Called once the selection is over, it fetches only what is returned.
func (s *Selector) ResolveStubs(fetch func(seq uint64, stub *schemas.Message) (m schemas.Message, ok bool, err error)) error {
	msgs := s.out.Messages
	out := make([]schemas.RecalledMessage, 0, len(msgs))
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && msgs[end].Seq > msgs[end-1].Seq {
			end++
		}
		unit, ok, err := s.resolveUnit(msgs[start:end], fetch)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, unit...)
		}
		start = end
	}
	s.out.Messages = out
	return nil
}

// resolveUnit restores the stubs of one selected unit; ok false: one's object is gone
// and the unit was taken out of the counts.
func (s *Selector) resolveUnit(unit []schemas.RecalledMessage, fetch func(uint64, *schemas.Message) (schemas.Message, bool, error)) ([]schemas.RecalledMessage, bool, error) {
	resolved := slices.Clone(unit)
	for i := range resolved {
		r := &resolved[i]
		if r.Message.ContentRef == nil {
			continue
		}
		m, ok, err := fetch(r.Seq, &r.Message)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			for _, u := range unit {
				s.out.Tokens -= u.Tokens
			}
			s.out.Returned -= len(unit)
			s.out.Invalid++
			s.out.Incomplete += len(unit) - 1
			if len(s.out.SkippedSeqs) < schemas.MaxRecallSkippedSeqs {
				s.out.SkippedSeqs = append(s.out.SkippedSeqs, unit[0].Seq)
			}
			return nil, false, nil
		}
		n := Weigh(s.counter, &m)
		m = m.StripMetadata()
		s.out.Tokens += n - r.Tokens
		r.Message, r.Tokens = m, n
	}
	return resolved, true, nil
}

// Result returns the selection so far. The reader sets Conversation and the scan fields.
func (s *Selector) Result() schemas.RecallResponse { return s.out }

// FitBytes drops the oldest units of r (whole rounds) until r encodes as JSON in at
// most limit bytes, and reports whether it dropped any: then r.CutByPayload is set and
// the dropped units' first sequences follow those of SkippedSeqs, newest first. A unit starts where the
// sequences step back (inside a round they grow, from one unit to the next older one
// they fall).
func FitBytes(r *schemas.RecallResponse, limit int) (bool, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return false, err
	}
	if len(b) <= limit {
		return false, nil
	}
	r.CutByPayload = true
	budgetSkipped := r.SkippedSeqs
	var dropped []uint64 // oldest first
	for len(b) > limit && len(r.Messages) > 0 {
		// Drop the oldest units whose bytes the excess needs, then measure again (the
		// skipped sequences add a few bytes).
		excess := len(b) - limit
		end := len(r.Messages)
		for end > 0 && excess > 0 {
			start := end - 1
			for start > 0 && r.Messages[start-1].Seq < r.Messages[start].Seq {
				start--
			}
			for i := start; i < end; i++ {
				m, err := json.Marshal(r.Messages[i])
				if err != nil {
					return false, err
				}
				excess -= len(m) + 1
				r.Tokens -= r.Messages[i].Tokens
			}
			dropped = append(dropped, r.Messages[start].Seq)
			end = start
		}
		r.Returned -= len(r.Messages) - end
		r.Messages = r.Messages[:end]
		r.SkippedSeqs = slices.Clone(budgetSkipped)
		for i := len(dropped) - 1; i >= 0 && len(r.SkippedSeqs) < schemas.MaxRecallSkippedSeqs; i-- {
			r.SkippedSeqs = append(r.SkippedSeqs, dropped[i])
		}
		if b, err = json.Marshal(r); err != nil {
			return false, err
		}
	}
	return true, nil
}
