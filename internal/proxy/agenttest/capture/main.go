// Command capture is a scripted model server for recording what the real agent CLIs send.
//
// It listens on 127.0.0.1 at a port the kernel picks and answers the four wires the agents
// speak well enough that an agent goes through a realistic session: Anthropic Messages
// (POST /v1/messages, also /v1/messages/count_tokens), OpenAI Responses (POST /v1/responses),
// Gemini (:streamGenerateContent?alt=sse, :generateContent, :countTokens) and Chat Completions
// (POST /v1/chat/completions, SSE with a usage chunk). The script: a request whose newest
// input is a user's prompt gets one call of the agent's shell tool ("echo hi"); a request
// whose newest input is a tool's result gets text; a request that asks for a summary gets
// a summary; a Gemini JSON-mode side request gets JSON fitting its schema. Where the request
// turns thinking on, the answer starts with a thinking block, reasoning item or thought part
// with a fake signature. Every response reports usage.
//
// It also runs a second listener meant for HTTPS_PROXY/HTTP_PROXY: it refuses CONNECT and
// every proxied request with 403 and logs the host that was asked for, so an agent under test
// reaches no outside host and does not hang.
//
// Each request is saved as DIR/NN-<label>-<kind>-<answer>.json: {"method","path","headers","body"},
// with key and token header values replaced by "REDACTED" and the body pretty-printed. The
// driver sets the label, and arms a one-shot 429 or a one-shot usage figure (reported on the next
// answer that ends a turn with text), through
// POST /_ctl with a JSON body {"label": "...", "usage": N, "usageOnTool": bool,
// "fail429": true, "fail429Kind": "gemini-stream", "command": "seq 1 10"}. The
// addresses go to -addrfile as two lines, model=URL and proxy=URL.
//
//	capture -out DIR -addrfile FILE
//	capture -trim [-maxstr N] [-maxdesc M] SRC DST   # copy fixtures, cutting long strings
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

