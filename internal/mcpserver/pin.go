package mcpserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
)

// PinArgs are the pin tool's arguments.
type PinArgs struct {
	Conversation string `json:"conversation,omitempty" jsonschema:"the conversation id"`
	Seq          uint64 `json:"seq" jsonschema:"The sequence number (seq) of the message to keep verbatim, as recall and status show it. A message of a tool round pins the whole round."`
}

// Pinned is the pin tool's answer.
type Pinned struct {
	Conversation string `json:"conversation"`
	Seq          uint64 `json:"seq"`
	// Seqs are the messages this call pins: seq, or every message of its tool round.
	Seqs []uint64 `json:"seqs"`
	// Pins are all the conversation's pins now (its policy's pins key), MaxPins at most.
	Pins    []uint64 `json:"pins"`
	MaxPins int      `json:"max_pins"`
	// AlreadyPinned says every message of Seqs was pinned before (by the pins key, or
	// for good by the value: a system prompt, a meta.pin): nothing was written.
	AlreadyPinned bool `json:"already_pinned,omitempty"`
	// Summarized says the message is covered by the current summary: it comes back
	// verbatim at the next compaction.
	Summarized bool   `json:"summarized"`
	Note       string `json:"note"`
}

// pinWindows are the half-widths of the sequence ranges around a message that the pin
// tool reads to find the whole tool round it belongs to, narrowest first.
var pinWindows = []uint64{16, 256, 4096}

func (s *server) pinDescription() string {
	return fmt.Sprintf("Keep one message of this conversation verbatim through every later compaction: it is never summarized away "+
		"(one the summary already covers comes back verbatim at the next compaction). Give its sequence number seq, as recall "+
		"and status show it; a message of a tool round pins the whole round (the call and all its results). At most %d messages "+
		"may be pinned per conversation: pin only what must stay exact (a spec, a decision, a key file), since pinned messages "+
		"stay in the context and take room from the rest.%s", policy.MaxPins, s.whichConversation())
}

func (s *server) pin(ctx context.Context, _ *mcp.CallToolRequest, in PinArgs) (*mcp.CallToolResult, *Pinned, error) {
	conv, err := s.conversation(in.Conversation)
	if err != nil {
		return nil, nil, err
	}
	if in.Seq == 0 {
		return nil, nil, errors.New("seq must be a message's sequence number (1 or more), as recall and status show it")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.callTimeout())
	defer cancel()
	if err := s.mustExist(ctx, conv); err != nil {
		return nil, nil, err
	}
	seqs, err := s.unitOf(ctx, conv, in.Seq)
	if err != nil {
		return nil, nil, err
	}
	cur, err := s.cl.Policy(ctx, schemas.PolicyRequest{Conversation: conv})
	if err != nil {
		return nil, nil, fmt.Errorf("read the policy of %s: %w", conv, err)
	}
	pins, err := policy.ParsePins(cur.Policy[policy.PinsKey])
	if err != nil {
		return nil, nil, fmt.Errorf("the stored policy of %s: %w", conv, err)
	}
	v, err := s.cl.Result(ctx, conv)
	if err != nil {
		return nil, nil, fmt.Errorf("read the compaction of %s: %w", conv, err)
	}
	// Pinned for good already: the value pins it (its system prompt, a meta.pin, an
	// earlier pin), and not as a message the split kept only this time.
	forGood := func(q uint64) bool {
		return v != nil && slices.Contains(v.PinnedSeqs, q) && !slices.Contains(v.KeptSeqs, q)
	}
	out := &Pinned{Conversation: conv, Seq: in.Seq, Seqs: seqs, MaxPins: policy.MaxPins}
	var add []uint64
	for _, q := range seqs {
		if !slices.Contains(pins, q) && !forGood(q) {
			add = append(add, q)
		}
	}
	if len(pins)+len(add) > policy.MaxPins {
		return nil, nil, fmt.Errorf("cannot pin seq %d: it needs %d more pins (%s), and conversation %s has %d of at most %d; "+
			"pins are not removed by this tool (an operator can change the pins key of its policy)",
			in.Seq, len(add), list(add), conv, len(pins), policy.MaxPins)
	}
	if len(add) == 0 {
		out.AlreadyPinned = true
	} else {
		next := append(slices.Clone(pins), add...)
		slices.Sort(next)
		r, err := s.cl.Policy(ctx, schemas.PolicyRequest{Conversation: conv, Set: map[string]any{policy.PinsKey: policy.FormatPins(next)}})
		if err != nil {
			return nil, nil, fmt.Errorf("set the pins of %s: %w", conv, err)
		}
		if pins, err = policy.ParsePins(r.Policy[policy.PinsKey]); err != nil {
			return nil, nil, fmt.Errorf("the policy of %s after the change: %w", conv, err)
		}
	}
	out.Pins = append([]uint64{}, pins...)
	if v != nil && v.Generation > 0 && in.Seq <= v.CoveredThroughSeq {
		out.Summarized = !slices.Contains(v.PinnedSeqs, in.Seq)
	}
	out.Note = pinNote(out)
	return nil, out, nil
}

