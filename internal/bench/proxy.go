package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wires"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// ProxyReport is the proxy's cost and effect over an agent loop: each turn the agent
// sends its whole history (the corpus's, up to the model's next message), once straight
// to the upstream and once through the proxy, with the same body; the upstream answers
// both at once with the corpus's next assistant message. The proxy's added latency is
// the difference of the two, per turn, against a NATS request-reply round trip on the
// same server in the same run.
//
// The loop runs once per wire the proxy rewrites (Chat Completions, Anthropic Messages,
// Responses, Gemini), each on a conversation of its own with the agent's history in that
// API's format; Wires holds each run, and the report's own figures are the first's (Chat
// Completions), which docs/benchmarks.md states.
type ProxyReport struct {
	// Wire is the API of the run ("" on the report of every run).
	Wire  string `json:"wire,omitempty"`
	Turns int    `json:"turns"`
	// Window is the model's window the loop ran at: the conversation is compacted many
	// times.
	Window int `json:"window"`
	// DirectP50Ms and ProxyP50Ms (and the p99s) are the turn latencies straight to the
	// upstream and through the proxy; AddedP50Ms and AddedP99Ms the percentiles of the
	// per-turn difference.
	DirectP50Ms float64 `json:"direct_p50_ms"`
	DirectP99Ms float64 `json:"direct_p99_ms"`
	ProxyP50Ms  float64 `json:"proxy_p50_ms"`
	ProxyP99Ms  float64 `json:"proxy_p99_ms"`
	AddedP50Ms  float64 `json:"added_p50_ms"`
	AddedP99Ms  float64 `json:"added_p99_ms"`
	// RTTP50Ms and RTTP99Ms: a NATS request-reply round trip (one client, one responder).
	RTTP50Ms float64 `json:"nats_rtt_p50_ms"`
	RTTP99Ms float64 `json:"nats_rtt_p99_ms"`
	// AddedP50Ratio and AddedP99Ratio: added latency ÷ the round trip, at each percentile.
	AddedP50Ratio float64 `json:"added_p50_ratio"`
	AddedP99Ratio float64 `json:"added_p99_ratio"`
	// ClientTokens and SentTokens: the tokens of every turn's history as the agent sent
	// it, and as the proxy forwarded it (X-Compactor-Tokens-Client and -Sent);
	// TokenRatio is Sent ÷ Client.
	ClientTokens int64   `json:"client_tokens"`
	SentTokens   int64   `json:"sent_tokens"`
	TokenRatio   float64 `json:"token_ratio"`
	// MaxSentTokens is the largest turn forwarded; OverWindow counts turns forwarded
	// over the window (should be 0).
	MaxSentTokens int `json:"max_sent_tokens"`
	OverWindow    int `json:"over_window"`
	// Generations is the compaction generation of the last turn, Cut the turns cut at
	// read time, Stored the messages CHAT holds at the end (each once: the history's).
	Generations uint64 `json:"generations"`
	Cut         int    `json:"cut"`
	Stored      int    `json:"stored"`
	History     int    `json:"history"`
	// DirectInput and DirectCached are the input tokens the upstream received straight
	// from the agent and the part a prompt cache holding the previous request would
	// serve; ProxyInput and ProxyCached the same through the proxy: the bill effect.
	DirectInput  int64 `json:"direct_input_tokens"`
	DirectCached int64 `json:"direct_cached_tokens"`
	ProxyInput   int64 `json:"proxy_input_tokens"`
	ProxyCached  int64 `json:"proxy_cached_tokens"`
	// Wires is each wire's run, the first Chat Completions (whose figures these are).
	Wires []ProxyReport `json:"wires,omitempty"`
}

// proxyWindow is the model's window of the proxy's loop: small, so the 200 turns
// compact many times.
const proxyWindow = 16000