func main() {
	out := flag.String("out", "", "folder for the captured requests")
	addrFile := flag.String("addrfile", "", "file to write the listeners' addresses to")
	trim := flag.Bool("trim", false, "copy fixtures from SRC to DST cutting long strings")
	maxStr := flag.Int("maxstr", 2000, "with -trim: longest string kept whole")
	maxDesc := flag.Int("maxdesc", 120, "with -trim: longest \"description\" string kept whole, but in the first file")
	flag.Parse()
	if *trim {
		if flag.NArg() != 2 {
			log.Fatal("usage: capture -trim [-maxstr N] SRC DST")
		}
		if err := trimDir(flag.Arg(0), flag.Arg(1), *maxStr, *maxDesc); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *out == "" || *addrFile == "" {
		log.Fatal("usage: capture -out DIR -addrfile FILE")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	s := &server{dir: *out, label: "start"}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addrs := fmt.Sprintf("model=http://%s\nproxy=http://%s\n", ml.Addr(), pl.Addr())
	if err := os.WriteFile(*addrFile, []byte(addrs), 0o644); err != nil {
		log.Fatal(err)
	}
	go http.Serve(pl, http.HandlerFunc(refuse))
	go http.Serve(ml, s)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// refuse answers the proxy listener: no CONNECT, no proxied request.
func refuse(w http.ResponseWriter, r *http.Request) {
	log.Printf("proxy: refused %s %s", r.Method, r.Host)
	http.Error(w, "no outside hosts in this test", http.StatusForbidden)
}

type server struct {
	dir string

	mu      sync.Mutex
	n       int
	label   string
	usage   int  // one-shot input tokens reported on the next text answer, 0 for none
	fail429 bool // one-shot 429
	// fail429Kind limits the 429 to one kind of request (kindOf), "" for any model request.
	fail429Kind string
	command     string // the shell command the tool calls run, "echo hi" by default
	// usageOnTool reports the one-shot usage on the next tool call instead: an agent that
	// keeps the last usage only in memory (Gemini CLI) checks it within the same run.
	usageOnTool bool
	ids         int
}

type ctl struct {
	Label   *string `json:"label"`
	Usage   *int    `json:"usage"`
	Fail429 *bool   `json:"fail429"`
	Kind429 *string `json:"fail429Kind"`
	Command *string `json:"command"`
	OnTool  *bool   `json:"usageOnTool"`
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_ctl" {
		var c ctl
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if c.Label != nil {
			s.label = *c.Label
		}
		if c.Usage != nil {
			s.usage = *c.Usage
		}
		if c.Fail429 != nil {
			s.fail429 = *c.Fail429
		}
		if c.Command != nil {
			s.command = *c.Command
		}
		if c.Kind429 != nil {
			s.fail429Kind = *c.Kind429
		}
		if c.OnTool != nil {
			s.usageOnTool = *c.OnTool
		}
		s.mu.Unlock()
		return
	}
	raw, err := readBody(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	kind := kindOf(r.URL.Path)

	s.mu.Lock()
	s.n++
	n := s.n
	label := s.label
	fail := false
	if s.fail429 && kind != "count-tokens" && kind != "other" && (s.fail429Kind == "" || s.fail429Kind == kind) {
		fail = true
		s.fail429 = false
	}
	usage := 0
	command := s.command
	s.mu.Unlock()

	a := decide(kind, body, command)
	name := fmt.Sprintf("%02d-%s-%s", n, label, kind)
	switch {
	case fail:
		name += "-answered-429"
	case a.summary:
		name += "-summary-request"
	case a.json:
		name += "-json-side-request"
	case a.main && a.tool == "" && !strings.HasPrefix(kind, "count"):
		name += "-text-answer"
	case a.tool != "":
		name += "-tool-call-answer"
	}
	if err := save(filepath.Join(s.dir, name+".json"), r, raw); err != nil {
		log.Printf("save %s: %v", name, err)
	}
	log.Printf("%s %s %s", name, r.Method, r.URL.RequestURI())
	if fail {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, errorBody(kind))
		return
	}
	if a.main {
		s.mu.Lock()
		if (a.tool == "") != s.usageOnTool && !a.summary && s.usage > 0 {
			usage = s.usage
			s.usage = 0
		}
		s.ids++
		a.id = s.ids
		s.mu.Unlock()
	}
	a.input = len(raw) / 4
	if usage > 0 {
		a.input = usage
	}
	model, _ := body["model"].(string)
	if model == "" {
		model = geminiModel(r.URL.Path)
	}
	a.model = model
	stream, _ := body["stream"].(bool)
	switch kind {
	case "count-tokens":
		writeJSON(w, map[string]any{"input_tokens": len(raw) / 4})
	case "gemini-count-tokens":
		writeJSON(w, map[string]any{"totalTokens": len(raw) / 4})
	case "messages":
		if stream {
			anthropicSSE(w, a)
		} else {
			writeJSON(w, anthropicMessage(a))
		}
	case "responses":
		responsesSSE(w, a)
	case "gemini-stream":
		geminiSSE(w, a)
	case "gemini-generate":
		writeJSON(w, geminiResponse(a))
	case "chat":
		if stream {
			chatSSE(w, a)
		} else {
			writeJSON(w, chatResponse(a))
		}
	default:
		http.Error(w, "not served here", http.StatusNotFound)
	}
}

func errorBody(kind string) string {
	switch kind {
	case "messages":
		return `{"type":"error","error":{"type":"rate_limit_error","message":"rate limited by the capture server"}}`
	case "gemini-stream", "gemini-generate":
		return `{"error":{"code":429,"message":"rate limited by the capture server","status":"RESOURCE_EXHAUSTED"}}`
	}
	return `{"error":{"message":"rate limited by the capture server","type":"rate_limit_error","code":"rate_limit_exceeded"}}`
}

// kindOf names the request by its path (without the query).
func kindOf(p string) string {
	switch {
	case strings.HasSuffix(p, "/messages/count_tokens"):
		return "count-tokens"
	case strings.HasSuffix(p, "/messages"):
		return "messages"
	case strings.HasSuffix(p, "/responses"):
		return "responses"
	case strings.HasSuffix(p, "/chat/completions"):
		return "chat"
	case strings.HasSuffix(p, ":streamGenerateContent"):
		return "gemini-stream"
	case strings.HasSuffix(p, ":generateContent"):
		return "gemini-generate"
	case strings.HasSuffix(p, ":countTokens"):
		return "gemini-count-tokens"
	}
	return "other"
}

func geminiModel(p string) string {
	i := strings.LastIndex(p, "/models/")
	if i < 0 {
		return ""
	}
	m := p[i+len("/models/"):]
	if j := strings.Index(m, ":"); j >= 0 {
		m = m[:j]
	}
	return m
}

func readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		g, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, err
		}
		rd = g
	}
	return io.ReadAll(rd)
}

