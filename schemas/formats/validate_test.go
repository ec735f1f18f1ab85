package formats_test

// Validators of each provider's published request shape, written from the API
// references: Anthropic Messages (POST /v1/messages), OpenAI Responses (POST
// /v1/responses, "input" items) and Gemini generateContent (Content, Part,
// FunctionCall, FunctionResponse). Each checks the rules the references state for the
// fields this package writes, and refuses any field it does not know, so a renderer
// cannot drift from the documented shape unnoticed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

type obj = map[string]any

// decodeObject decodes one JSON object (numbers as json.Number) and refuses trailing data.
func decodeObject(b []byte) (obj, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var o obj
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the JSON object")
	}
	return o, nil
}

// onlyKeys fails when o has a key outside allowed or misses one of required.
func onlyKeys(where string, o obj, required []string, optional ...string) error {
	for _, k := range required {
		if _, ok := o[k]; !ok {
			return fmt.Errorf("%s: missing required %q", where, k)
		}
	}
	for k := range o {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) {
			return fmt.Errorf("%s: unknown field %q", where, k)
		}
	}
	return nil
}

func str(where string, v any, nonEmpty bool) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: must be a string, not %T", where, v)
	}
	if nonEmpty && s == "" {
		return "", fmt.Errorf("%s: must not be empty", where)
	}
	return s, nil
}

func asObj(where string, v any) (obj, error) {
	o, ok := v.(obj)
	if !ok {
		return nil, fmt.Errorf("%s: must be an object, not %T", where, v)
	}
	return o, nil
}

func asArr(where string, v any) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: must be an array, not %T", where, v)
	}
	return a, nil
}

// --- Anthropic Messages -------------------------------------------------------------