// measureProxy runs the agent loop through the proxy (see ProxyReport).
func measureProxy(ctx context.Context, url string, c *Corpus, turns int, rep *Report, progress func(string, ...any)) error {
	r, err := newRig(ctx, url)
	if err != nil {
		return err
	}
	defer r.close()
	llm := newFakeLLM(0, 400)
	defer llm.close()
	sum, err := llm.summarizer()
	if err != nil {
		return err
	}
	set := settings(proxyWindow)
	stopPool, err := r.startPool(ctx, set, 1, sum)
	if err != nil {
		return err
	}
	defer stopPool()
	_, stopTrigger, err := r.startTrigger(ctx, set)
	if err != nil {
		return err
	}
	defer func() { _ = stopTrigger() }()

	up, direct := newFakeUpstream(), newFakeUpstream()
	defer up.srv.Close()
	defer direct.srv.Close()
	pcfg := proxy.DefaultConfig()
	pcfg.Listen, pcfg.Wait = "", 5*time.Second
	pcfg.Upstream, pcfg.AnthropicUpstream, pcfg.GeminiUpstream = up.srv.URL, up.srv.URL, up.srv.URL
	convs := proxy.NewConversations(r.nc, r.store, fixedPolicy(set).Settings, zerolog.Nop())
	all := wires.All()
	pws := map[string]proxy.Wire{}
	for name, w := range all {
		pws[name] = w
	}
	// The savings ledger on, as a deployment runs it: each turn books its exchange twice.
	srv, err := proxy.New(pcfg, pws, convs, proxy.Options{NATS: r.nc, Logger: zerolog.Nop(), Ledger: r.store.Ledger()})
	if err != nil {
		return err
	}
	ps := httptest.NewServer(srv.Handler())
	defer ps.Close()

	script := agentScript(c, turns)
	var runs []ProxyReport
	var rttN int
	for _, bw := range benchWires {
		w, ok := all[bw.name]
		if !ok {
			continue // a wire this build has not
		}
		bodies, history, err := bw.bodies(w, script)
		if err != nil {
			return fmt.Errorf("proxy: the %s bodies: %w", bw.name, err)
		}
		up.reset(bw)
		direct.reset(bw)
		progress("proxy: %s: %d turns of an agent loop (%d messages) at a %d-token window", bw.name, len(script.turns), len(script.msgs), proxyWindow)
		out := ProxyReport{Wire: bw.name, Turns: len(script.turns), Window: proxyWindow, History: history}
		conv := r.ns + "-agent-" + bw.name
		straight, proxied, added, err := runAgentLoop(ctx, script, bodies, bw.path, direct, up, ps.URL, conv, &out)
		if err != nil {
			return fmt.Errorf("proxy: %s: %w", bw.name, err)
		}
		stored, err := r.store.Chat().LoadLeader(ctx, conv, 0, 0)
		if err != nil {
			return err
		}
		out.Stored = len(stored)
		out.DirectP50Ms, out.DirectP99Ms = ms(pct(straight, 50)), ms(pct(straight, 99))
		out.DirectInput, out.DirectCached = direct.input, direct.cached
		out.ProxyInput, out.ProxyCached = up.input, up.cached
		out.ProxyP50Ms, out.ProxyP99Ms = ms(pct(proxied, 50)), ms(pct(proxied, 99))
		out.AddedP50Ms, out.AddedP99Ms = ms(pct(added, 50)), ms(pct(added, 99))
		if out.ClientTokens > 0 {
			out.TokenRatio = float64(out.SentTokens) / float64(out.ClientTokens)
		}
		runs = append(runs, out)
		rttN = max(rttN, len(script.turns))
	}
	if len(runs) == 0 {
		return fmt.Errorf("proxy: no wire to measure")
	}
	rtt, err := natsRoundTrips(r, rttN)
	if err != nil {
		return err
	}
	rttP50, rttP99 := ms(pct(rtt, 50)), ms(pct(rtt, 99))
	for i := range runs {
		o := &runs[i]
		o.RTTP50Ms, o.RTTP99Ms = rttP50, rttP99
		if o.RTTP50Ms > 0 && o.RTTP99Ms > 0 {
			o.AddedP50Ratio, o.AddedP99Ratio = o.AddedP50Ms/o.RTTP50Ms, o.AddedP99Ms/o.RTTP99Ms
		}
		progress("proxy: %s: added %.2f ms p50, %.2f ms p99 (%.1fx and %.1fx a NATS round trip); tokens sent %.2f of the client's; %d generations, %d cut, %d of %d messages stored",
			o.Wire, o.AddedP50Ms, o.AddedP99Ms, o.AddedP50Ratio, o.AddedP99Ratio, o.TokenRatio, o.Generations, o.Cut, o.Stored, o.History)
	}
	out := runs[0]
	out.Wire, out.Wires = "", runs
	rep.Proxy = out
	return nil
}

// script is an agent loop: the whole history, and at each turn how many of its
// messages the agent sends (the model's reply is the message after them).
type script struct {
	msgs  []schemas.Message
	turns []int
}