var secretHeader = regexp.MustCompile(`(?i)(key|token|authorization|cookie|secret)`)

func save(path string, r *http.Request, raw []byte) error {
	headers := map[string]string{}
	for k, v := range r.Header {
		val := strings.Join(v, ", ")
		if secretHeader.MatchString(k) {
			val = "REDACTED"
		}
		headers[strings.ToLower(k)] = val
	}
	var body any
	if err := json.Unmarshal(raw, &body); err != nil {
		body = string(raw)
	}
	rec := map[string]any{
		"method":  r.Method,
		"path":    r.URL.RequestURI(),
		"headers": headers,
		"body":    body,
	}
	return writeFixture(path, rec)
}

func writeFixture(path string, rec any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rec); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// answer is what the script decided for one request.
type answer struct {
	main    bool   // a turn of the agent's loop (not a side request)
	tool    string // shell tool to call, "" for text
	args    map[string]any
	text    string
	json    bool // Gemini JSON-mode side request: text is JSON
	id      int
	input   int
	model   string
	summary bool
	think   bool // the request asks for thinking or reasoning: answer with a thinking block first
}

var shellTools = []string{"Bash", "exec_command", "shell", "run_shell_command", "bash"}

func decide(kind string, body map[string]any, command string) answer {
	if command == "" {
		command = "echo hi"
	}
	a := answer{main: true, text: "Done: the command printed hi. FACT-ALPHA-1 is noted.", think: wantsThinking(kind, body)}
	var last, lastText string
	var tools []map[string]any
	switch kind {
	case "messages":
		last, lastText = lastAnthropic(body)
		tools = flatTools(body["tools"], "name", "input_schema")
	case "responses":
		last, lastText = lastResponses(body)
		tools = flatTools(body["tools"], "name", "parameters")
	case "chat":
		last, lastText = lastChat(body)
		tools = chatTools(body["tools"])
	case "gemini-stream", "gemini-generate":
		last, lastText = lastGemini(body)
		tools = geminiTools(body["tools"])
		if gc, ok := body["generationConfig"].(map[string]any); ok {
			schema := gc["responseJsonSchema"]
			if schema == nil {
				schema = gc["responseSchema"]
			}
			if gc["responseMimeType"] == "application/json" || schema != nil {
				b, _ := json.Marshal(fromSchema(schema))
				a.text, a.json, a.main = string(b), true, false
				return a
			}
		}
	default:
		a.main = false
		return a
	}
	if isSummaryRequest(lastText) {
		a.summary = true
		a.text = "<analysis>The user ran echo hi several times.</analysis>\n<summary>1. The user's first prompt held FACT-ALPHA-1. 2. Each prompt ran `echo hi`, which printed hi.</summary>"
		if strings.Contains(strings.ToLower(lastText), "state_snapshot") {
			a.text = "<state_snapshot><overall_goal>Remember FACT-ALPHA-1; run echo hi.</overall_goal></state_snapshot>"
		}
		return a
	}
	if last != "prompt" || len(tools) == 0 {
		return a
	}
	for _, want := range shellTools {
		for _, t := range tools {
			if t["name"] == want {
				a.tool = want
				a.args = shellArgs(want, t["schema"], command)
				return a
			}
		}
	}
	return a
}

