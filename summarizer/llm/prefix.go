package llm

import (
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/summary"
)

// The request shapes (Config.RequestShape).
const (
	// ShapePrefix sends the agent's own messages as chat messages, in the order its
	// reader shows them (pinned messages, the previous summary's message, the newly
	// covered messages with their tool calls and tool results), and the instruction
	// last, as a user message. The request starts like the agent's own, so an endpoint
	// with prefix caching bills that part as cached input. The default.
	ShapePrefix = "prefix"
	// ShapeTranscript sends the summarizer's prompt as the system message and
	// everything to summarize in one user message, in escaped tagged blocks. For
	// endpoints that refuse tool messages or tool calls in a request without tool
	// definitions.
	ShapeTranscript = "transcript"
)

// RequestShapes lists the values of Config.RequestShape.
var RequestShapes = []string{ShapePrefix, ShapeTranscript}

// prefixRequest is the messages of a request in the prefix shape: the agent's prefix
// (prefixMessages), then the instruction as the last message.
func prefixRequest(in summary.Input, maxTokens int) []openai.ChatCompletionMessage {
	msgs := prefixMessages(in)
	return append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: instructionMessage(in.Instructions, maxTokens)})
}

// prefixMessages is what comes before the instruction: in.Pinned (or, without them,
// in.SystemPrompt as a system message), the previous summary's message (in.SummaryMessage,
// or one rendered like readers do when only in.PreviousSummary is given), and
// in.Messages, converted by chatMessages.
func prefixMessages(in summary.Input) []openai.ChatCompletionMessage {
	n := len(in.Pinned) + 1 + len(in.Messages)
	all := make([]schemas.Message, 0, n)
	switch {
	case len(in.Pinned) > 0:
		all = append(all, in.Pinned...)
	case strings.TrimSpace(in.SystemPrompt) != "":
		all = append(all, schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text(in.SystemPrompt)})
	}
	switch {
	case in.SummaryMessage != nil:
		all = append(all, *in.SummaryMessage)
	case strings.TrimSpace(in.PreviousSummary) != "":
		all = append(all, assemble.SummaryMessage(&schemas.Result{Summary: in.PreviousSummary}))
	}
	all = append(all, in.Messages...)
	return chatMessages(all)
}

// chatMessages converts messages to what go-openai sends, keeping each one's role, name,
// text, tool calls and tool call id, so the JSON is the agent's own. Content parts
// other than text become text placeholders ([image], [audio], [file]): the summarizer
// needs no vision model. Reasoning and extra fields are not sent (several endpoints
// refuse reasoning in input messages).
//
// OpenAI-compatible endpoints refuse a tool message that does not answer a call of the
// assistant message just before it, and an assistant message whose calls are not all
// answered right after it. Such a message (input from a caller that did not keep rounds
// whole, or a round split between chunks) is sent as text instead: the assistant
// message with its calls written out, the tool result as a user message naming the
// call. Nothing is dropped.
func chatMessages(msgs []schemas.Message) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(msgs))
	callNames := make(map[string]string)
	for i := 0; i < len(msgs); i++ {
		m := &msgs[i]
		if m.Role == schemas.RoleAssistant && len(m.ToolCalls) > 0 {
			for _, tc := range m.ToolCalls {
				callNames[tc.ID] = tc.Function.Name
			}
			end := roundEnd(msgs, i)
			if end < 0 {
				out = append(out, callsAsText(m))
				continue
			}
			out = append(out, chatMessage(m))
			for k := i + 1; k < end; k++ {
				out = append(out, chatMessage(&msgs[k]))
			}
			i = end - 1
			continue
		}
		if m.Role == schemas.RoleTool {
			out = append(out, resultAsText(m, callNames[m.ToolCallID]))
			continue
		}
		out = append(out, chatMessage(m))
	}
	return out
}

