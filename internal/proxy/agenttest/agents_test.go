package agenttest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/schemas"
)

// The four agents, each a long tool-using session through the proxy with its default
// settings (see session below).

// TestClaudeCode: Claude Code 2.1.332 (Anthropic Messages); its own compaction is
// `-p "/compact" --continue`.
func TestClaudeCode(t *testing.T) { runSession(t, claudeCode, 64000, own{cmd: "/compact"}) }

// TestCodex: Codex 0.171.0 (Responses API); its own compaction follows a huge usage
// on a final answer (the next prompt starts with its compaction request).
func TestCodex(t *testing.T) { runSession(t, codex, 32000, own{huge: endsWithResult}) }

// TestGeminiCLI: Gemini CLI 0.61.0 (Gemini API, /c/<conversation> in its base URL);
// its own compression follows a huge usage on a tool-call answer (it compresses before
// sending the tool's result), answered from the summary as a side task.
//
// Not tested: `gemini -p "/compress" --resume latest`. Run headless, Gemini CLI both
// compresses and sends "/compress" to the model as a prompt, then drops that prompt's
// whole turn (the newest stored messages) from its next history, which the proxy takes
// for an edit: that session goes on, on a branch started from the client's own messages.
// Its compression requests themselves are answered as here (see
// TestGeminiCompressionIsAnsweredAndNotStored in internal/proxy).
func TestGeminiCLI(t *testing.T) {
	runSession(t, geminiCLI, 64000, own{huge: func(path string, body []byte) bool {
		return isTurn(path, body) && !endsWithResult(path, body)
	}})
}

// TestOpenCode: OpenCode 1.18.33 (Chat Completions); its own compaction follows a huge
// usage on a final answer, in the same run.
func TestOpenCode(t *testing.T) { runSession(t, openCode, 48000, own{huge: endsWithResult}) }

// own is how an agent is made to compact its history on its own: a command run as a
// prompt of its own (cmd), or a huge usage reported on the upstream request huge
// matches, during prompt stepOwnBegin.
type own struct {
	cmd  string
	huge func(path string, body []byte) bool
}

// The window w of each agent is the conversation's context window
// (COMPACTOR_CONTEXT_WINDOW), in the project's tokens (4 characters). Measured (the
// fake's count, bytes/4): each agent's first request (system prompt, tools, one prompt)
// is 7,300 (OpenCode) to 12,300 (Claude Code) tokens, its max_tokens 4,096 (Claude
// Code and OpenCode, capped: see claudeMaxOutput) or none (Codex, Gemini CLI); a
// prompt's round (prompt, call, the command's output, answer) adds about 6,000 tokens
// (Codex cuts the output to about 2,600). The window leaves room for tools and
// max_tokens above the compaction threshold (0.75 × w: the proxy cuts what is over
// w less max_tokens and tools), and 12 prompts cross that threshold at least twice.

// command is the shell command the fake model has the agent run: 9,000 bytes of output.
const command = "seq 100000 102999"

// prompts is how many prompts a session runs (the agent's own compaction step apart).
const prompts = 13