// wantsThinking says whether the request turns on thinking (Anthropic), asks for encrypted
// reasoning (Responses) or for thoughts (Gemini); the answer then carries one, with a
// signature, as the real providers' do, so the fixtures show how each agent sends it back.
func wantsThinking(kind string, body map[string]any) bool {
	switch kind {
	case "messages":
		t, _ := body["thinking"].(map[string]any)
		return t != nil && t["type"] != "disabled"
	case "responses":
		inc, _ := body["include"].([]any)
		for _, x := range inc {
			if x == "reasoning.encrypted_content" {
				return true
			}
		}
	case "gemini-stream", "gemini-generate":
		gc, _ := body["generationConfig"].(map[string]any)
		tc, _ := gc["thinkingConfig"].(map[string]any)
		return tc["includeThoughts"] == true
	}
	return false
}

// summaryPhrases mark an agent's own compaction request in its newest user text.
var summaryPhrases = []string{
	"detailed summary of the conversation", // Claude Code
	"respond with text only",               // Claude Code's compaction preamble
	"context checkpoint compaction",        // Codex
	"state_snapshot",                       // Gemini CLI
	"summarize the conversation",
	"summary of the conversation",
	"anchored summary",
}

func isSummaryRequest(text string) bool {
	low := strings.ToLower(text)
	for _, p := range summaryPhrases {
		if strings.Contains(low, p) {
			return true
		}
	}
	return false
}

// shellArgs fills the shell tool's required arguments.
func shellArgs(name string, schema any, command string) map[string]any {
	switch name {
	case "Bash":
		return map[string]any{"command": command}
	case "exec_command":
		return map[string]any{"cmd": command}
	case "shell":
		return map[string]any{"command": []any{"bash", "-lc", command}}
	}
	args := map[string]any{"command": command}
	sm, _ := schema.(map[string]any)
	req, _ := sm["required"].([]any)
	for _, r := range req {
		k, _ := r.(string)
		if _, ok := args[k]; !ok {
			if k == "description" {
				args[k] = "Print hi"
			} else {
				args[k] = "x"
			}
		}
	}
	return args
}

func flatTools(v any, nameKey, schemaKey string) []map[string]any {
	var out []map[string]any
	list, _ := v.([]any)
	for _, t := range list {
		m, _ := t.(map[string]any)
		if m == nil {
			continue
		}
		out = append(out, map[string]any{"name": m[nameKey], "schema": m[schemaKey]})
	}
	return out
}

func chatTools(v any) []map[string]any {
	var out []map[string]any
	list, _ := v.([]any)
	for _, t := range list {
		m, _ := t.(map[string]any)
		f, _ := m["function"].(map[string]any)
		if f != nil {
			out = append(out, map[string]any{"name": f["name"], "schema": f["parameters"]})
		}
	}
	return out
}

func geminiTools(v any) []map[string]any {
	var out []map[string]any
	list, _ := v.([]any)
	for _, t := range list {
		m, _ := t.(map[string]any)
		decls, _ := m["functionDeclarations"].([]any)
		for _, d := range decls {
			dm, _ := d.(map[string]any)
			schema := dm["parametersJsonSchema"]
			if schema == nil {
				schema = dm["parameters"]
			}
			out = append(out, map[string]any{"name": dm["name"], "schema": schema})
		}
	}
	return out
}

// The last* functions say whether the newest input is a user's "prompt" or a tool's "result",
// and return the prompt's text.