// roundEnd is the index after the tool messages that follow the assistant message at
// i, when they answer each of its calls exactly once and nothing else; otherwise -1.
func roundEnd(msgs []schemas.Message, i int) int {
	open := make(map[string]bool, len(msgs[i].ToolCalls))
	for _, tc := range msgs[i].ToolCalls {
		if tc.ID == "" || open[tc.ID] {
			return -1
		}
		open[tc.ID] = true
	}
	k := i + 1
	for ; k < len(msgs) && msgs[k].Role == schemas.RoleTool; k++ {
		if !open[msgs[k].ToolCallID] {
			return -1
		}
		delete(open, msgs[k].ToolCallID)
	}
	if len(open) > 0 {
		return -1
	}
	return k
}

// chatMessage is one message as the agent's reader shows it, for go-openai.
func chatMessage(m *schemas.Message) openai.ChatCompletionMessage {
	c := openai.ChatCompletionMessage{Role: string(m.Role), Name: m.Name, ToolCallID: m.ToolCallID}
	if m.Content.IsParts() {
		c.MultiContent = partsOf(m.Content)
	} else {
		c.Content = m.Content.String()
	}
	for _, tc := range m.ToolCalls {
		typ := openai.ToolType(tc.Type)
		if typ == "" {
			typ = openai.ToolTypeFunction
		}
		c.ToolCalls = append(c.ToolCalls, openai.ToolCall{ID: tc.ID, Type: typ,
			Function: openai.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
	}
	if c.Content == "" && len(c.MultiContent) == 0 && len(c.ToolCalls) == 0 {
		// Endpoints refuse a message without content, unless it is an assistant's
		// message with tool calls.
		c.Content = "[empty message]"
	}
	return c
}

// partsOf is array content as text parts: text parts as they are, every other part as
// its placeholder.
func partsOf(content schemas.Content) []openai.ChatMessagePart {
	parts, err := content.Parts()
	if err != nil {
		return []openai.ChatMessagePart{{Type: openai.ChatMessagePartTypeText, Text: "[unreadable content]"}}
	}
	out := make([]openai.ChatMessagePart, 0, len(parts))
	for _, p := range parts {
		text := p.Text
		if p.Type != "text" {
			text = p.Placeholder()
		}
		out = append(out, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: text})
	}
	if len(out) == 0 {
		out = append(out, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: "[empty message]"})
	}
	return out
}

// callsAsText is an assistant message whose calls cannot be sent as calls: its text,
// then each call written out.
func callsAsText(m *schemas.Message) openai.ChatCompletionMessage {
	var b strings.Builder
	if text := strings.TrimSpace(content(m.Content)); text != "" {
		b.WriteString(text)
		b.WriteString("\n")
	}
	for _, tc := range m.ToolCalls {
		b.WriteString("[called tool " + strings.TrimSpace(tc.Function.Name) + " (call id " + tc.ID + ") with arguments: " + tc.Function.Arguments + "]\n")
	}
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Name: m.Name, Content: strings.TrimSpace(b.String())}
}

// resultAsText is a tool message that answers no call just before it, as a user
// message that names the call.
func resultAsText(m *schemas.Message, callName string) openai.ChatCompletionMessage {
	head := "[result of tool call " + m.ToolCallID
	if callName != "" {
		head += " (" + callName + ")"
	}
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: head + "]\n" + content(m.Content)}
}

// messageTokens is what one chat message takes of the model's window, as
// RequestTokens counts: the chat format's cost per message and every text the message
// carries (content, parts, name, tool calls and their ids), chars/4.
func messageTokens(m *openai.ChatCompletionMessage) int {
	n := tokensPerMessage + tokens.Text(m.Content) + tokens.Text(m.Name) + tokens.Text(m.ToolCallID)
	for _, p := range m.MultiContent {
		n += tokens.Text(p.Text)
	}
	for _, tc := range m.ToolCalls {
		n += tokens.Text(tc.ID) + tokens.Text(tc.Function.Name) + tokens.Text(tc.Function.Arguments)
	}
	return n
}
