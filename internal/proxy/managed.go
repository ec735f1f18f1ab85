package proxy

import (
	"context"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// Agents manage their own context: they mask old tool outputs, drop old prompts, clear
// old thinking, or replace their history with a summary of it, and send the result as
// their history. Such a history no longer extends the stored one message for message,
// yet it is the same conversation, continued. The rule: a client history that still
// holds the conversation's newest message continues the conversation after it, whatever
// it did to the messages before; one that does not is a regenerate or an edit (a branch).
// Agents edit (rewind to an earlier prompt) by dropping every message after it, the
// newest included.

// minAnchorText is the shortest text of a newest message that a client message holding
// it (an agent's summary, carried into its next history in a message of its own) is
// taken as the copy of.
const minAnchorText = 64

// anchor is the index in msgs of the client's copy of tp's message, -1 when the
// history holds none. A copy is the same message (the same canonical form), found from
// the end; failing that, when the newest message is an assistant's long text (an
// agent's own summary of its history: the reply to its compaction request), a user or
// system message but the last whose text holds that text (or what its <summary>
// element holds). isEarlier, when not nil, says a candidate found as the same message
// is in fact the client's unchanged copy of an earlier stored message of the same
// content (a repeated "Done."): then the history holds no copy of the newest.
func anchor(msgs []schemas.Message, tp tip, isEarlier func(j int) bool) int {
	if tp.empty {
		return -1
	}
	want := Link(Digest{}, &tp.msg)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == tp.msg.Role && Link(Digest{}, &msgs[i]) == want {
			if isEarlier != nil && isEarlier(i) {
				return -1
			}
			return i
		}
	}
	core := summaryCore(&tp.msg)
	if core == "" {
		return -1
	}
	for i := len(msgs) - 2; i >= 0; i-- {
		if r := msgs[i].Role; (r == schemas.RoleUser || r == schemas.RoleSystem) && strings.Contains(msgs[i].Content.String(), core) {
			return i
		}
	}
	return -1
}

// anchorOf is anchor, checked against the stored tail of conv: a candidate at client
// position j+1 whose link equals the stored message's at that position (when that
// message is not the newest) is the client's unchanged copy of that earlier message,
// as when a client regenerates or edits after a reply that repeats an earlier one.
func (s *Store) anchorOf(ctx context.Context, conv string, tp tip, msgs []schemas.Message, chain []Digest) (int, error) {
	var links map[int]Digest
	var err error
	j := anchor(msgs, tp, func(j int) bool {
		if j+1 == tp.pos {
			return false
		}
		if links == nil {
			links, err = s.tailLinks(ctx, conv)
		}
		l, ok := links[j+1]
		return ok && l == chain[j]
	})
	return j, err
}

// tailLinks is the link of each position of conv's stored messages from its live
// value's tail on (all of them when it has none), read from the stream leader.
func (s *Store) tailLinks(ctx context.Context, conv string) (map[int]Digest, error) {
	v, err := s.c.Result(ctx, conv)
	if err != nil {
		return nil, err
	}
	from := uint64(1)
	if v != nil {
		from = v.TailStartSeq
	}
	stored, err := s.entries(ctx, conv, from)
	if err != nil {
		return nil, err
	}
	out := make(map[int]Digest, len(stored))
	for i := range stored {
		if pos, link, ok := position(&stored[i].Message); ok {
			out[pos] = link
		}
	}
	return out, nil
}

// summaryCore is the text a client's message carrying m as its summary holds: the
// content of m's <summary> element when it has one, else m's text; "" when m is not an
// assistant's text of at least minAnchorText bytes.
func summaryCore(m *schemas.Message) string {
	if m.Role != schemas.RoleAssistant || len(m.ToolCalls) > 0 {
		return ""
	}
	text := m.Content.String()
	if open := strings.Index(text, "<summary>"); open >= 0 {
		if end := strings.LastIndex(text, "</summary>"); end > open {
			text = text[open+len("<summary>") : end]
		}
	}
	text = strings.TrimSpace(text)
	if len(text) < minAnchorText {
		return ""
	}
	return text
}