var anthropicToolID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// validateAnthropic checks a {"system", "messages"} fragment: system is a string or
// text blocks; messages alternate user/assistant starting with user; text blocks are
// non-empty; images have a base64 (jpeg, png, gif, webp) or url source; tool_use blocks
// (assistant only) have an id matching ^[a-zA-Z0-9_-]+$, a name and an object input;
// every tool_use is answered by a tool_result with its id in the very next message,
// which is a user message whose tool_result blocks come before any other block; a
// tool_result answers a tool_use of the message right before; at most 4 cache_control
// breakpoints, of type ephemeral.
func validateAnthropic(b []byte) error {
	o, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := onlyKeys("request", o, []string{"messages"}, "system"); err != nil {
		return err
	}
	breakpoints := 0
	if sys, ok := o["system"]; ok {
		if _, isStr := sys.(string); !isStr {
			blocks, err := asArr("system", sys)
			if err != nil {
				return err
			}
			for i, bl := range blocks {
				n, err := anthropicTextBlock(fmt.Sprintf("system[%d]", i), bl)
				if err != nil {
					return err
				}
				breakpoints += n
			}
		}
	}
	msgs, err := asArr("messages", o["messages"])
	if err != nil {
		return err
	}
	var open []string // tool_use ids of the previous assistant message
	seen := map[string]bool{}
	for i, mv := range msgs {
		where := fmt.Sprintf("messages[%d]", i)
		m, err := asObj(where, mv)
		if err != nil {
			return err
		}
		if err := onlyKeys(where, m, []string{"role", "content"}); err != nil {
			return err
		}
		role, _ := m["role"].(string)
		if role != "user" && role != "assistant" {
			return fmt.Errorf("%s.role: must be user or assistant, not %q", where, m["role"])
		}
		if i == 0 && role != "user" {
			return fmt.Errorf("%s: the first message must be the user's", where)
		}
		if i > 0 && msgs[i-1].(obj)["role"] == role {
			return fmt.Errorf("%s: roles must alternate (two %s messages in a row)", where, role)
		}
		var blocks []any
		if s, isStr := m["content"].(string); isStr {
			if s == "" {
				return fmt.Errorf("%s.content: must not be empty", where)
			}
		} else if blocks, err = asArr(where+".content", m["content"]); err != nil {
			return err
		} else if len(blocks) == 0 {
			return fmt.Errorf("%s.content: must not be empty", where)
		}
		var uses []string
		answered := map[string]bool{}
		resultsDone := false
		for j, bv := range blocks {
			bw := fmt.Sprintf("%s.content[%d]", where, j)
			bl, err := asObj(bw, bv)
			if err != nil {
				return err
			}
			typ, _ := bl["type"].(string)
			if typ != "tool_result" {
				resultsDone = true
			}
			switch typ {
			case "text":
				n, err := anthropicTextBlock(bw, bl)
				if err != nil {
					return err
				}
				breakpoints += n
			case "image":
				if err := anthropicImageBlock(bw, bl); err != nil {
					return err
				}
			case "tool_use":
				if role != "assistant" {
					return fmt.Errorf("%s: tool_use only in assistant messages", bw)
				}
				if err := onlyKeys(bw, bl, []string{"type", "id", "name", "input"}, "cache_control"); err != nil {
					return err
				}
				id, err := str(bw+".id", bl["id"], true)
				if err != nil {
					return err
				}
				if !anthropicToolID.MatchString(id) {
					return fmt.Errorf("%s.id: %q does not match ^[a-zA-Z0-9_-]+$", bw, id)
				}
				if seen[id] {
					return fmt.Errorf("%s.id: %q used twice", bw, id)
				}
				seen[id] = true
				if _, err := str(bw+".name", bl["name"], true); err != nil {
					return err
				}
				if _, err := asObj(bw+".input", bl["input"]); err != nil {
					return err
				}
				uses = append(uses, id)
			case "tool_result":
				if role != "user" {
					return fmt.Errorf("%s: tool_result only in user messages", bw)
				}
				if resultsDone {
					return fmt.Errorf("%s: tool_result blocks must come first in the user message", bw)
				}
				if err := onlyKeys(bw, bl, []string{"type", "tool_use_id"}, "content", "is_error", "cache_control"); err != nil {
					return err
				}
				id, err := str(bw+".tool_use_id", bl["tool_use_id"], true)
				if err != nil {
					return err
				}
				if !slices.Contains(open, id) {
					return fmt.Errorf("%s: tool_result %q answers no tool_use of the previous message", bw, id)
				}
				if answered[id] {
					return fmt.Errorf("%s: tool_use %q answered twice", bw, id)
				}
				answered[id] = true
				if c, ok := bl["content"]; ok {
					if _, isStr := c.(string); !isStr {
						inner, err := asArr(bw+".content", c)
						if err != nil {
							return err
						}
						for k, iv := range inner {
							iw := fmt.Sprintf("%s.content[%d]", bw, k)
							ib, err := asObj(iw, iv)
							if err != nil {
								return err
							}
							switch ib["type"] {
							case "text":
								if _, err := anthropicTextBlock(iw, ib); err != nil {
									return err
								}
							case "image":
								if err := anthropicImageBlock(iw, ib); err != nil {
									return err
								}
							default:
								return fmt.Errorf("%s: tool_result content holds text and image blocks, not %v", iw, ib["type"])
							}
						}
					}
				}
			default:
				return fmt.Errorf("%s.type: unknown block type %q", bw, bl["type"])
			}
		}
		for _, id := range open {
			if !answered[id] {
				return fmt.Errorf("%s: tool_use %q has no tool_result in the next message", where, id)
			}
		}
		open = uses
	}
	if len(open) > 0 {
		return fmt.Errorf("messages: tool_use %v of the last message has no tool_result", open)
	}
	if breakpoints > 4 {
		return fmt.Errorf("%d cache_control breakpoints; at most 4 are allowed", breakpoints)
	}
	return nil
}

// anthropicTextBlock checks a text block and returns 1 when it is a cache breakpoint.
func anthropicTextBlock(where string, v any) (int, error) {
	bl, err := asObj(where, v)
	if err != nil {
		return 0, err
	}
	if err := onlyKeys(where, bl, []string{"type", "text"}, "cache_control"); err != nil {
		return 0, err
	}
	if bl["type"] != "text" {
		return 0, fmt.Errorf("%s.type: must be text", where)
	}
	t, err := str(where+".text", bl["text"], true)
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(t) == "" {
		return 0, fmt.Errorf("%s.text: text content blocks must contain non-whitespace text", where)
	}
	cc, ok := bl["cache_control"]
	if !ok {
		return 0, nil
	}
	c, err := asObj(where+".cache_control", cc)
	if err != nil {
		return 0, err
	}
	if err := onlyKeys(where+".cache_control", c, []string{"type"}, "ttl"); err != nil {
		return 0, err
	}
	if c["type"] != "ephemeral" {
		return 0, fmt.Errorf("%s.cache_control.type: must be ephemeral", where)
	}
	return 1, nil
}

