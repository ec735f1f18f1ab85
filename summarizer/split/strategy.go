package split

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// The strategies, by the names users choose them with (COMPACTOR_STRATEGY or the policy
// key strategy).
const (
	// StrategyKeepLastN keeps the last N messages within the tail budget, in whole tool
	// rounds (FabrCore).
	StrategyKeepLastN = "keep-last-n"
	// StrategyToolRounds keeps the last K complete rounds (AgentSmith).
	StrategyToolRounds = "tool-rounds"
	// StrategyUserMessages keeps real user messages newest first up to a token budget and
	// summarizes everything else; the summary follows them (Codex CLI).
	StrategyUserMessages = "user-messages"
	// StrategyTokenFraction keeps the newest fraction of tokens, split just before a user
	// message (Gemini CLI).
	StrategyTokenFraction = "token-fraction"
	// StrategyRecentTurns keeps the last N turns within a share of the usable context
	// (OpenCode).
	StrategyRecentTurns = "recent-turns"
	// StrategyAll summarizes the whole history (Crabtalk).
	StrategyAll = "all"
)

// Strategies lists every strategy name.
var Strategies = []string{StrategyKeepLastN, StrategyToolRounds, StrategyUserMessages,
	StrategyTokenFraction, StrategyRecentTurns, StrategyAll}

// Knobs are the strategies' settings; DefaultKnobs gives the field's defaults.
type Knobs struct {
	KeepLastN         int     // keep-last-n: messages kept (20)
	ToolRounds        int     // tool-rounds: complete rounds kept (2)
	UserMessageTokens int     // user-messages: tokens of user messages kept (20,000)
	TokenFraction     float64 // token-fraction: share of the tokens kept (0.3)
	RecentTurns       int     // recent-turns: turns kept (2)
	RecentTurnsShare  float64 // recent-turns: share of the usable context W − summary cap (0.25)
	RecentTurnsMin    int     // recent-turns: lower clamp in tokens (2,000)
	RecentTurnsMax    int     // recent-turns: upper clamp in tokens (8,000)
}

// DefaultKnobs returns the defaults of the README.
func DefaultKnobs() Knobs {
	return Knobs{KeepLastN: 20, ToolRounds: 2, UserMessageTokens: 20000, TokenFraction: 0.3,
		RecentTurns: 2, RecentTurnsShare: 0.25, RecentTurnsMin: 2000, RecentTurnsMax: 8000}
}

// Validate checks the knobs.
func (k Knobs) Validate() error {
	switch {
	case k.KeepLastN < 1:
		return fmt.Errorf("keep_last_n must be at least 1, got %d", k.KeepLastN)
	case k.ToolRounds < 1:
		return fmt.Errorf("tool_rounds must be at least 1, got %d", k.ToolRounds)
	case k.UserMessageTokens < 0:
		return fmt.Errorf("user_message_tokens must not be negative, got %d", k.UserMessageTokens)
	case !(k.TokenFraction > 0 && k.TokenFraction < 1):
		return fmt.Errorf("token_fraction must be between 0 and 1, got %g", k.TokenFraction)
	case k.RecentTurns < 1:
		return fmt.Errorf("recent_turns must be at least 1, got %d", k.RecentTurns)
	case !(k.RecentTurnsShare > 0 && k.RecentTurnsShare <= 1):
		return fmt.Errorf("recent_turns_share must be in (0, 1], got %g", k.RecentTurnsShare)
	case k.RecentTurnsMin < 0 || k.RecentTurnsMax < k.RecentTurnsMin:
		return fmt.Errorf("recent_turns clamp [%d, %d] is not a range", k.RecentTurnsMin, k.RecentTurnsMax)
	}
	return nil
}

// Input is what a strategy chooses from.
type Input struct {
	// Entries are the candidates, in sequence order: the messages a previous
	// user-messages split kept ahead of the summary, then everything from the current
	// tail start on.
	Entries []schemas.Entry
	// Pinned marks the entries that stay verbatim whatever the strategy (see Pinned).
	Pinned []bool
	// Carried is how many entries Entries starts with that a previous user-messages
	// split kept ahead of the summary (they come before the current tail start, with
	// older sequences than it). The tail never starts among them: when a strategy's tail
	// would reach into them, the ones it reaches are kept again (in Keep) and the tail
	// starts at index Carried, so tail_start_seq never moves back. 0 when there are none.
	Carried int
	// OtherPinnedTokens counts pinned messages outside Entries (pinned by earlier
	// generations).
	OtherPinnedTokens int
	Budget            budget.Budget
	Knobs             Knobs
	// Counter counts tokens (nil: chars/4); OtherPinnedTokens must be counted with it.
	Counter tokens.Counter
}

