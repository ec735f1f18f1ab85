// Package tokens estimates how many tokens messages take in a model's context.
//
// The estimate is the one every Compactor client shares: a quarter of the number of
// characters (Unicode code points) of the text, rounded up, plus a fixed cost per
// message and per non-text content part. A message's own `tokens` field, when the
// producer set it, wins over the estimate.
package tokens

import (
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
)

const (
	// PerMessage is the fixed cost of one message (role, separators).
	PerMessage = 4
	// PerNonTextPart is the cost of one image, audio or file content part.
	PerNonTextPart = 256
	// PerToolCall is the fixed cost of one tool call besides its name and arguments.
	PerToolCall = 4
)

// Text estimates the tokens of a string: ceil(characters / 4).
func Text(s string) int {
	return (utf8.RuneCountInString(s) + 3) / 4
}

// Message returns m.Tokens when the producer set it, else the estimate.
func Message(m *schemas.Message) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	return Estimate(m)
}

// Estimate ignores m.Tokens and estimates from the content: text parts by characters,
// a fixed cost per non-text part, the reasoning, the name and every tool call.
func Estimate(m *schemas.Message) int {
	n := PerMessage + Text(m.Name) + Text(m.Reasoning)
	switch {
	case m.Content.IsString():
		n += Text(m.Content.String())
	case m.Content.IsParts():
		parts, err := m.Content.Parts()
		if err == nil {
			for _, p := range parts {
				if p.Type == "text" {
					n += Text(p.Text)
				} else {
					n += PerNonTextPart
				}
			}
		}
	}
	for _, tc := range m.ToolCalls {
		n += PerToolCall + Text(tc.Function.Name) + Text(tc.Function.Arguments)
	}
	return n
}

// Messages sums Message over ms.
func Messages(ms []schemas.Message) int {
	n := 0
	for i := range ms {
		n += Message(&ms[i])
	}
	return n
}

// Entries sums Message over the valid entries of es; invalid ones count nothing.
func Entries(es []schemas.Entry) int {
	n := 0
	for i := range es {
		if es[i].Err == nil {
			n += Message(&es[i].Message)
		}
	}
	return n
}