func anthropicImageBlock(where string, bl obj) error {
	if err := onlyKeys(where, bl, []string{"type", "source"}, "cache_control"); err != nil {
		return err
	}
	src, err := asObj(where+".source", bl["source"])
	if err != nil {
		return err
	}
	switch src["type"] {
	case "base64":
		if err := onlyKeys(where+".source", src, []string{"type", "media_type", "data"}); err != nil {
			return err
		}
		if mt := src["media_type"]; !slices.Contains([]any{"image/jpeg", "image/png", "image/gif", "image/webp"}, mt) {
			return fmt.Errorf("%s.source.media_type: %v is not image/jpeg, image/png, image/gif or image/webp", where, mt)
		}
		_, err := str(where+".source.data", src["data"], true)
		return err
	case "url":
		if err := onlyKeys(where+".source", src, []string{"type", "url"}); err != nil {
			return err
		}
		_, err := str(where+".source.url", src["url"], true)
		return err
	}
	return fmt.Errorf("%s.source.type: must be base64 or url, not %v", where, src["type"])
}

// --- OpenAI Responses ---------------------------------------------------------------

// validateResponses checks an {"instructions"?, "input"} fragment: input items are
// message (role user, assistant, system or developer; content a string or, for user,
// system and developer, input_text/input_image parts), function_call (call_id, name,
// arguments string) and function_call_output (call_id of an earlier function_call,
// output); every function_call has its output, and no call_id is used twice.
func validateResponses(b []byte) error {
	o, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := onlyKeys("request", o, []string{"input"}, "instructions"); err != nil {
		return err
	}
	if v, ok := o["instructions"]; ok {
		if _, err := str("instructions", v, false); err != nil {
			return err
		}
	}
	items, err := asArr("input", o["input"])
	if err != nil {
		return err
	}
	calls := map[string]bool{} // call_id → answered
	var order []string
	for i, iv := range items {
		where := fmt.Sprintf("input[%d]", i)
		it, err := asObj(where, iv)
		if err != nil {
			return err
		}
		switch it["type"] {
		case "message":
			if err := onlyKeys(where, it, []string{"type", "role", "content"}); err != nil {
				return err
			}
			role, _ := it["role"].(string)
			if !slices.Contains([]string{"user", "assistant", "system", "developer"}, role) {
				return fmt.Errorf("%s.role: must be user, assistant, system or developer, not %v", where, it["role"])
			}
			if _, isStr := it["content"].(string); isStr {
				continue
			}
			if role == "assistant" {
				return fmt.Errorf("%s.content: an assistant input message is a string here", where)
			}
			parts, err := asArr(where+".content", it["content"])
			if err != nil {
				return err
			}
			for j, pv := range parts {
				pw := fmt.Sprintf("%s.content[%d]", where, j)
				p, err := asObj(pw, pv)
				if err != nil {
					return err
				}
				switch p["type"] {
				case "input_text":
					if err := onlyKeys(pw, p, []string{"type", "text"}); err != nil {
						return err
					}
					if _, err := str(pw+".text", p["text"], false); err != nil {
						return err
					}
				case "input_image":
					if err := onlyKeys(pw, p, []string{"type", "detail"}, "image_url", "file_id"); err != nil {
						return err
					}
					if !slices.Contains([]any{"low", "high", "auto"}, p["detail"]) {
						return fmt.Errorf("%s.detail: must be low, high or auto", pw)
					}
					if _, err := str(pw+".image_url", p["image_url"], true); err != nil {
						return err
					}
				default:
					return fmt.Errorf("%s.type: must be input_text or input_image, not %v", pw, p["type"])
				}
			}
		case "function_call":
			if err := onlyKeys(where, it, []string{"type", "call_id", "name", "arguments"}, "id", "status"); err != nil {
				return err
			}
			id, err := str(where+".call_id", it["call_id"], true)
			if err != nil {
				return err
			}
			if _, dup := calls[id]; dup {
				return fmt.Errorf("%s.call_id: %q used twice", where, id)
			}
			calls[id] = false
			order = append(order, id)
			if _, err := str(where+".name", it["name"], true); err != nil {
				return err
			}
			if _, err := str(where+".arguments", it["arguments"], false); err != nil {
				return err
			}
		case "function_call_output":
			if err := onlyKeys(where, it, []string{"type", "call_id", "output"}, "id", "status"); err != nil {
				return err
			}
			id, err := str(where+".call_id", it["call_id"], true)
			if err != nil {
				return err
			}
			done, ok := calls[id]
			switch {
			case !ok:
				return fmt.Errorf("%s: no function_call with call_id %q before it", where, id)
			case done:
				return fmt.Errorf("%s: function_call %q answered twice", where, id)
			}
			calls[id] = true
			if _, err := str(where+".output", it["output"], false); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s.type: unknown item type %v", where, it["type"])
		}
	}
	for _, id := range order {
		if !calls[id] {
			return fmt.Errorf("input: no function_call_output for call_id %q", id)
		}
	}
	return nil
}

