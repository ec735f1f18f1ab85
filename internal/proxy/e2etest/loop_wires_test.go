package e2etest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/internal/fakeupstream"
)

var runBuild = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "run_build", Description: "runs the build of one step",
	Parameters: json.RawMessage(`{"type":"object","properties":{"step":{"type":"integer"}}}`)}}

// openAIAgent is the loop's client on the OpenAI wire: go-openai.
type openAIAgent struct {
	client *openai.Client
	tr     *headerTransport
}

func newOpenAIAgent(root string) *openAIAgent {
	c, tr := goClient(root, openAIKey, loopConv)
	return &openAIAgent{client: c, tr: tr}
}

func (a *openAIAgent) send(ctx context.Context, history []flat, stream bool) (flat, http.Header, error) {
	var msgs []openai.ChatCompletionMessage
	for _, f := range history {
		m := openai.ChatCompletionMessage{Role: f.Role, Content: f.Text, ToolCallID: f.Result}
		for _, c := range f.Calls {
			p := strings.SplitN(c, " ", 3)
			m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: p[0], Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: p[1], Arguments: p[2]}})
		}
		msgs = append(msgs, m)
	}
	msg, err := goTurnCtx(ctx, a.client, openai.ChatCompletionRequest{Model: "gpt-loop", Messages: msgs,
		Tools: []openai.Tool{runBuild}, MaxCompletionTokens: loopMaxTokens, Stream: stream})
	if err != nil {
		return flat{}, nil, err
	}
	raw, _ := json.Marshal(msg)
	out, err := decodeOpenAI([]json.RawMessage{raw})
	if err != nil {
		return flat{}, nil, err
	}
	return out[0], a.tr.last, nil
}

func (a *openAIAgent) upstream(r *fakeupstream.Request) []flat { return flatOpenAI(nil, r.Messages) }

// anthropicAgent is the loop's client on the Anthropic Messages wire: plain HTTP, the
// stream read event by event as the SDK reads it.
type anthropicAgent struct{ root string }

var anthropicRunBuild = map[string]any{"name": "run_build", "description": "runs the build of one step",
	"input_schema": map[string]any{"type": "object", "properties": map[string]any{"step": map[string]any{"type": "integer"}}}}

// anthropicBody is history as a Messages request: the system message as system, a
// tool result as a user message of one tool_result block.
func anthropicBody(history []flat, stream bool) []byte {
	var system string
	var msgs []any
	for _, f := range history {
		switch f.Role {
		case "system":
			system = f.Text
		case "tool":
			msgs = append(msgs, map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": f.Result, "content": f.Text}}})
		case "assistant":
			var blocks []any
			if f.Text != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": f.Text})
			}
			for _, c := range f.Calls {
				p := strings.SplitN(c, " ", 3)
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": p[0], "name": p[1], "input": json.RawMessage(p[2])})
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": blocks})
		default:
			msgs = append(msgs, map[string]any{"role": f.Role, "content": f.Text})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "claude-loop", "max_tokens": loopMaxTokens, "system": system,
		"messages": msgs, "tools": []any{anthropicRunBuild}, "stream": stream})
	return b
}

func (a *anthropicAgent) send(ctx context.Context, history []flat, stream bool) (flat, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", a.root+"/v1/messages", bytes.NewReader(anthropicBody(history, stream)))
	if err != nil {
		return flat{}, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", anthropicKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Compactor-Conversation", loopConv)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return flat{}, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return flat{}, nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var content json.RawMessage
	if stream {
		content, err = readAnthropicStream(resp.Body)
	} else {
		var m struct {
			Content json.RawMessage `json:"content"`
		}
		err = json.NewDecoder(resp.Body).Decode(&m)
		content = m.Content
	}
	if err != nil {
		return flat{}, nil, err
	}
	var out []flat
	if err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("reply content %s: %v", content, r)
			}
		}()
		out = flatBlocks(nil, "assistant", content)
		return nil
	}(); err != nil {
		return flat{}, nil, err
	}
	return out[0], resp.Header, nil
}

func (a *anthropicAgent) upstream(r *fakeupstream.Request) []flat {
	return flatAnthropic(nil, r.System, r.Messages)
}

// readAnthropicStream puts a Messages stream back together into its content blocks;
// an error event, or an end before message_stop, is an error.
func readAnthropicStream(body io.Reader) (json.RawMessage, error) {
	var blocks []map[string]any
	partial := map[int]string{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type         string         `json:"type"`
			Index        int            `json:"index"`
			ContentBlock map[string]any `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return nil, fmt.Errorf("event %s: %v", data, err)
		}
		switch ev.Type {
		case "error":
			return nil, fmt.Errorf("error event: %s", ev.Error)
		case "content_block_start":
			for len(blocks) <= ev.Index {
				blocks = append(blocks, nil)
			}
			blocks[ev.Index] = ev.ContentBlock
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" {
				blocks[ev.Index]["text"] = blocks[ev.Index]["text"].(string) + ev.Delta.Text
			} else {
				partial[ev.Index] += ev.Delta.PartialJSON
			}
		case "content_block_stop":
			if p, ok := partial[ev.Index]; ok {
				blocks[ev.Index]["input"] = json.RawMessage(p)
			}
		case "message_stop":
			b, err := json.Marshal(blocks)
			return b, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the stream ended before message_stop")
}
