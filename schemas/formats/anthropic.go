package formats

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/compactor/compactor/schemas"
)

// The blocks of the Anthropic Messages API this package writes.
type (
	anthropicText struct {
		Type         string        `json:"type"` // text
		Text         string        `json:"text"`
		CacheControl *cacheControl `json:"cache_control,omitempty"`
	}
	cacheControl struct {
		Type string `json:"type"` // ephemeral
	}
	anthropicImage struct {
		Type   string          `json:"type"` // image
		Source anthropicSource `json:"source"`
	}
	anthropicSource struct {
		Type      string `json:"type"` // base64 or url
		MediaType string `json:"media_type,omitempty"`
		Data      string `json:"data,omitempty"`
		URL       string `json:"url,omitempty"`
	}
	anthropicToolUse struct {
		Type  string          `json:"type"` // tool_use
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	anthropicToolResult struct {
		Type      string `json:"type"` // tool_result
		ToolUseID string `json:"tool_use_id"`
		// Content is a string or an array of text and image blocks; absent when empty.
		Content any `json:"content,omitempty"`
	}
)

// anthropicImageTypes are the media types the API takes for a base64 image.
var anthropicImageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// renderAnthropic writes {"system": [...], "messages": [...]}.
func renderAnthropic(b *bytes.Buffer, in input) (int, error) {
	var (
		system []anthropicText
		turns  []turn[any]
		ids    = newCallIDs(anthropicID)
	)
	for i := range in.msgs {
		m := &in.msgs[i]
		ps := pieces(m.Content)
		switch {
		case i == in.summary: // a user text block whatever its summary_role
			blk := anthropicText{Type: "text", Text: flatText(ps), CacheControl: &cacheControl{Type: "ephemeral"}}
			turns = addTurn(turns, "user", []any{blk}, true)
		case in.systemApart(i):
			if t := flatText(ps); !blank(t) {
				system = append(system, anthropicText{Type: "text", Text: t})
			}
		case m.Role == schemas.RoleSystem:
			turns = addTurn(turns, "user", anthropicBlocks([]piece{{kind: pieceText, text: SystemMarker + flatText(ps)}}), false)
		case m.Role == schemas.RoleUser:
			turns = addTurn(turns, "user", anthropicBlocks(ps), false)
		case m.Role == schemas.RoleAssistant:
			blocks := anthropicBlocks(ps)
			ids.round()
			for _, tc := range m.ToolCalls {
				input, err := argsObject(tc.Function.Arguments)
				if err != nil {
					return 0, err
				}
				blocks = append(blocks, anthropicToolUse{Type: "tool_use", ID: ids.call(tc.ID), Name: tc.Function.Name, Input: input})
			}
			turns = addTurn(turns, "assistant", blocks, false)
		case m.Role == schemas.RoleTool:
			res := anthropicToolResult{Type: "tool_result", ToolUseID: ids.result(m.ToolCallID)}
			if m.Content.IsParts() {
				if blocks := anthropicBlocks(ps); len(blocks) > 0 {
					res.Content = blocks
				}
			} else if t := flatText(ps); t != "" {
				res.Content = t
			}
			turns = addTurn(turns, "user", []any{res}, false)
		}
	}
	if len(turns) > 0 && turns[0].role != "user" {
		turns = append([]turn[any]{{role: "user", blocks: []any{anthropicText{Type: "text", Text: PlaceholderStart}}, mark: -1}}, turns...)
	}
	b.WriteByte('{')
	if len(system) > 0 {
		b.WriteString(`"system":`)
		if _, err := writeList(b, system, -1); err != nil {
			return 0, err
		}
		b.WriteByte(',')
	}
	b.WriteString(`"messages":`)
	off, err := writeTurns(b, turns, "content")
	if err != nil {
		return 0, err
	}
	b.WriteByte('}')
	return off, nil
}

// anthropicBlocks turns content pieces into text and image blocks, leaving blank text
// out (the API refuses empty text blocks).
func anthropicBlocks(ps []piece) []any {
	out := make([]any, 0, len(ps))
	for _, p := range ps {
		switch {
		case p.kind == pieceImageData && anthropicImageTypes[p.mime]:
			out = append(out, anthropicImage{Type: "image", Source: anthropicSource{Type: "base64", MediaType: p.mime, Data: p.data}})
		case p.kind == pieceImageURL:
			out = append(out, anthropicImage{Type: "image", Source: anthropicSource{Type: "url", URL: p.url}})
		case p.kind == pieceText && !blank(p.text):
			out = append(out, anthropicText{Type: "text", Text: p.text})
		case p.kind == pieceImageData:
			out = append(out, anthropicText{Type: "text", Text: "[image]"})
		}
	}
	return out
}

// anthropicID returns a tool call id the API accepts (^[A-Za-z0-9_-]+$): id itself, or
// "toolu_" and 32 hex digits of its SHA-256.
func anthropicID(id string) string {
	if validToolID(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "toolu_" + hex.EncodeToString(sum[:16])
}