func lastAnthropic(body map[string]any) (string, string) {
	msgs, _ := body["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] != "user" {
			if m["role"] == "assistant" {
				return "assistant", ""
			}
			continue
		}
		switch c := m["content"].(type) {
		case string:
			return "prompt", c
		case []any:
			var text strings.Builder
			kind := "prompt"
			for _, b := range c {
				bm, _ := b.(map[string]any)
				if bm["type"] == "tool_result" {
					kind = "result"
				}
				if t, ok := bm["text"].(string); ok {
					text.WriteString(t + "\n")
				}
			}
			return kind, text.String()
		}
	}
	return "", ""
}

func lastResponses(body map[string]any) (string, string) {
	items, _ := body["input"].([]any)
	for i := len(items) - 1; i >= 0; i-- {
		m, _ := items[i].(map[string]any)
		switch m["type"] {
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			return "result", ""
		case "message", nil:
			if m["role"] != "user" {
				if m["role"] == "assistant" {
					return "assistant", ""
				}
				continue
			}
			var text strings.Builder
			switch c := m["content"].(type) {
			case string:
				text.WriteString(c)
			case []any:
				for _, b := range c {
					bm, _ := b.(map[string]any)
					if t, ok := bm["text"].(string); ok {
						text.WriteString(t + "\n")
					}
				}
			}
			return "prompt", text.String()
		}
	}
	return "", ""
}

func lastChat(body map[string]any) (string, string) {
	msgs, _ := body["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		switch m["role"] {
		case "tool":
			return "result", ""
		case "assistant":
			return "assistant", ""
		case "user":
			var text strings.Builder
			switch c := m["content"].(type) {
			case string:
				text.WriteString(c)
			case []any:
				for _, b := range c {
					bm, _ := b.(map[string]any)
					if t, ok := bm["text"].(string); ok {
						text.WriteString(t + "\n")
					}
				}
			}
			return "prompt", text.String()
		}
	}
	return "", ""
}

func lastGemini(body map[string]any) (string, string) {
	contents, _ := body["contents"].([]any)
	if len(contents) == 0 {
		return "", ""
	}
	m, _ := contents[len(contents)-1].(map[string]any)
	if m["role"] == "model" {
		return "assistant", ""
	}
	parts, _ := m["parts"].([]any)
	var text strings.Builder
	kind := "prompt"
	for _, p := range parts {
		pm, _ := p.(map[string]any)
		if pm["functionResponse"] != nil {
			kind = "result"
		}
		if t, ok := pm["text"].(string); ok {
			text.WriteString(t + "\n")
		}
	}
	return kind, text.String()
}

