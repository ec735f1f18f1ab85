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
	"github.com/compactor/compactor/internal/proxy/wire/openai"
	"github.com/compactor/compactor/schemas"
)

// ProxyReport is the proxy's cost and effect over an agent loop: each turn the agent
// sends its whole history (the corpus's, up to the model's next message), once straight
// to the upstream and once through the proxy, with the same body; the upstream answers
// both at once with the corpus's next assistant message. The proxy's added latency is
// the difference of the two, per turn, against a NATS request-reply round trip on the
// same server in the same run.
type ProxyReport struct {
	Turns int `json:"turns"`
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
	pcfg.Listen, pcfg.Upstream, pcfg.Wait = "", up.srv.URL, 5*time.Second
	convs := proxy.NewConversations(r.nc, r.store, fixedPolicy(set).Settings, zerolog.Nop())
	srv, err := proxy.New(pcfg, map[string]proxy.Wire{"openai": openai.OpenAI()}, convs, proxy.Options{NATS: r.nc, Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	ps := httptest.NewServer(srv.Handler())
	defer ps.Close()

	script := agentScript(c, turns)
	progress("proxy: %d turns of an agent loop (%d messages) at a %d-token window", len(script.turns), len(script.msgs), proxyWindow)
	out := ProxyReport{Turns: len(script.turns), Window: proxyWindow, History: len(script.msgs)}
	straight, proxied, added, err := runAgentLoop(ctx, script, direct, up, ps.URL, r.ns, &out)
	if err != nil {
		return err
	}
	rtt, err := natsRoundTrips(r, len(script.turns))
	if err != nil {
		return err
	}
	stored, err := r.store.Chat().LoadLeader(ctx, r.ns+"-agent", 0, 0)
	if err != nil {
		return err
	}
	out.Stored = len(stored)
	out.DirectP50Ms, out.DirectP99Ms = ms(pct(straight, 50)), ms(pct(straight, 99))
	out.DirectInput, out.DirectCached = direct.input, direct.cached
	out.ProxyInput, out.ProxyCached = up.input, up.cached
	out.ProxyP50Ms, out.ProxyP99Ms = ms(pct(proxied, 50)), ms(pct(proxied, 99))
	out.AddedP50Ms, out.AddedP99Ms = ms(pct(added, 50)), ms(pct(added, 99))
	out.RTTP50Ms, out.RTTP99Ms = ms(pct(rtt, 50)), ms(pct(rtt, 99))
	if out.RTTP50Ms > 0 && out.RTTP99Ms > 0 {
		out.AddedP50Ratio, out.AddedP99Ratio = out.AddedP50Ms/out.RTTP50Ms, out.AddedP99Ms/out.RTTP99Ms
	}
	if out.ClientTokens > 0 {
		out.TokenRatio = float64(out.SentTokens) / float64(out.ClientTokens)
	}
	rep.Proxy = out
	progress("proxy: added %.2f ms p50, %.2f ms p99 (%.1fx and %.1fx a NATS round trip); tokens sent %.2f of the client's; %d generations, %d cut, %d of %d messages stored",
		out.AddedP50Ms, out.AddedP99Ms, out.AddedP50Ratio, out.AddedP99Ratio, out.TokenRatio, out.Generations, out.Cut, out.Stored, out.History)
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

// fakeUpstream answers every chat completion at once with the reply set for the turn.
// Like a provider's prompt cache, it counts as cached the input its last request
// shares as a prefix (in bytes, 4 to a token), and reports it in the usage.
type fakeUpstream struct {
	srv   *httptest.Server
	reply atomic.Pointer[schemas.Message]

	mu            sync.Mutex
	prev          []byte
	input, cached int64
}

func newFakeUpstream() *fakeUpstream {
	u := &fakeUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		in, cached := u.count(body)
		msg, _ := json.Marshal(u.reply.Load())
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`, msg, in, in+1, cached)
	}))
	return u
}

// count is body's input tokens and the part of them its previous request shares.
func (u *fakeUpstream) count(body []byte) (in, cached int) {
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
	return in, cached
}

// set makes m the upstream's answer.
func (u *fakeUpstream) set(m schemas.Message) { u.reply.Store(&m) }

// runAgentLoop sends each turn straight to one upstream (straight) and through the
// proxy to another (up): each counts its own cache.
func runAgentLoop(ctx context.Context, s script, straight, up *fakeUpstream, proxyURL, ns string, out *ProxyReport) (direct, proxied, added []time.Duration, err error) {
	hc := &http.Client{Timeout: time.Minute}
	post := func(url string, body []byte, conv string) (time.Duration, http.Header, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
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
		body, err := json.Marshal(map[string]any{"model": "bench", "messages": s.msgs[:n]})
		if err != nil {
			return nil, nil, nil, err
		}
		d, _, err := post(straight.srv.URL, body, "")
		if err != nil {
			return nil, nil, nil, fmt.Errorf("turn %d straight: %w", i, err)
		}
		p, h, err := post(proxyURL, body, ns+"-agent")
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
