package schemas

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The savings ledger: what the proxy sent a model and what it would have sent, per
// exchange (one HTTP request of a conversation's turn), kept in the LEDGER stream on
// ledger.<conv>, so that what Compactor saves (or costs) is measured on a team's own
// traffic. Each exchange is written twice, under the same ID: LedgerSent before the
// request goes upstream (what was sent, and what the other mode would have sent), then
// LedgerDone once the upstream's reply is whole (what the upstream reported). A crash
// between the two leaves the sent entry alone: the exchange is still counted, from its
// estimates, and marked unsettled. Each write carries a message id (ID/phase): written
// twice within the stream's duplicate window, it is stored once.

// Phases of a ledger entry.
const (
	LedgerSent = "sent"
	LedgerDone = "done"
)

// Modes of the proxy an exchange ran in.
const (
	// LedgerRewrite: the compacted context went upstream (COMPACTOR_PROXY_MODE=rewrite).
	LedgerRewrite = "rewrite"
	// LedgerShadow: the client's request went upstream as sent; the compacted one was
	// built and counted, not sent (COMPACTOR_PROXY_MODE=shadow).
	LedgerShadow = "shadow"
)

// LedgerVersion is the version of the entry's format this release writes.
const LedgerVersion = 1

// Bounds of a ledger entry's strings and counts.
const (
	MaxLedgerName   = 128
	MaxLedgerTokens = 1 << 40
)

// LedgerEntry is one phase of one exchange.
type LedgerEntry struct {
	V     int    `json:"v"`
	ID    string `json:"id"`
	Phase string `json:"phase"`
	// At is when the proxy wrote the entry.
	At           time.Time `json:"at"`
	Conversation string    `json:"conversation"`
	Mode         string    `json:"mode"`
	// API is the wire (openai, anthropic, responses, gemini); Model the model the
	// client asked for; Client the agent, from its User-Agent (its product name) or the
	// X-Compactor-Client header.
	API    string `json:"api"`
	Model  string `json:"model,omitempty"`
	Client string `json:"client,omitempty"`

	// The sent phase: estimates (chars/4 and the conversation's tokenizer, as the
	// trigger counts) of the two requests an exchange has.
	//
	// ClientTokens is the client's request as it came (its messages and the rest of its
	// body): what the model is sent without Compactor. CompactedTokens is the compacted
	// request: what the model is sent with Compactor. In rewrite mode the compacted one
	// went upstream, in shadow mode the client's.
	ClientTokens    int64 `json:"client_tokens,omitempty"`
	CompactedTokens int64 `json:"compacted_tokens,omitempty"`
	// ClientPrefixTokens and CompactedPrefixTokens are how much of each request's
	// messages is the same, from the start, as the conversation's previous request of
	// the same kind made within the prompt cache's life (COMPACTOR_PROXY_CACHE_TTL):
	// what a provider's prompt cache could serve. 0 when there was none.
	ClientPrefixTokens    int64 `json:"client_prefix_tokens,omitempty"`
	CompactedPrefixTokens int64 `json:"compacted_prefix_tokens,omitempty"`
	// Generation is the compaction generation of the compacted context; Swap says its
	// prefix changed since the conversation's previous request (a compaction swapped
	// in): the cache writes of this exchange are the compaction's.
	Generation uint64 `json:"generation,omitempty"`
	Swap       bool   `json:"swap,omitempty"`
	// WouldAnswer, in shadow mode, says rewrite mode would have answered the request
	// itself from the summary (an agent's request to summarize its conversation),
	// calling no model: the compacted side of the exchange is nothing.
	WouldAnswer bool `json:"would_answer,omitempty"`

	// The done phase: the upstream's answer.
	//
	// Status is its HTTP status; Usage what it reported (nil when it reported none);
	// Answered says Compactor answered the request itself (an agent's request to
	// summarize its conversation), calling no model.
	Status   int          `json:"status,omitempty"`
	Usage    *LedgerUsage `json:"usage,omitempty"`
	Answered bool         `json:"answered,omitempty"`
}