// fromSchema makes a value that fits a JSON schema (Gemini's JSON-mode side requests: the
// router's choice, the next-speaker check). An enum holding "user" answers "user", so the
// next-speaker check ends the turn.
func fromSchema(v any) any {
	s, _ := v.(map[string]any)
	if s == nil {
		return map[string]any{}
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		for _, x := range e {
			if x == "user" {
				return x
			}
		}
		return e[0]
	}
	t, _ := s["type"].(string)
	switch strings.ToLower(t) {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out[k] = fromSchema(props[k])
		}
		return out
	case "array":
		return []any{}
	case "boolean":
		return false
	case "integer", "number":
		return 0
	}
	return "ok"
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func sse(w http.ResponseWriter, event string, v any) {
	b, _ := json.Marshal(v)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

const outputTokens = 12

func argsJSON(a answer) string {
	b, _ := json.Marshal(a.args)
	return string(b)
}

// Anthropic Messages.

func anthropicUsage(a answer) map[string]any {
	return map[string]any{"input_tokens": a.input, "output_tokens": outputTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}

func anthropicMessage(a answer) map[string]any {
	var content []any
	if a.think {
		content = append(content, map[string]any{"type": "thinking", "thinking": "", "signature": fmt.Sprintf("capture-signature-%04d", a.id)})
	}
	stop := "end_turn"
	if a.tool != "" {
		content = append(content, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%04d", a.id), "name": a.tool, "input": a.args})
		stop = "tool_use"
	} else {
		content = append(content, map[string]any{"type": "text", "text": a.text})
	}
	return map[string]any{"id": fmt.Sprintf("msg_%04d", a.id), "type": "message", "role": "assistant",
		"model": a.model, "content": content, "stop_reason": stop, "stop_sequence": nil, "usage": anthropicUsage(a)}
}

func anthropicSSE(w http.ResponseWriter, a answer) {
	sseHeaders(w)
	u := anthropicUsage(a)
	u["output_tokens"] = 1
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_%04d", a.id), "type": "message", "role": "assistant", "model": a.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": u}})
	stop := "end_turn"
	i := 0
	if a.think {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "signature_delta", "signature": fmt.Sprintf("capture-signature-%04d", a.id)}})
		sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		i = 1
	}
	if a.tool != "" {
		stop = "tool_use"
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%04d", a.id), "name": a.tool, "input": map[string]any{}}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": argsJSON(a)}})
	} else {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
			"delta": map[string]any{"type": "text_delta", "text": a.text}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	sse(w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": anthropicUsage(a)})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// OpenAI Responses.

func responsesSSE(w http.ResponseWriter, a answer) {
	sseHeaders(w)
	id := fmt.Sprintf("resp_%04d", a.id)
	seq := 0
	ev := func(typ string, v map[string]any) {
		v["type"] = typ
		v["sequence_number"] = seq
		seq++
		sse(w, typ, v)
	}
	resp := map[string]any{"id": id, "object": "response", "created_at": time.Now().Unix(), "status": "in_progress", "model": a.model, "output": []any{}}
	ev("response.created", map[string]any{"response": resp})
	var output []any
	idx := 0
	if a.think {
		rs := map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%04d", a.id),
			"summary":           []any{map[string]any{"type": "summary_text", "text": "**Planning**\n\nRun the command."}},
			"encrypted_content": fmt.Sprintf("capture-encrypted-reasoning-%04d", a.id)}
		ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "reasoning", "id": rs["id"], "summary": []any{}}})
		ev("response.reasoning_summary_text.delta", map[string]any{"output_index": idx, "item_id": rs["id"], "summary_index": 0, "delta": "**Planning**\n\nRun the command."})
		ev("response.output_item.done", map[string]any{"output_index": idx, "item": rs})
		output = append(output, rs)
		idx++
	}
	var item map[string]any
	if a.tool != "" {
		item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%04d", a.id), "call_id": fmt.Sprintf("call_%04d", a.id),
			"name": a.tool, "arguments": argsJSON(a), "status": "completed"}
		added := map[string]any{}
		for k, v := range item {
			added[k] = v
		}
		added["arguments"] = ""
		added["status"] = "in_progress"
		ev("response.output_item.added", map[string]any{"output_index": idx, "item": added})
		ev("response.function_call_arguments.delta", map[string]any{"output_index": idx, "item_id": item["id"], "delta": argsJSON(a)})
		ev("response.function_call_arguments.done", map[string]any{"output_index": idx, "item_id": item["id"], "arguments": argsJSON(a)})
	} else {
		mid := fmt.Sprintf("msg_%04d", a.id)
		item = map[string]any{"type": "message", "id": mid, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": a.text, "annotations": []any{}}}}
		ev("response.output_item.added", map[string]any{"output_index": idx,
			"item": map[string]any{"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []any{}}})
		ev("response.output_text.delta", map[string]any{"output_index": idx, "content_index": 0, "item_id": mid, "delta": a.text})
		ev("response.output_text.done", map[string]any{"output_index": idx, "content_index": 0, "item_id": mid, "text": a.text})
	}
	ev("response.output_item.done", map[string]any{"output_index": idx, "item": item})
	output = append(output, item)
	resp["status"] = "completed"
	resp["output"] = output
	resp["usage"] = map[string]any{"input_tokens": a.input, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": outputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": a.input + outputTokens}
	ev("response.completed", map[string]any{"response": resp})
}

// Gemini.

func geminiResponse(a answer) map[string]any {
	var parts []any
	finish := "STOP"
	if a.think && !a.json {
		parts = append(parts, map[string]any{"text": "**Planning**\n\nRun the command.", "thought": true})
	}
	if a.tool != "" {
		call := map[string]any{"functionCall": map[string]any{"name": a.tool, "args": a.args}}
		if a.think {
			call["thoughtSignature"] = fmt.Sprintf("capture-thought-signature-%04d", a.id)
		}
		parts = append(parts, call)
	} else {
		parts = append(parts, map[string]any{"text": a.text})
	}
	return map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": finish, "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": a.input, "candidatesTokenCount": outputTokens, "totalTokenCount": a.input + outputTokens},
		"modelVersion":  a.model,
		"responseId":    fmt.Sprintf("resp_%04d", a.id),
	}
}

func geminiSSE(w http.ResponseWriter, a answer) {
	sseHeaders(w)
	sse(w, "", geminiResponse(a))
}

// Chat Completions.

func chatResponse(a answer) map[string]any {
	msg := map[string]any{"role": "assistant", "content": a.text}
	finish := "stop"
	if a.tool != "" {
		msg["content"] = nil
		msg["tool_calls"] = []any{map[string]any{"id": fmt.Sprintf("call_%04d", a.id), "type": "function",
			"function": map[string]any{"name": a.tool, "arguments": argsJSON(a)}}}
		finish = "tool_calls"
	}
	return map[string]any{"id": fmt.Sprintf("chatcmpl-%04d", a.id), "object": "chat.completion", "created": time.Now().Unix(), "model": a.model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": a.input, "completion_tokens": outputTokens, "total_tokens": a.input + outputTokens}}
}

func chatSSE(w http.ResponseWriter, a answer) {
	sseHeaders(w)
	id := fmt.Sprintf("chatcmpl-%04d", a.id)
	now := time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": now, "model": a.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	finish := "stop"
	if a.tool != "" {
		finish = "tool_calls"
		sse(w, "", chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_%04d", a.id), "type": "function",
			"function": map[string]any{"name": a.tool, "arguments": ""}}}}, nil))
		sse(w, "", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": argsJSON(a)}}}}, nil))
	} else {
		sse(w, "", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		sse(w, "", chunk(map[string]any{"content": a.text}, nil))
	}
	sse(w, "", chunk(map[string]any{}, finish))
	sse(w, "", map[string]any{"id": id, "object": "chat.completion.chunk", "created": now, "model": a.model, "choices": []any{},
		"usage": map[string]any{"prompt_tokens": a.input, "completion_tokens": outputTokens, "total_tokens": a.input + outputTokens}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// trimDir copies every fixture from src to dst, cutting strings longer than max, and the
// values of "description" keys (tool and schema descriptions) longer than maxDesc, except in
// the first file, which keeps them up to max.
func trimDir(src, dst string, max, maxDesc int) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for i, f := range files {
		desc := maxDesc
		if i == 0 {
			desc = max
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := writeFixture(filepath.Join(dst, filepath.Base(f)), cut(v, max, desc)); err != nil {
			return err
		}
	}
	return nil
}

func cut(v any, max, maxDesc int) any {
	switch x := v.(type) {
	case string:
		return cutString(x, max)
	case []any:
		for i := range x {
			x[i] = cut(x[i], max, maxDesc)
		}
		return x
	case map[string]any:
		for k := range x {
			if d, ok := x[k].(string); ok && k == "description" {
				x[k] = cutString(d, maxDesc)
				continue
			}
			x[k] = cut(x[k], max, maxDesc)
		}
		return x
	}
	return v
}

func cutString(x string, max int) string {
	if max <= 0 || len(x) <= max {
		return x
	}
	keep := x[:max]
	for !utf8.ValidString(keep) {
		keep = keep[:len(keep)-1]
	}
	return fmt.Sprintf("%s…[capture: %d more bytes cut]", keep, len(x)-len(keep))
}
