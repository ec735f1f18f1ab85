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
// system message whose text holds that text (or what its <summary> element holds).
func anchor(msgs []schemas.Message, tp tip) int {
	if tp.empty {
		return -1
	}
	want := Link(Digest{}, &tp.msg)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == tp.msg.Role && Link(Digest{}, &msgs[i]) == want {
			return i
		}
	}
	core := summaryCore(&tp.msg)
	if core == "" {
		return -1
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if r := msgs[i].Role; (r == schemas.RoleUser || r == schemas.RoleSystem) && strings.Contains(msgs[i].Content.String(), core) {
			return i
		}
	}
	return -1
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
	b, err := s.tailStart(ctx, pl, cx, msgs)
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

// tailStart is the index of the client's copy of the first message of cx's tail that
// the client still has (the same message, or for a tool result or a tool call, the one
// with the same call ids: a masked copy); at worst the client's copy of the newest
// message, pl.from-1.
func (s *Store) tailStart(ctx context.Context, pl place, cx *assemble.Context, msgs []schemas.Message) (int, error) {
	anchorAt := pl.from - 1
	if cx.TailStartSeq > pl.at.seq {
		return anchorAt, nil
	}
	stored, err := s.st.Chat().LoadLeader(ctx, pl.conv, cx.TailStartSeq, pl.at.seq)
	if err != nil {
		return 0, err
	}
	for _, sm := range stored {
		e := sm.Entry()
		if e.Err != nil {
			continue
		}
		m := e.Message.StripMetadata()
		want := Link(Digest{}, &m)
		for i := 0; i < anchorAt; i++ {
			if msgs[i].Role == m.Role && (Link(Digest{}, &msgs[i]) == want || sameCalls(&msgs[i], &m)) {
				return i, nil
			}
		}
	}
	return anchorAt, nil
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