// Steps of the session, by prompt number.
const (
	step429      = 4  // the fake answers the first request of this prompt 429 once
	stepRestart  = 6  // the proxy is restarted before this prompt
	stepOwnBegin = 10 // the agent's own compaction happens at this prompt (or before it)
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runSession runs agent a through a session of prompts through the proxy and checks
// what the proxy promises (docs/proxy.md). how says how the agent is made to compact
// on its own (see own).
func runSession(t *testing.T, a agent, w int, how own) {
	compactCmd := how.cmd
	jsDir(t, a.bin)
	began := time.Now()
	if v, err := strconv.Atoi(os.Getenv("AGENTTEST_WINDOW")); err == nil && v > 0 {
		w = v
	}
	n := prompts
	if v, err := strconv.Atoi(os.Getenv("AGENTTEST_PROMPTS")); err == nil && v > 0 {
		n = v
	}
	s := startStack(t, w, command)
	base := s.rec.URL
	conv := ""
	if a.name == "gemini-cli" {
		conv = "gemini-" + randomHex(6)
		base += "/c/" + conv
	}
	ss := newSession(t, a, s, base)
	fact := "FACT-" + strings.ToUpper(randomHex(5))

	var (
		ex429                 = -1 // exchanges before the 429 prompt
		exRestart             = -1
		exOwn                 = -1 // exchanges before the agent's own compaction step
		exOwnEnd              = -1
		compBefore, compAfter int
	)
	for i := 1; i <= n; i++ {
		prompt := fmt.Sprintf("Prompt %d: run the command again.", i)
		switch {
		case i == 1:
			prompt = fmt.Sprintf("Remember this fact: %s. Then run the command.", fact)
		case i == n:
			prompt = "Last prompt: what was the fact from my first prompt? Run the command, then tell me."
		}
		if i == step429 {
			ex429 = len(s.rec.exchanges())
			s.arm429(isTurn)
		}
		if i == stepRestart {
			exRestart = len(s.rec.exchanges())
			s.restartProxy()
			t.Logf("proxy restarted before prompt %d", i)
		}
		if i == stepOwnBegin {
			if conv == "" {
				conv = sessionConv(s.rec.exchanges())
			}
			waitSummary(t, s, conv)
			exOwn, compBefore = len(s.rec.exchanges()), s.fake.Compactions()
			if compactCmd != "" {
				ss.run(compactCmd)
			} else {
				// a huge usage on this prompt's final answer: Codex compacts before its
				// next prompt, OpenCode at once
				s.armHuge(how.huge)
			}
		}
		if compactCmd == "" && i == stepOwnBegin+2 {
			exOwnEnd, compAfter = len(s.rec.exchanges()), s.fake.Compactions()
		}
		if compactCmd != "" && i == stepOwnBegin {
			exOwnEnd, compAfter = len(s.rec.exchanges()), s.fake.Compactions()
		}
		ss.run(prompt)
	}
	if conv == "" {
		conv = sessionConv(s.rec.exchanges())
	}
	ex := s.rec.exchanges()
	reqs := s.fake.Agent()
	t.Logf("%s: %d runs, %d exchanges through the proxy, %d upstream agent requests, %d summarizer requests, conversation %s, %s",
		a.name, ss.runs, len(ex), len(reqs), s.fake.Summaries(), conv, time.Since(began).Round(time.Second))
	for i, e := range ex {
		t.Logf("  ex %3d %s %s -> %d conv=%s gen=%s sent=%s client=%s cut=%s answered=%s side=%s status=%s pass=%s size=%d",
			i, e.Method, e.Path, e.Status, e.Header.Get("X-Compactor-Conversation"), e.Header.Get("X-Compactor-Generation"),
			e.Header.Get("X-Compactor-Tokens-Sent"), e.Header.Get("X-Compactor-Tokens-Client"), e.Header.Get("X-Compactor-Cut"),
			e.Header.Get("X-Compactor-Answered"), e.Header.Get("X-Compactor-Side"), e.Header.Get("X-Compactor-Status"),
			e.Header.Get("X-Compactor-Passthrough"), e.Size)
	}
	for i, r := range reqs {
		t.Logf("  up %3d %s %s tokens=%d entries=%d compaction=%q%s", i, r.Method, r.Path, requestTokens(r), len(r.Messages), r.Compaction, resultCounts(r))
	}
	if dir := os.Getenv("AGENTTEST_LOGS"); dir != "" {
		for i, r := range reqs {
			_ = os.WriteFile(fmt.Sprintf("%s/%s-up-%03d.json", dir, a.name, i), r.Body, 0o644)
		}
		for i, e := range ex {
			h, _ := json.Marshal(e.Header)
			_ = os.WriteFile(fmt.Sprintf("%s/%s-ex-%03d.json", dir, a.name, i), append(append([]byte(e.Method+" "+e.Path+"\n"), h...), append([]byte("\n"), e.Body...)...), 0o644)
		}
	}

	// 0. Offline: the refusing proxy saw no host but the tolerated ones.
	bad, all := ss.hostsSeen()
	t.Logf("outside hosts refused: %v", all)
	if len(bad) > 0 {
		t.Errorf("offline: %s tried outside hosts not tolerated: %v", a.name, bad)
	}

	// 1. Every upstream request is within the window.
	over := 0
	for i, r := range reqs {
		if n := requestTokens(r); n > w {
			over++
			t.Errorf("window: upstream request %d (%s) is %d tokens, over the window of %d", i, r.Path, n, w)
		}
	}
	report(t, 1, "every upstream request within the window", over == 0, fmt.Sprintf("%d requests, largest %d tokens", len(reqs), largest(reqs)))

	// 2. Tool calls and results whole.
	broken := 0
	for i, r := range reqs {
		if p := toolPairs(r); p != "" {
			broken++
			t.Errorf("tool pairs: upstream request %d (%s): %s\n%s", i, r.Path, p, outline(r))
		}
	}
	report(t, 2, "tool calls and results whole", broken == 0, fmt.Sprintf("%d requests broken", broken))

	// 3. Each message stored once: the conversation, no branch, no duplicate turns.
	convs := s.conversations(t)
	t.Logf("conversations in CHAT: %v", convs)
	ok3 := true
	if convs[conv] == 0 {
		ok3 = false
		t.Errorf("stored: conversation %s holds nothing (CHAT holds %v)", conv, convs)
	}
	stored := s.stored(t, conv)
	for c := range convs {
		if strings.HasPrefix(c, conv+"--") {
			ok3 = false
			first := ""
			for _, e := range ex {
				if e.Header.Get("X-Compactor-Conversation") == c {
					first = fmt.Sprintf("%s %s (X-Compactor-Branch %q)", e.Method, e.Path, e.Header.Get("X-Compactor-Branch"))
					break
				}
			}
			branch := s.stored(t, c)
			t.Errorf("stored: a branch %s was created during a plain session, first named in the answer to %s;\nthe last messages of %s:\n%s\nthe branch's first messages:\n%s",
				c, first, conv, dump(stored[max(0, len(stored)-6):]), dump(branch[:min(len(branch), 6)]))
		}
	}
	dups := duplicates(stored)
	if len(dups) > 0 {
		ok3 = false
		t.Errorf("stored: consecutive duplicate messages at %v:\n%s", dups, dump(stored))
	}
	if len(stored) > 6*ss.runs+12 {
		ok3 = false
		t.Errorf("stored: %d messages for %d runs, more than plausible:\n%s", len(stored), ss.runs, dump(stored))
	}
	report(t, 3, "each message stored once", ok3, fmt.Sprintf("%d messages in %s, %d conversations %v", len(stored), conv, len(convs), sortedKeys(convs)))

	// 4. The fact of prompt 1 reaches the model in the last request, compacted.
	last := lastTurn(reqs)
	ok4 := last != nil && strings.Contains(fakeupstream.Conversation(last), fact)
	if !ok4 {
		t.Errorf("fact: the last upstream turn request does not carry %s", fact)
		if last != nil {
			t.Logf("last request:\n%s", outline(last))
		}
	}
	if out := ss.outputs[len(ss.outputs)-1]; !strings.Contains(out, fact) {
		ok4 = false
		t.Errorf("fact: the agent's last answer does not quote %s:\n%s", fact, tail(out, 2000))
	}
	cx, err := s.pc.Context(ctxFor(t, 20*time.Second), conv)
	if err != nil {
		t.Fatalf("context of %s: %v", conv, err)
	}
	lastEx := lastTurnExchange(ex)
	gen, _ := strconv.Atoi(lastEx.Header.Get("X-Compactor-Generation"))
	sent, _ := strconv.Atoi(lastEx.Header.Get("X-Compactor-Tokens-Sent"))
	client, _ := strconv.Atoi(lastEx.Header.Get("X-Compactor-Tokens-Client"))
	if !cx.HasSummary || cx.Generation < 1 || gen < 1 {
		ok4 = false
		t.Errorf("fact: the conversation is not compacted: summary %v, generation %d, the last turn's X-Compactor-Generation %q",
			cx.HasSummary, cx.Generation, lastEx.Header.Get("X-Compactor-Generation"))
	}
	history := historyTokens(stored)
	if last != nil && requestTokens(last) >= history {
		ok4 = false
		t.Errorf("fact: the last upstream request (%d tokens) is not smaller than the whole stored history (%d tokens)", requestTokens(last), history)
	}
	report(t, 4, "the fact of prompt 1 reaches the model, compacted", ok4,
		fmt.Sprintf("generation %d (header %d), last request %d tokens (sent %d, client %d), stored history %d tokens",
			cx.Generation, gen, tokensOf(last), sent, client, history))

	// 5. The agent's own compaction is answered from Compactor's summary.
	ok5 := exOwn >= 0 && exOwnEnd > exOwn
	answered := 0
	if ok5 {
		for _, e := range ex[exOwn:exOwnEnd] {
			if e.Header.Get("X-Compactor-Answered") != "" {
				answered++
				if e.Header.Get("X-Compactor-Answered") != a.name {
					t.Errorf("own compaction: X-Compactor-Answered %q, want %q", e.Header.Get("X-Compactor-Answered"), a.name)
				}
			}
		}
	}
	if answered == 0 {
		ok5 = false
		t.Errorf("own compaction: no request of the step (exchanges %d to %d) was answered by the proxy (X-Compactor-Answered)", exOwn, exOwnEnd)
	}
	if compAfter != compBefore {
		ok5 = false
		t.Errorf("own compaction: the model answered %d compaction prompts during the step (the proxy forwarded them)", compAfter-compBefore)
		for _, r := range reqs {
			if r.Compaction != "" {
				t.Logf("forwarded compaction request: %s %s headers %v\n%s", r.Method, r.Path, r.Header, outline(r))
			}
		}
	}
	if compactCmd == "" && s.hugeN.Load() == 0 {
		ok5 = false
		t.Errorf("own compaction: no final answer reported the huge usage")
	}
	report(t, 5, "the agent's own compaction answered from the summary", ok5,
		fmt.Sprintf("%d answered, model compactions %d -> %d", answered, compBefore, compAfter))

	// 6. A 429 once, retried, the session goes on.
	ok6 := false
	if ex429 >= 0 {
		for i := ex429; i < len(ex)-1; i++ {
			if ex[i].Status == http.StatusTooManyRequests {
				for _, e := range ex[i+1:] {
					if e.Path == ex[i].Path && e.Status == http.StatusOK {
						ok6 = true
						break
					}
				}
				t.Logf("429 at exchange %d (%s), retry-after %q", i, ex[i].Path, ex[i].Header.Get("Retry-After"))
				break
			}
		}
	}
	if !ok6 {
		t.Errorf("429: no 429 answered and then retried with success")
	}
	report(t, 6, "a 429 retried, the session goes on", ok6, "")

	// 7. The session goes on after the proxy's restart, in the same conversation.
	ok7 := exRestart >= 0
	if ok7 {
		got := ""
		for _, e := range ex[exRestart:] {
			if e.Status == http.StatusOK && e.Header.Get("X-Compactor-Side") == "" && e.Header.Get("X-Compactor-Conversation") != "" {
				got = e.Header.Get("X-Compactor-Conversation")
				break
			}
		}
		if got != conv {
			ok7 = false
			t.Errorf("restart: the first turn after the restart went to %q, not %s", got, conv)
		}
	}
	report(t, 7, "the session continues after a proxy restart", ok7, "")
	t.Logf("%s: %s in all", a.name, time.Since(began).Round(time.Second))
}

// report logs one assertion's status, for the summary.
func report(t *testing.T, n int, what string, ok bool, detail string) {
	status := "PASS"
	if !ok {
		status = "FAIL"
	}
	t.Logf("ASSERTION %d %s: %s (%s)", n, status, what, detail)
}

// waitSummary waits until the pipeline compacted conv (a summary in its context).
func waitSummary(t *testing.T, s *stack, conv string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		cx, err := s.pc.Context(ctxFor(t, 10*time.Second), conv)
		if err == nil && cx.HasSummary {
			t.Logf("conversation %s compacted: generation %d, %d tokens", conv, cx.Generation, cx.Tokens)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the pipeline did not compact %s before the agent's own compaction (context: %v, err %v)", conv, cx != nil && cx.HasSummary, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// sessionConv is the conversation most turns went to.
func sessionConv(ex []exchange) string {
	count := map[string]int{}
	best := ""
	for _, e := range ex {
		c := e.Header.Get("X-Compactor-Conversation")
		if c == "" || e.Header.Get("X-Compactor-Side") != "" {
			continue
		}
		count[c]++
		if count[c] > count[best] {
			best = c
		}
	}
	return best
}

// endsWithResult says an upstream request's last entry is a tool result (its answer is
// the turn's final text).
func endsWithResult(path string, body []byte) bool {
	var b struct {
		Messages []json.RawMessage `json:"messages"`
		Input    []json.RawMessage `json:"input"`
		Contents []json.RawMessage `json:"contents"`
	}
	if json.Unmarshal(body, &b) != nil {
		return false
	}
	r := &fakeupstream.Request{}
	switch {
	case strings.HasSuffix(path, "/responses"):
		r.API, r.Messages = fakeupstream.Responses, b.Input
	case strings.HasSuffix(path, "/chat/completions"):
		r.API, r.Messages = fakeupstream.OpenAI, b.Messages
	case strings.HasSuffix(path, "/messages"):
		r.API, r.Messages = fakeupstream.Anthropic, b.Messages
	default:
		r.API, r.Messages = fakeupstream.Gemini, b.Contents
	}
	return fakeupstream.EndsWithToolResult(r)
}

// isTurn says an upstream request is one of the agent's turns: it declares tools and
// asks for no structured output (not a side request, a compaction or a title).
func isTurn(path string, body []byte) bool {
	var b struct {
		Tools            json.RawMessage `json:"tools"`
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	if json.Unmarshal(body, &b) != nil {
		return false
	}
	return len(b.Tools) > 2 && b.GenerationConfig.ResponseMimeType != "application/json"
}

// lastTurn is the last upstream request that declares tools (a turn, not a side
// request or a compaction).
func lastTurn(reqs []*fakeupstream.Request) *fakeupstream.Request {
	for i := len(reqs) - 1; i >= 0; i-- {
		if len(reqs[i].Fields["tools"]) > 2 && reqs[i].Compaction == "" {
			return reqs[i]
		}
	}
	return nil
}

// lastTurnExchange is the last exchange that was a stored turn.
func lastTurnExchange(ex []exchange) exchange {
	for i := len(ex) - 1; i >= 0; i-- {
		e := ex[i]
		if e.Status == http.StatusOK && e.Header.Get("X-Compactor-Generation") != "" && e.Header.Get("X-Compactor-Side") == "" {
			return e
		}
	}
	return exchange{Header: http.Header{}}
}

func tokensOf(r *fakeupstream.Request) int {
	if r == nil {
		return 0
	}
	return requestTokens(r)
}

func largest(reqs []*fakeupstream.Request) int {
	m := 0
	for _, r := range reqs {
		m = max(m, requestTokens(r))
	}
	return m
}

// historyTokens is the stored messages' size, four bytes a token.
func historyTokens(msgs []schemas.Message) int {
	n := 0
	for _, m := range msgs {
		b, _ := json.Marshal(m.Content)
		n += len(b)
		for _, c := range m.ToolCalls {
			n += len(c.Function.Name) + len(c.Function.Arguments)
		}
	}
	return n / 4
}

// duplicates is the positions of stored messages equal to the one before them (role,
// content, calls, call id).
func duplicates(msgs []schemas.Message) []int {
	var out []int
	key := func(m schemas.Message) string {
		b, _ := json.Marshal(struct {
			R string
			C any
			T any
			I string
		}{string(m.Role), m.Content, m.ToolCalls, m.ToolCallID})
		return string(b)
	}
	for i := 1; i < len(msgs); i++ {
		if key(msgs[i]) == key(msgs[i-1]) {
			out = append(out, i)
		}
	}
	return out
}