// agentScript takes corpus files (each up to its last answered tool call) until they
// hold turns assistant messages; a turn is each assistant message.
func agentScript(c *Corpus, turns int) script {
	var s script
	for i := 0; len(s.turns) < turns && i < 10*len(c.Files); i++ {
		for _, m := range closedPrefix(c.Files[i%len(c.Files)]) {
			if m.Message.Role == schemas.RoleAssistant && len(s.msgs) > 0 {
				s.turns = append(s.turns, len(s.msgs))
			}
			s.msgs = append(s.msgs, m.Message.StripMetadata())
			if len(s.turns) == turns {
				break
			}
		}
	}
	return s
}

// benchWire is one API the loop runs on: the path its requests go to, the body an
// agent's request starts from (its history is rendered into it by the wire's Build),
// and how the upstream answers in it.
type benchWire struct {
	name, path, base string
	answer           func(m schemas.Message, in, cached int) ([]byte, error)
}

// benchWires are the wires the loop runs on, in order: the first's figures are the
// report's own.
var benchWires = []benchWire{
	{name: "openai", path: "/v1/chat/completions", base: `{"model":"bench","messages":[{"role":"user","content":"x"}]}`, answer: answerOpenAI},
	{name: "anthropic", path: "/v1/messages", base: `{"model":"bench","max_tokens":4096,"messages":[{"role":"user","content":"x"}]}`, answer: answerAnthropic},
	{name: "responses", path: "/v1/responses", base: `{"model":"bench","input":[{"role":"user","content":"x"}]}`, answer: answerResponses},
	{name: "gemini", path: "/v1beta/models/bench:generateContent", base: `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`, answer: answerGemini},
}

// render is msgs in w's request format: the base body with its conversation replaced.
func (bw benchWire) render(w wire.Wire, msgs []schemas.Message) ([]byte, error) {
	req, err := w.Parse([]byte(bw.base))
	if err != nil {
		return nil, err
	}
	seqs := make([]uint64, len(msgs))
	for i := range seqs {
		seqs[i] = uint64(i + 1)
	}
	return w.Build(req, &assemble.Context{Messages: msgs, Seqs: seqs})
}

// bodies are the agent's request of each turn of s in w's format, and how many
// messages the last one and its reply are once parsed (the history the proxy stores).
func (bw benchWire) bodies(w wire.Wire, s script) ([][]byte, int, error) {
	out := make([][]byte, len(s.turns))
	for i, n := range s.turns {
		b, err := bw.render(w, s.msgs[:n])
		if err != nil {
			return nil, 0, err
		}
		out[i] = b
	}
	if len(out) == 0 {
		return out, 0, nil
	}
	last, err := w.Parse(out[len(out)-1])
	if err != nil {
		return nil, 0, err
	}
	return out, len(last.Messages) + 1, nil
}