// pinNote says what the call did and when it takes effect.
func pinNote(p *Pinned) string {
	var b strings.Builder
	what := fmt.Sprintf("seq %d", p.Seq)
	if len(p.Seqs) > 1 {
		what = fmt.Sprintf("the tool round of seq %d (seq %s)", p.Seq, list(p.Seqs))
	}
	if p.AlreadyPinned {
		fmt.Fprintf(&b, "%s was pinned already", what)
	} else {
		fmt.Fprintf(&b, "pinned %s", what)
	}
	if p.Summarized {
		b.WriteString("; the summary covers it now: it comes back verbatim at the next compaction")
	} else {
		b.WriteString("; from the next compaction on it stays verbatim, never summarized")
	}
	fmt.Fprintf(&b, "; %d of at most %d pins used", len(p.Pins), p.MaxPins)
	return b.String()
}

func list(seqs []uint64) string {
	parts := make([]string, len(seqs))
	for i, q := range seqs {
		parts[i] = fmt.Sprint(q)
	}
	return strings.Join(parts, ", ")
}

// unitOf returns the sequences of the unit holding seq in conv: seq alone, or every
// message of its tool round (the call and all its results, and what landed between
// them), as the workers pin a round. It reads seq alone with the recall operation
// first: a message outside any round comes back; one of a round is left out as
// incomplete in a range of one; nothing at all means seq is not a message of conv.
// A round is then read in widening ranges around seq until it is whole in one; one not
// whole in the widest (its results are not all stored yet) is an error that says so.
func (s *server) unitOf(ctx context.Context, conv string, seq uint64) ([]uint64, error) {
	r, err := s.cl.Recall(ctx, conv, pipeline.FromSeq(seq), pipeline.ToSeq(seq),
		pipeline.MaxTokens(schemas.MaxRecallMaxTokens), pipeline.ScanLimit(s.cfg.ScanLimit))
	if err != nil {
		return nil, fmt.Errorf("read seq %d of %s: %w", seq, conv, err)
	}
	switch {
	case len(r.Messages) == 1 && r.Messages[0].Seq == seq:
		return []uint64{seq}, nil
	case r.CutByBudget || r.CutByPayload:
		return nil, fmt.Errorf("cannot pin seq %d of %s: it is too large to read in one answer", seq, conv)
	case r.Invalid > 0:
		return nil, fmt.Errorf("seq %d of %s is not a valid stored message: it cannot be pinned", seq, conv)
	case r.Incomplete == 0:
		return nil, fmt.Errorf("seq %d is not a message of conversation %s (another conversation's, or none): "+
			"use the seq that recall or status shows", seq, conv)
	}
	for _, w := range pinWindows {
		from := uint64(1)
		if seq > w {
			from = seq - w
		}
		r, err := s.cl.Recall(ctx, conv, pipeline.FromSeq(from), pipeline.ToSeq(seq+w),
			pipeline.MaxTokens(schemas.MaxRecallMaxTokens), pipeline.ScanLimit(s.cfg.ScanLimit))
		if err != nil {
			return nil, fmt.Errorf("read the messages around seq %d of %s: %w", seq, conv, err)
		}
		es := make([]schemas.Entry, 0, len(r.Messages))
		for _, m := range r.Messages {
			es = append(es, schemas.Entry{Seq: m.Seq, Message: m.Message})
		}
		slices.SortFunc(es, func(a, b schemas.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
		if i := slices.IndexFunc(es, func(e schemas.Entry) bool { return e.Seq == seq }); i >= 0 {
			for _, u := range rounds.Units(es) {
				if i >= u.Start && i < u.End {
					out := make([]uint64, 0, u.End-u.Start)
					for _, e := range es[u.Start:u.End] {
						out = append(out, e.Seq)
					}
					return out, nil
				}
			}
		}
		if r.CutByBudget || r.CutByPayload {
			return nil, fmt.Errorf("cannot pin seq %d of %s: the messages around it are too large to read in one answer", seq, conv)
		}
	}
	return nil, fmt.Errorf("cannot pin seq %d of %s: its tool round is not whole (some of its calls have no result yet); "+
		"pin it once every result is in", seq, conv)
}