// LedgerUsage is what an upstream reported for one call, in every API's terms: Input is
// every input token, cached ones included (OpenAI prompt_tokens; Anthropic
// input_tokens + cache_read_input_tokens + cache_creation_input_tokens; Gemini
// promptTokenCount); CacheRead the part served from the prompt cache (OpenAI
// cached_tokens, Anthropic cache_read_input_tokens, Gemini cachedContentTokenCount);
// CacheWrite the part written to it (Anthropic cache_creation_input_tokens).
type LedgerUsage struct {
	Input      int64 `json:"input"`
	CacheRead  int64 `json:"cache_read,omitempty"`
	CacheWrite int64 `json:"cache_write,omitempty"`
	Output     int64 `json:"output"`
}

// Validate checks an entry as read from the ledger: whoever wrote it, its fields are
// bounded and consistent, and its conversation is a valid id. A reader skips (and
// counts) an entry that fails.
func (e *LedgerEntry) Validate() error {
	switch {
	case e.V != LedgerVersion:
		return invalid("v", "%d; this version reads %d", e.V, LedgerVersion)
	case len(e.ID) < 16 || len(e.ID) > 64 || !isIDChars(e.ID):
		return invalid("id", "want 16-64 characters of [A-Za-z0-9_-]")
	case e.Phase != LedgerSent && e.Phase != LedgerDone:
		return invalid("phase", "%q; want sent or done", e.Phase)
	case e.Mode != LedgerRewrite && e.Mode != LedgerShadow:
		return invalid("mode", "%q; want rewrite or shadow", e.Mode)
	case e.At.IsZero():
		return invalid("at", "missing")
	}
	if err := ValidateConversationID(e.Conversation); err != nil {
		return err
	}
	for name, s := range map[string]string{"api": e.API, "model": e.Model, "client": e.Client} {
		if len(s) > MaxLedgerName || !utf8.ValidString(s) || strings.IndexFunc(s, unprintable) >= 0 {
			return invalid(name, "want at most %d bytes of UTF-8 without control or format characters", MaxLedgerName)
		}
	}
	for name, n := range map[string]int64{"client_tokens": e.ClientTokens, "compacted_tokens": e.CompactedTokens,
		"client_prefix_tokens": e.ClientPrefixTokens, "compacted_prefix_tokens": e.CompactedPrefixTokens} {
		if n < 0 || n > MaxLedgerTokens {
			return invalid(name, "%d; want 0 to %d", n, int64(MaxLedgerTokens))
		}
	}
	if e.ClientPrefixTokens > e.ClientTokens || e.CompactedPrefixTokens > e.CompactedTokens {
		return invalid("prefix_tokens", "a prefix longer than its request")
	}
	if u := e.Usage; u != nil {
		for name, n := range map[string]int64{"usage.input": u.Input, "usage.cache_read": u.CacheRead,
			"usage.cache_write": u.CacheWrite, "usage.output": u.Output} {
			if n < 0 || n > MaxLedgerTokens {
				return invalid(name, "%d; want 0 to %d", n, int64(MaxLedgerTokens))
			}
		}
		if u.CacheRead+u.CacheWrite > u.Input {
			return invalid("usage", "cache_read %d + cache_write %d over input %d", u.CacheRead, u.CacheWrite, u.Input)
		}
	}
	if e.WouldAnswer && e.Mode != LedgerShadow {
		return invalid("would_answer", "only in shadow mode")
	}
	if e.Status < 0 || e.Status > 999 {
		return invalid("status", "%d; want an HTTP status", e.Status)
	}
	return nil
}

// MsgID is the entry's message id: a write made twice within the stream's duplicate
// window is stored once.
func (e *LedgerEntry) MsgID() string { return e.ID + "/" + e.Phase }

// DecodeLedgerEntry decodes and validates one stored entry.
func DecodeLedgerEntry(data []byte) (*LedgerEntry, error) {
	if len(data) > MaxLedgerEntryBytes {
		return nil, fmt.Errorf("ledger entry of %d bytes, over %d", len(data), MaxLedgerEntryBytes)
	}
	var e LedgerEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("ledger entry: %w", err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// MaxLedgerEntryBytes bounds one encoded entry.
const MaxLedgerEntryBytes = 4096

// unprintable reports a control character (an escape, a newline) or a format one (a
// bidirectional override): a name that holds one could rewrite a terminal's or a
// table's output.
func unprintable(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }
