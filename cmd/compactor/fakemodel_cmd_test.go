package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a strings.Builder safe for the command's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// compactor fake-model on 127.0.0.1:0 prints the address it bound, answers one
// request on each of its four wires as the agent model does (a shell call, the facts
// after a tool's result, a compaction summary), logs each on stderr, and exits 0
// when its context ends (SIGINT).
func TestFakeModelCommandServesEveryWire(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	errOut := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"fake-model", "--listen", "127.0.0.1:0"}, stdio{in: strings.NewReader(""), out: outW, err: errOut},
			func(string) (string, bool) { return "", false })
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("no address on stdout: %v (stderr %q)", err, errOut.String())
	}
	base := "http://" + strings.TrimSpace(line)
	go io.Copy(io.Discard, outR)

	post := func(path, body string, header ...string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}

	// OpenAI Chat Completions, not streamed: a prompt gets one call of OpenCode's bash.
	var chat struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	body := post("/v1/chat/completions", `{"model":"m","tools":[{"type":"function","function":{"name":"bash"}}],"messages":[{"role":"user","content":"hi"}]}`,
		"Authorization", "Bearer fake")
	if json.Unmarshal([]byte(body), &chat) != nil || len(chat.Choices) != 1 || len(chat.Choices[0].Message.ToolCalls) != 1 ||
		chat.Choices[0].Message.ToolCalls[0].Function.Name != "bash" || !strings.Contains(chat.Choices[0].Message.ToolCalls[0].Function.Arguments, "echo") {
		t.Fatalf("chat completion %s", body)
	}
	// Anthropic Messages, streamed: Claude Code's Bash, in tool_use events.
	body = post("/v1/messages", `{"model":"claude-x","max_tokens":100,"stream":true,"tools":[{"name":"Bash","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}`,
		"x-api-key", "fake")
	if !strings.Contains(body, "event: message_start") || !strings.Contains(body, `"name":"Bash"`) || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("anthropic stream %s", body)
	}
	// Responses, streamed: a tool's output gets a text quoting the facts.
	body = post("/v1/responses", `{"model":"gpt-x","stream":true,"input":[{"role":"user","content":"remember FACT-42"},`+
		`{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}]}`)
	if !strings.Contains(body, "event: response.completed") || !strings.Contains(body, "FACT-42") {
		t.Fatalf("responses stream %s", body)
	}
	// Gemini, key in the query: Gemini CLI's compression prompt gets a state snapshot.
	body = post("/v1beta/models/gemini-x:generateContent?key=fake", `{"contents":[{"role":"user","parts":[{"text":"remember FACT-7"}]},`+
		`{"role":"model","parts":[{"text":"ok"}]},{"role":"user","parts":[{"text":"First, reason in your scratchpad. Then, generate the <state_snapshot>."}]}]}`)
	if !strings.Contains(body, "state_snapshot") || !strings.Contains(body, "FACT-7") || !strings.Contains(body, `"usageMetadata"`) {
		t.Fatalf("gemini %s", body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fake-model ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fake-model did not stop when its context ended")
	}
	log := errOut.String()
	for _, want := range []string{"openai /v1/chat/completions", "anthropic /v1/messages", "responses /v1/responses", "gemini /v1beta/models/gemini-x:generateContent",
		"tool call bash", "tool call Bash", "text quoting 1 facts", "gemini-cli compaction summary, 1 facts kept"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

// A taken address is a configuration error that names the flag.
func TestFakeModelCommandAddressTaken(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"fake-model", "-q", "--listen", "127.0.0.1:0"}, stdio{in: strings.NewReader(""), out: outW, err: io.Discard},
			func(string) (string, bool) { return "", false })
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, outR)
	err = run(ctx, []string{"fake-model", "--listen", strings.TrimSpace(line)}, stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard},
		func(string) (string, bool) { return "", false })
	if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("got %v (exit %d); want a configuration error naming --listen", err, exitCode(err))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
