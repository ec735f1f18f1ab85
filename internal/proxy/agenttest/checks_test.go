package agenttest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/compactor/compactor/internal/fakeupstream"
)

// toolPairs says what is wrong with the tool calls and results of r, in the wire's
// terms ("" when each result answers a call made before it, and every call is
// answered before the conversation goes on): OpenAI tool_calls / tool messages,
// Anthropic tool_use / tool_result blocks, Responses *_call / *_call_output items,
// Gemini functionCall / functionResponse parts.
func toolPairs(r *fakeupstream.Request) string {
	open := map[string]bool{}   // calls not answered yet
	closed := map[string]bool{} // calls answered
	var problems []string
	result := func(i int, id string) {
		switch {
		case open[id]:
			delete(open, id)
			closed[id] = true
		case closed[id] && r.API == fakeupstream.Gemini:
			// Gemini CLI sends an old response twice after --resume (testdata/README.md).
		default:
			problems = append(problems, fmt.Sprintf("entry %d: a result of %q, which no call before it made", i, id))
		}
	}
	goOn := func(i int) {
		if len(open) > 0 {
			problems = append(problems, fmt.Sprintf("entry %d: the conversation goes on with calls unanswered: %v", i, keys(open)))
			for k := range open {
				delete(open, k)
			}
		}
	}
	for i, raw := range r.Messages {
		switch r.API {
		case fakeupstream.OpenAI:
			var m struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			}
			_ = json.Unmarshal(raw, &m)
			if m.Role == "tool" {
				result(i, m.ToolCallID)
				continue
			}
			goOn(i)
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		case fakeupstream.Anthropic:
			var m struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(raw, &m)
			var blocks []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
			}
			_ = json.Unmarshal(m.Content, &blocks)
			results := false
			for _, b := range blocks {
				if b.Type == "tool_result" {
					result(i, b.ToolUseID)
					results = true
				}
			}
			if !results && m.Role != "system" {
				goOn(i)
			} else if results && len(open) > 0 {
				goOn(i) // every call of the assistant message must be answered in the next user message
			}
			for _, b := range blocks {
				if b.Type == "tool_use" || b.Type == "server_tool_use" {
					open[b.ID] = true
				}
			}
		case fakeupstream.Responses:
			var m struct {
				Type   string `json:"type"`
				Role   string `json:"role"`
				CallID string `json:"call_id"`
			}
			if json.Unmarshal(raw, &m) != nil {
				goOn(i)
				continue
			}
			switch {
			case strings.HasSuffix(m.Type, "_call_output"):
				result(i, m.CallID)
			case strings.HasSuffix(m.Type, "_call") && m.CallID != "":
				open[m.CallID] = true
			case m.Type == "reasoning":
			default:
				goOn(i)
			}
		case fakeupstream.Gemini:
			var m struct {
				Role  string `json:"role"`
				Parts []struct {
					FunctionCall *struct {
						ID   string `json:"id"`
						Name string `json:"name"`
					} `json:"functionCall"`
					FunctionResponse *struct {
						ID   string `json:"id"`
						Name string `json:"name"`
					} `json:"functionResponse"`
				} `json:"parts"`
			}
			_ = json.Unmarshal(raw, &m)
			results := false
			for _, p := range m.Parts {
				if p.FunctionResponse != nil {
					result(i, p.FunctionResponse.ID+"/"+p.FunctionResponse.Name)
					results = true
				}
			}
			if !results || len(open) > 0 {
				goOn(i)
			}
			for _, p := range m.Parts {
				if p.FunctionCall != nil {
					open[p.FunctionCall.ID+"/"+p.FunctionCall.Name] = true
				}
			}
		}
	}
	return strings.Join(problems, "; ")
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// outline is r's conversation one entry a line, cut, for failures.
func outline(r *fakeupstream.Request) string {
	var b strings.Builder
	for i, m := range r.Messages {
		s := string(m)
		if len(s) > 240 {
			s = s[:240] + "…"
		}
		fmt.Fprintf(&b, "  %2d %s\n", i, s)
	}
	return b.String()
}

// resultCounts is, for a Gemini request, how many functionResponse parts it carries and
// how many distinct (id, name) among them: Gemini CLI sends old ones twice after
// --resume.
func resultCounts(r *fakeupstream.Request) string {
	if r.API != fakeupstream.Gemini {
		return ""
	}
	n, ids := 0, map[string]bool{}
	for _, raw := range r.Messages {
		var m struct {
			Parts []struct {
				FunctionResponse *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"functionResponse"`
			} `json:"parts"`
		}
		_ = json.Unmarshal(raw, &m)
		for _, p := range m.Parts {
			if p.FunctionResponse != nil {
				n++
				ids[p.FunctionResponse.ID+"/"+p.FunctionResponse.Name] = true
			}
		}
	}
	return fmt.Sprintf(" functionResponses=%d distinct=%d", n, len(ids))
}