// Split is a strategy's answer.
type Split struct {
	// TailStart is the index in Entries where the verbatim tail starts; len(Entries)
	// leaves no tail.
	TailStart int
	// Keep lists indices below TailStart, not pinned and valid, that stay verbatim ahead
	// of the summary (user-messages, or carried entries a tail would reach); in order.
	// Writers list their sequences in pinned_seqs, so readers show them before the
	// summary.
	Keep []int
	// Overrides truncate kept messages (by sequence) so they fit. They are the whole
	// answer for the sequences of Entries: an override an earlier generation wrote for
	// one of them no longer applies.
	Overrides []schemas.Override
}

// TailBudget is what the tail and the kept messages may use together:
// target × W − every pinned message − the summary cap.
func (in Input) TailBudget() int {
	pinned := in.OtherPinnedTokens
	for i := range in.Entries {
		if i < len(in.Pinned) && in.Pinned[i] && in.Entries[i].Err == nil {
			pinned += messageTokens(in.Counter, &in.Entries[i])
		}
	}
	return in.Budget.TailBudget(pinned)
}

func messageTokens(c tokens.Counter, e *schemas.Entry) int { return tokens.MessageWith(c, &e.Message) }

// Apply runs the named strategy (see Strategies; each is documented on its function in
// strategies.go). Every strategy keeps the pinned entries out of the summary and out of
// Keep, starts the tail at a unit boundary (rounds.IsBoundary), keeps a round still
// waiting for results at the end in the tail whatever its size, never keeps an invalid
// entry, and keeps the tail (pinned entries excepted) plus the kept messages (after their
// overrides) within TailBudget, unless that open round alone is over it.
//
// Knobs must pass Validate (start from DefaultKnobs); a bad knob or Carried is an
// ErrInvalidInput, an unknown name an ErrUnknownStrategy.
func Apply(strategy string, in Input) (Split, error) {
	if !slices.Contains(Strategies, strategy) {
		return Split{}, fmt.Errorf("%w %q (known: %v)", ErrUnknownStrategy, strategy, Strategies)
	}
	if err := in.Knobs.Validate(); err != nil {
		return Split{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	v := newView(in.Entries, in.Pinned, in.TailBudget(), in.Counter)
	if err := v.checkCarried(in.Carried); err != nil {
		return Split{}, err
	}
	k := in.Knobs
	var s Split
	switch strategy {
	case StrategyKeepLastN:
		s.TailStart = v.lastN(k.KeepLastN)
	case StrategyToolRounds:
		s.TailStart = v.toolRounds(k.ToolRounds)
	case StrategyUserMessages:
		s = v.userMessages(k.UserMessageTokens)
	case StrategyTokenFraction:
		s.TailStart = v.tokenFraction(k.TokenFraction)
	case StrategyRecentTurns:
		s.TailStart = v.recentTurns(k.RecentTurns, recentTurnsLimit(in.Budget, k, v.budget))
	case StrategyAll:
		s.TailStart = v.all()
	}
	return v.carry(s, in.Carried), nil
}

// checkCarried checks that the carried entries end at a unit boundary before the round
// that must stay.
func (v *view) checkCarried(carried int) error {
	if carried < 0 || carried > v.open {
		return fmt.Errorf("%w: carried %d is outside [0, %d]", ErrInvalidInput, carried, v.open)
	}
	_, found := slices.BinarySearchFunc(v.units, carried, func(u rounds.Unit, k int) int { return cmp.Compare(u.Start, k) })
	if !found && carried != 0 && carried != len(v.es) {
		return fmt.Errorf("%w: the %d carried entries end inside a tool round", ErrInvalidInput, carried)
	}
	return nil
}

// carry moves a tail that starts among the carried entries to the first entry after
// them, keeping the carried entries it reached ahead of the summary again.
func (v *view) carry(s Split, carried int) Split {
	if s.TailStart >= carried {
		return s
	}
	for i := s.TailStart; i < carried; i++ {
		if v.es[i].Err == nil && !v.isPinned(i) {
			s.Keep = append(s.Keep, i)
		}
	}
	s.TailStart = carried
	return s
}