// --- Gemini generateContent ---------------------------------------------------------

// validateGemini checks a {"systemInstruction"?, "contents"} fragment: the system
// instruction holds text parts; contents have role user or model, alternate starting
// with user, and at least one part; a part holds exactly one of text, inlineData
// {mimeType, data}, functionCall {id?, name, args object} (model only) or
// functionResponse {id?, name, response object} (user only); a model turn with function
// calls is followed by a user turn that starts with one functionResponse per call
// (same id and name), and a functionResponse answers a call of the turn right before.
func validateGemini(b []byte) error {
	o, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := onlyKeys("request", o, []string{"contents"}, "systemInstruction"); err != nil {
		return err
	}
	if si, ok := o["systemInstruction"]; ok {
		s, err := asObj("systemInstruction", si)
		if err != nil {
			return err
		}
		if err := onlyKeys("systemInstruction", s, []string{"parts"}, "role"); err != nil {
			return err
		}
		parts, err := asArr("systemInstruction.parts", s["parts"])
		if err != nil {
			return err
		}
		for i, pv := range parts {
			pw := fmt.Sprintf("systemInstruction.parts[%d]", i)
			p, err := asObj(pw, pv)
			if err != nil {
				return err
			}
			if err := onlyKeys(pw, p, []string{"text"}); err != nil {
				return err
			}
			if _, err := str(pw+".text", p["text"], true); err != nil {
				return err
			}
		}
	}
	contents, err := asArr("contents", o["contents"])
	if err != nil {
		return err
	}
	type call struct{ id, name string }
	var open []call
	prevRole := ""
	for i, cv := range contents {
		where := fmt.Sprintf("contents[%d]", i)
		c, err := asObj(where, cv)
		if err != nil {
			return err
		}
		if err := onlyKeys(where, c, []string{"role", "parts"}); err != nil {
			return err
		}
		role, _ := c["role"].(string)
		if role != "user" && role != "model" {
			return fmt.Errorf("%s.role: must be user or model, not %v", where, c["role"])
		}
		if i == 0 && role != "user" {
			return fmt.Errorf("%s: the first turn must be the user's", where)
		}
		if role == prevRole {
			return fmt.Errorf("%s: turns must alternate (two %s turns in a row)", where, role)
		}
		prevRole = role
		parts, err := asArr(where+".parts", c["parts"])
		if err != nil {
			return err
		}
		if len(parts) == 0 {
			return fmt.Errorf("%s.parts: must not be empty", where)
		}
		var calls []call
		answered := 0
		for j, pv := range parts {
			pw := fmt.Sprintf("%s.parts[%d]", where, j)
			p, err := asObj(pw, pv)
			if err != nil {
				return err
			}
			if len(p) != 1 {
				return fmt.Errorf("%s: a part holds exactly one field, not %d", pw, len(p))
			}
			switch {
			case p["text"] != nil:
				if _, err := str(pw+".text", p["text"], true); err != nil {
					return err
				}
			case p["inlineData"] != nil:
				d, err := asObj(pw+".inlineData", p["inlineData"])
				if err != nil {
					return err
				}
				if err := onlyKeys(pw+".inlineData", d, []string{"mimeType", "data"}); err != nil {
					return err
				}
				if _, err := str(pw+".inlineData.mimeType", d["mimeType"], true); err != nil {
					return err
				}
				if _, err := str(pw+".inlineData.data", d["data"], true); err != nil {
					return err
				}
			case p["functionCall"] != nil:
				if role != "model" {
					return fmt.Errorf("%s: functionCall only in model turns", pw)
				}
				fc, err := asObj(pw+".functionCall", p["functionCall"])
				if err != nil {
					return err
				}
				if err := onlyKeys(pw+".functionCall", fc, []string{"name"}, "id", "args"); err != nil {
					return err
				}
				name, err := str(pw+".functionCall.name", fc["name"], true)
				if err != nil {
					return err
				}
				id, _ := fc["id"].(string)
				if a, ok := fc["args"]; ok {
					if _, err := asObj(pw+".functionCall.args", a); err != nil {
						return err
					}
				}
				calls = append(calls, call{id, name})
			case p["functionResponse"] != nil:
				if role != "user" {
					return fmt.Errorf("%s: functionResponse only in user turns", pw)
				}
				if j != answered {
					return fmt.Errorf("%s: functionResponse parts must come first in the turn", pw)
				}
				fr, err := asObj(pw+".functionResponse", p["functionResponse"])
				if err != nil {
					return err
				}
				if err := onlyKeys(pw+".functionResponse", fr, []string{"name", "response"}, "id"); err != nil {
					return err
				}
				name, err := str(pw+".functionResponse.name", fr["name"], true)
				if err != nil {
					return err
				}
				id, _ := fr["id"].(string)
				if _, err := asObj(pw+".functionResponse.response", fr["response"]); err != nil {
					return err
				}
				k := slices.IndexFunc(open, func(c call) bool { return c.id == id && c.name == name })
				if k < 0 {
					return fmt.Errorf("%s: functionResponse %q (%s) answers no functionCall of the turn before", pw, id, name)
				}
				open = slices.Delete(open, k, k+1)
				answered++
			default:
				return fmt.Errorf("%s: unknown part %v", pw, keysOf(p))
			}
		}
		if len(open) > 0 {
			return fmt.Errorf("%s: functionCall %v of the turn before has no functionResponse", where, open)
		}
		open = calls
	}
	if len(open) > 0 {
		return fmt.Errorf("contents: functionCall %v of the last turn has no functionResponse", open)
	}
	return nil
}

