package formats

import (
	"bytes"

	"github.com/compactor/compactor/schemas"
)

// The input items of the OpenAI Responses API this package writes.
type (
	responsesMessage struct {
		Type string `json:"type"` // message
		Role string `json:"role"`
		// Content is a string, or for a user message with parts an array of
		// input_text and input_image.
		Content any `json:"content"`
	}
	responsesText struct {
		Type string `json:"type"` // input_text
		Text string `json:"text"`
	}
	responsesImage struct {
		Type     string `json:"type"` // input_image
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	responsesCall struct {
		Type      string `json:"type"` // function_call
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	responsesOutput struct {
		Type   string `json:"type"` // function_call_output
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
)

// renderResponses writes {"input": [...]}.
func renderResponses(b *bytes.Buffer, in input) (int, error) {
	items := make([]any, 0, len(in.msgs))
	mark := -1
	ids := newCallIDs(func(id string) string { return id })
	for i := range in.msgs {
		m := &in.msgs[i]
		ps := pieces(m.Content)
		switch m.Role {
		case schemas.RoleUser:
			items = append(items, responsesMessage{Type: "message", Role: "user", Content: responsesContent(m.Content, ps)})
		case schemas.RoleSystem:
			items = append(items, responsesMessage{Type: "message", Role: "system", Content: flatText(ps)})
		case schemas.RoleAssistant:
			if t := flatText(ps); t != "" || len(m.ToolCalls) == 0 {
				items = append(items, responsesMessage{Type: "message", Role: "assistant", Content: t})
			}
			ids.round()
			for _, tc := range m.ToolCalls {
				items = append(items, responsesCall{Type: "function_call", CallID: ids.call(tc.ID), Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		case schemas.RoleTool:
			items = append(items, responsesOutput{Type: "function_call_output", CallID: ids.result(m.ToolCallID), Output: flatText(ps)})
		}
		if i == in.summary {
			mark = len(items) - 1
		}
	}
	b.WriteString(`{"input":`)
	off, err := writeList(b, items, mark)
	if err != nil {
		return 0, err
	}
	b.WriteByte('}')
	return off, nil
}

// responsesContent is a user message's content: its text for a string, input_text and
// input_image parts for an array.
func responsesContent(c schemas.Content, ps []piece) any {
	if !c.IsParts() {
		return flatText(ps)
	}
	out := make([]any, 0, len(ps))
	for _, p := range ps {
		switch p.kind {
		case pieceText:
			if p.text != "" {
				out = append(out, responsesText{Type: "input_text", Text: p.text})
			}
		case pieceImageData:
			out = append(out, responsesImage{Type: "input_image", ImageURL: "data:" + p.mime + ";base64," + p.data, Detail: detail(p.detail)})
		case pieceImageURL:
			out = append(out, responsesImage{Type: "input_image", ImageURL: p.url, Detail: detail(p.detail)})
		}
	}
	if len(out) == 0 {
		return ""
	}
	return out
}

// detail returns an image's detail level: low, high or auto (the default).
func detail(d string) string {
	if d == "low" || d == "high" {
		return d
	}
	return "auto"
}