// managedContext is what the model is sent for a client's own view of pl.conv (a
// managed place), read as cx: the client's leading system messages, then Compactor's
// summary with the pinned messages and evidence ahead of the tail (in place of the
// client's messages it covers), then the client's own messages from its copy of the
// first tail message on. The messages of the tail are the client's copies, never the
// stored ones: what the agent masked or dropped is not sent. Never compacted, the
// conversation is sent as the client sent it.
func (s *Store) managedContext(ctx context.Context, pl place, cx *assemble.Context, msgs []schemas.Message) (*assemble.Context, error) {
	lead := 0
	for lead < len(msgs) && msgs[lead].Role == schemas.RoleSystem {
		lead++
	}
	if !cx.HasSummary {
		return withPending(&assemble.Context{}, msgs), nil
	}
	b, err := s.tailStart(ctx, pl, cx, msgs, lead)
	if err != nil {
		return nil, err
	}
	out := withPending(&assemble.Context{Generation: cx.Generation, HasSummary: true, TailStartSeq: cx.TailStartSeq}, msgs[:lead])
	for i, seq := range cx.Seqs {
		if seq == 0 || (seq < cx.TailStartSeq && cx.Messages[i].Role != schemas.RoleSystem) {
			out.Messages = append(out.Messages, cx.Messages[i])
			out.Seqs = append(out.Seqs, seq)
		}
	}
	out.Tokens = tokens.Messages(out.Messages)
	return withPending(out, msgs[max(b, lead):]), nil
}

// maxTailSkip is how many of the client's messages the search for a stored tail
// message's copy passes over (messages the agent inserted) before it takes the stored
// message for dropped.
const maxTailSkip = 16

// tailStart is the index of the client's copy of the oldest message of cx's tail that
// the client still has; at worst the client's copy of the newest message, pl.from-1.
// The stored tail is walked from the newest message back, and the client's history from
// its copy of the newest back, each stored message's copy looked for among the next
// maxTailSkip client messages: the same message, or for a tool result or a tool call
// the one with the same call ids (a masked copy). A stored message with no copy there
// was dropped by the agent. Walking back in step, a message that repeats (a short
// prompt, a call id made of a position and a name) is matched to its own copy, never to
// an earlier one, and the work is linear in the tail.
func (s *Store) tailStart(ctx context.Context, pl place, cx *assemble.Context, msgs []schemas.Message, lead int) (int, error) {
	cursor := pl.from - 1
	if cx.TailStartSeq > pl.at.seq || cursor <= lead {
		return max(cursor, lead), nil
	}
	stored, err := s.st.Chat().LoadLeader(ctx, pl.conv, cx.TailStartSeq, pl.at.seq)
	if err != nil {
		return 0, err
	}
	digests := make([]Digest, cursor)
	known := make([]bool, cursor)
	digest := func(i int) Digest {
		if !known[i] {
			digests[i], known[i] = Link(Digest{}, &msgs[i]), true
		}
		return digests[i]
	}
	b := cursor
	for k := len(stored) - 2; k >= 0 && cursor > lead; k-- { // the newest is msgs[pl.from-1]
		e := stored[k].Entry()
		if e.Err != nil {
			continue
		}
		m := e.Message.StripMetadata()
		want := Link(Digest{}, &m)
		for i := cursor - 1; i >= max(lead, cursor-maxTailSkip); i-- {
			if msgs[i].Role == m.Role && (digest(i) == want || sameCalls(&msgs[i], &m)) {
				cursor, b = i, i
				break
			}
		}
	}
	return b, nil
}

// sameCalls says a and b are the same tool result (the same tool_call_id) or the same
// assistant turn of tool calls (the same call ids, in order), whatever their content.
func sameCalls(a, b *schemas.Message) bool {
	if a.ToolCallID != "" || b.ToolCallID != "" {
		return a.ToolCallID == b.ToolCallID
	}
	if len(a.ToolCalls) == 0 || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		if a.ToolCalls[i].ID != b.ToolCalls[i].ID {
			return false
		}
	}
	return true
}

// lastUser is the index of msgs' last user message, -1 when none.
func lastUser(msgs []schemas.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == schemas.RoleUser {
			return i
		}
	}
	return -1
}