func keysOf(o obj) []string {
	var ks []string
	for k := range o {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// validateOpenAI checks a {"messages"} fragment: messages with a role of the chat
// format; assistant tool_calls answered, in order, by the tool messages right after.
func validateOpenAI(b []byte) error {
	o, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := onlyKeys("request", o, []string{"messages"}); err != nil {
		return err
	}
	msgs, err := asArr("messages", o["messages"])
	if err != nil {
		return err
	}
	open := map[string]bool{}
	for i, mv := range msgs {
		where := fmt.Sprintf("messages[%d]", i)
		m, err := asObj(where, mv)
		if err != nil {
			return err
		}
		role, _ := m["role"].(string)
		if !slices.Contains([]string{"system", "developer", "user", "assistant", "tool"}, role) {
			return fmt.Errorf("%s.role: unknown role %v", where, m["role"])
		}
		for _, k := range []string{"tokens", "usage", "context_generation", "meta"} {
			if _, ok := m[k]; ok {
				return fmt.Errorf("%s: Compactor's metadata %q must be stripped", where, k)
			}
		}
		if role == "tool" {
			id, _ := m["tool_call_id"].(string)
			if !open[id] {
				return fmt.Errorf("%s: tool message %q answers no open tool call", where, id)
			}
			delete(open, id)
			continue
		}
		if len(open) > 0 {
			return fmt.Errorf("%s: tool calls %v unanswered", where, open)
		}
		if tcs, ok := m["tool_calls"].([]any); ok {
			for _, tv := range tcs {
				id, _ := tv.(obj)["id"].(string)
				open[id] = true
			}
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("messages: tool calls %v unanswered", open)
	}
	return nil
}