func answerOpenAI(m schemas.Message, in, cached int) ([]byte, error) {
	msg, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`, msg, in, in+1, cached), nil
}

// args is a tool call's arguments as a JSON value (an object as the APIs that take
// them as JSON want, or the string when they are not JSON).
func args(tc schemas.ToolCall) json.RawMessage {
	if json.Valid([]byte(tc.Function.Arguments)) {
		return json.RawMessage(tc.Function.Arguments)
	}
	b, _ := json.Marshal(tc.Function.Arguments)
	return b
}

// answerAnthropic answers with m as content blocks: its text, then a tool_use block per
// tool call.
func answerAnthropic(m schemas.Message, in, cached int) ([]byte, error) {
	blocks := []any{}
	if text := m.Content.String(); text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": text})
	}
	for _, tc := range m.ToolCalls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": args(tc)})
	}
	return json.Marshal(map[string]any{"id": "msg_bench", "type": "message", "role": "assistant", "model": "bench", "content": blocks,
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in - cached, "cache_read_input_tokens": cached, "output_tokens": 1}})
}

// answerResponses answers with m as output items: its text as a message, each tool
// call as a function_call.
func answerResponses(m schemas.Message, in, cached int) ([]byte, error) {
	var items []any
	if text := m.Content.String(); text != "" {
		items = append(items, map[string]any{"type": "message", "id": "msg_bench", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	for i, tc := range m.ToolCalls {
		items = append(items, map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_bench_%d", i), "call_id": tc.ID,
			"name": tc.Function.Name, "arguments": tc.Function.Arguments, "status": "completed"})
	}
	return json.Marshal(map[string]any{"id": "resp_bench", "object": "response", "status": "completed", "model": "bench", "output": items,
		"usage": map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": cached}, "output_tokens": 1, "total_tokens": in + 1}})
}

// answerGemini answers with m as parts: its text, then a functionCall per tool call.
func answerGemini(m schemas.Message, in, cached int) ([]byte, error) {
	parts := []any{}
	if text := m.Content.String(); text != "" {
		parts = append(parts, map[string]any{"text": text})
	}
	for _, tc := range m.ToolCalls {
		parts = append(parts, map[string]any{"functionCall": map[string]any{"name": tc.Function.Name, "args": args(tc)}})
	}
	return json.Marshal(map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": in, "cachedContentTokenCount": cached, "candidatesTokenCount": 1, "totalTokenCount": in + 1},
		"modelVersion":  "bench"})
}

// fakeUpstream answers every request at once with the reply set for the turn, in the
// format of the wire it was reset to. Like a provider's prompt cache, it counts as
// cached the input its last request shares as a prefix (in bytes, 4 to a token), and
// reports it in the usage.
type fakeUpstream struct {
	srv   *httptest.Server
	reply atomic.Pointer[schemas.Message]

	mu            sync.Mutex
	bw            benchWire
	prev          []byte
	input, cached int64
}

func newFakeUpstream() *fakeUpstream {
	u := &fakeUpstream{bw: benchWires[0]}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		in, cached, answer := u.count(body)
		out, err := answer(*u.reply.Load(), in, cached)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	return u
}

// reset makes the upstream answer in bw's format, its counts zero.
func (u *fakeUpstream) reset(bw benchWire) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.bw, u.prev, u.input, u.cached = bw, nil, 0, 0
}

// count is body's input tokens and the part of them its previous request shares.
func (u *fakeUpstream) count(body []byte) (in, cached int, answer func(schemas.Message, int, int) ([]byte, error)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for n < len(body) && n < len(u.prev) && body[n] == u.prev[n] {
		n++
	}
	u.prev = body
	in, cached = len(body)/4, n/4
	u.input += int64(in)
	u.cached += int64(cached)
	return in, cached, u.bw.answer
}

// set makes m the upstream's answer.
func (u *fakeUpstream) set(m schemas.Message) { u.reply.Store(&m) }

// runAgentLoop sends each turn's body straight to one upstream (straight) and through
// the proxy to another (up), at path: each counts its own cache.
func runAgentLoop(ctx context.Context, s script, bodies [][]byte, path string, straight, up *fakeUpstream, proxyURL, conv string, out *ProxyReport) (direct, proxied, added []time.Duration, err error) {
	hc := &http.Client{Timeout: time.Minute}
	post := func(url string, body []byte, conv string) (time.Duration, http.Header, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench")
		if conv != "" {
			req.Header.Set("X-Compactor-Conversation", conv)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			return 0, nil, fmt.Errorf("%s answered %s", url, resp.Status)
		}
		return d, resp.Header, nil
	}
	for i, n := range s.turns {
		straight.set(s.msgs[n])
		up.set(s.msgs[n])
		d, _, err := post(straight.srv.URL, bodies[i], "")
		if err != nil {
			return nil, nil, nil, fmt.Errorf("turn %d straight: %w", i, err)
		}
		p, h, err := post(proxyURL, bodies[i], conv)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("turn %d through the proxy: %w", i, err)
		}
		direct, proxied, added = append(direct, d), append(proxied, p), append(added, max(p-d, 0))
		countTurn(h, out)
	}
	return direct, proxied, added, nil
}

// countTurn adds what the proxy's headers say of one turn.
func countTurn(h http.Header, out *ProxyReport) {
	sent, _ := strconv.Atoi(h.Get(proxy.TokensSentHeader))
	client, _ := strconv.Atoi(h.Get(proxy.TokensClientHead))
	out.SentTokens += int64(sent)
	out.ClientTokens += int64(client)
	out.MaxSentTokens = max(out.MaxSentTokens, sent)
	if sent > proxyWindow {
		out.OverWindow++
	}
	if h.Get(proxy.CutHeader) == "true" {
		out.Cut++
	}
	if g, err := strconv.ParseUint(h.Get(proxy.GenerationHeader), 10, 64); err == nil {
		out.Generations = g
	}
}

// natsRoundTrips times n request-reply round trips on r's server.
func natsRoundTrips(r *rig, n int) ([]time.Duration, error) {
	subj := r.ns + ".rtt"
	sub, err := r.nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := r.nc.Flush(); err != nil {
		return nil, err
	}
	nc, err := r.conn("bench-rtt")
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := nc.Request(subj, []byte("ping"), 5*time.Second); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
