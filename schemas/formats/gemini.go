package formats

import (
	"bytes"
	"encoding/json"

	"github.com/compactor/compactor/schemas"
)

// The parts of the Gemini generateContent API this package writes. Each part holds
// exactly one of its fields.
type (
	geminiPart struct {
		Text             string          `json:"text,omitempty"`
		InlineData       *geminiBlob     `json:"inlineData,omitempty"`
		FunctionCall     *geminiCall     `json:"functionCall,omitempty"`
		FunctionResponse *geminiResponse `json:"functionResponse,omitempty"`
	}
	geminiBlob struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	}
	geminiCall struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	geminiResponse struct {
		ID       string          `json:"id,omitempty"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	}
)

// renderGemini writes {"systemInstruction": {"parts": [...]}, "contents": [...]}.
func renderGemini(b *bytes.Buffer, in input) (int, error) {
	var (
		system []geminiPart
		turns  []turn[geminiPart]
		names  = map[string]string{} // call id → function name
	)
	for i := range in.msgs {
		m := &in.msgs[i]
		ps := pieces(m.Content)
		switch {
		case i == in.summary: // user text whatever its summary_role
			turns = addTurn(turns, "user", []geminiPart{{Text: flatText(ps)}}, true)
		case in.systemApart(i):
			if t := flatText(ps); !blank(t) {
				system = append(system, geminiPart{Text: t})
			}
		case m.Role == schemas.RoleSystem:
			turns = addTurn(turns, "user", geminiParts([]piece{{kind: pieceText, text: SystemMarker + flatText(ps)}}), false)
		case m.Role == schemas.RoleUser:
			turns = addTurn(turns, "user", geminiParts(ps), false)
		case m.Role == schemas.RoleAssistant:
			parts := geminiParts(ps)
			for _, tc := range m.ToolCalls {
				args, err := argsObject(tc.Function.Arguments)
				if err != nil {
					return 0, err
				}
				names[tc.ID] = tc.Function.Name
				parts = append(parts, geminiPart{FunctionCall: &geminiCall{ID: tc.ID, Name: tc.Function.Name, Args: args}})
			}
			turns = addTurn(turns, "model", parts, false)
		case m.Role == schemas.RoleTool:
			resp, err := marshal(map[string]string{"output": flatText(ps)})
			if err != nil {
				return 0, err
			}
			part := geminiPart{FunctionResponse: &geminiResponse{ID: m.ToolCallID, Name: names[m.ToolCallID], Response: resp}}
			turns = addTurn(turns, "user", []geminiPart{part}, false)
		}
	}
	if len(turns) > 0 && turns[0].role != "user" {
		turns = append([]turn[geminiPart]{{role: "user", blocks: []geminiPart{{Text: PlaceholderStart}}, mark: -1}}, turns...)
	}
	b.WriteByte('{')
	if len(system) > 0 {
		b.WriteString(`"systemInstruction":{"parts":`)
		if _, err := writeList(b, system, -1); err != nil {
			return 0, err
		}
		b.WriteString(`},`)
	}
	b.WriteString(`"contents":`)
	off, err := writeTurns(b, turns, "parts")
	if err != nil {
		return 0, err
	}
	b.WriteByte('}')
	return off, nil
}

// geminiParts turns content pieces into text and inlineData parts, leaving blank text
// out; an http(s) image becomes the text [image: <url>].
func geminiParts(ps []piece) []geminiPart {
	out := make([]geminiPart, 0, len(ps))
	for _, p := range ps {
		switch {
		case p.kind == pieceImageData:
			out = append(out, geminiPart{InlineData: &geminiBlob{MimeType: p.mime, Data: p.data}})
		case p.kind == pieceImageURL:
			out = append(out, geminiPart{Text: "[image: " + p.url + "]"})
		case !blank(p.text):
			out = append(out, geminiPart{Text: p.text})
		}
	}
	return out
}
