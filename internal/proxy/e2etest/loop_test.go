package e2etest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/pipeline"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// The loop's settings: a small window, so that 200 turns compact many times.
const (
	loopWindow    = 6000
	loopMaxTokens = 200
	loopTurns     = 200
	loopConv      = "e2e-loop"
)

var (
	stepRE = regexp.MustCompile(`Step (\d+)`)
	callRE = regexp.MustCompile(`^(?:call|toolu)_(\d+)$`)
	filler = strings.Repeat("compiling module with nothing of note; ", 15)
	words  = []string{"amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"}
)

// loopResponder answers the loop's requests, in either API: a user message last (Step
// N) gets a call of run_build (id call_N, or toolu_N on the Anthropic wire); a tool
// result last gets a text reply, unique to the request, so a regenerated reply differs
// from the one it replaces.
func loopResponder(seq *int) func(r *fakeupstream.Request) fakeupstream.Reply {
	return func(r *fakeupstream.Request) fakeupstream.Reply {
		*seq++
		var last flat
		if r.API == fakeupstream.Anthropic {
			fs := flatAnthropic(nil, nil, r.Messages[len(r.Messages)-1:])
			last = fs[len(fs)-1]
		} else {
			last = flatOpenAI(nil, r.Messages[len(r.Messages)-1:])[0]
		}
		if g := callRE.FindStringSubmatch(last.Result); last.Role == "tool" && g != nil {
			return fakeupstream.Reply{Text: fmt.Sprintf("Build %s passed (reply %d).", g[1], *seq)}
		}
		if g := stepRE.FindStringSubmatch(last.Text); last.Role == "user" && g != nil {
			id := "call_" + g[1]
			if r.API == fakeupstream.Anthropic {
				id = "toolu_" + g[1]
			}
			return fakeupstream.Reply{ToolCalls: []fakeupstream.ToolCall{{ID: id, Name: "run_build",
				Arguments: fmt.Sprintf(`{"step":%s}`, g[1])}}}
		}
		return fakeupstream.Reply{Text: "unexpected request"}
	}
}

// agentWire is how the loop's client speaks one API: its history (wire-neutral, as
// flat messages) goes out as the API's request, the reply comes back as a flat message.
type agentWire interface {
	// send sends history, streamed or not; ctx ends it early. It returns the reply and
	// the response's headers.
	send(ctx context.Context, history []flat, stream bool) (flat, http.Header, error)
	// upstream is what the upstream received, reduced.
	upstream(r *fakeupstream.Request) []flat
}

// loop is the agent: its history, what it has removed, and the figures.
type loop struct {
	t       *testing.T
	s       *stack
	wire    agentWire
	history []flat
	userAt  map[int]int // turn -> index of its user message in history
	// removed are texts the client no longer has: no upstream request may hold one
	// after its removal.
	removed []string
	facts   []string // planted so far, in messages the client has
	sends   int
	// checked is how many upstream agent requests were checked.
	checked int
	// clientTokens and forwardedTokens sum, over every request, the client's history
	// and what the upstream was sent, as the project's chars4 estimate counts them.
	clientTokens, forwardedTokens int
	cut                           int
	convs                         map[string]bool // the conversations the proxy named
	lastConv                      string
	branchAt                      int // history length at the last branch event
	// direct says the loop talks to the fake upstream itself (no proxy): the checks of
	// the proxy's work (headers, window, CHAT) are off.
	direct bool
	// prev is the last upstream request checked and its generation, for the cached
	// prefix; extends says the client's next request extends the one before it (false
	// after a disconnect, a regenerate, an edit or a retry); kept counts the requests
	// whose prefix was checked byte for byte.
	prev    *fakeupstream.Request
	prevGen string
	extends bool
	kept    int
}

// newLoop is a loop speaking wire, the fake upstream of s answering.
func newLoop(t *testing.T, s *stack, wire agentWire) *loop {
	var seq int
	s.up.Respond = loopResponder(&seq)
	return &loop{t: t, s: s, wire: wire, userAt: map[int]int{}, convs: map[string]bool{}, lastConv: loopConv,
		history: []flat{{Role: "system", Text: "You are Ada, a careful build engineer."}}}
}

func (l *loop) userMessage(i int) flat {
	text := fmt.Sprintf("Step %d: run the build again. ORIG-%03d", i, i)
	if i%10 == 0 {
		f := fmt.Sprintf("FACT-%03d=%s", i, words[(i/10)%len(words)])
		text = fmt.Sprintf("Step %d: remember %s and run the build. ORIG-%03d", i, f, i)
		l.facts = append(l.facts, f)
	}
	return flat{Role: "user", Text: text}
}

// send sends the history (streamed every third request) and returns the reply.
func (l *loop) send() flat {
	t := l.t
	t.Helper()
	l.sends++
	n := len(l.s.up.Agent())
	reply, h, err := l.wire.send(ctxFor(t, time.Minute), l.history, l.sends%3 == 0)
	if err != nil {
		t.Fatalf("request %d: %v", l.sends, err)
	}
	l.check(lastAgent(t, l.s.up, n), h)
	return reply
}

// check checks one upstream request against the loop's rules.
func (l *loop) check(r *fakeupstream.Request, h http.Header) {
	t := l.t
	t.Helper()
	l.checked++
	if l.direct {
		h = http.Header{"X-Compactor-Status": {"compacted"}, "X-Compactor-Conversation": {loopConv}}
	}
	if h.Get("X-Compactor-Status") != "compacted" {
		t.Fatalf("request %d: X-Compactor-Status %q", l.sends, h.Get("X-Compactor-Status"))
	}
	if conv := h.Get("X-Compactor-Conversation"); conv != l.lastConv {
		l.lastConv, l.branchAt = conv, len(l.history)
	}
	l.convs[l.lastConv] = true
	sent := l.wire.upstream(r)
	size := loopMaxTokens + estimate(sent)
	if size > loopWindow && !l.direct {
		t.Fatalf("request %d: the upstream was sent %d tokens (max_tokens included), over the window of %d", l.sends, size, loopWindow)
	}
	checkToolPairs(t, l.sends, sent)
	body := string(r.Body)
	for _, gone := range l.removed {
		if strings.Contains(body, gone) {
			t.Fatalf("request %d: the upstream was sent %q, which the client removed; headers %v; it was sent\n%s",
				l.sends, gone, h, flatLines(sent))
		}
	}
	if h.Get("X-Compactor-Cut") == "true" {
		l.cut++
	} else {
		for _, f := range l.facts {
			if !strings.Contains(body, f) {
				t.Fatalf("request %d: the upstream was not sent the planted fact %s (no cut said); headers %v; it was sent\n%s",
					l.sends, f, h, flatLines(sent))
			}
		}
	}
	l.clientTokens += estimate(l.history)
	l.forwardedTokens += size - loopMaxTokens
	l.checkPrefix(r, h)
}

// checkPrefix checks that, between compactions, what the upstream was sent before is
// sent again byte for byte: when the client's request extends its previous one and
// the proxy names the same conversation and generation and cut neither, every message
// (and the system) the upstream got last time comes first, unchanged.
func (l *loop) checkPrefix(r *fakeupstream.Request, h http.Header) {
	t := l.t
	t.Helper()
	gen, cut := h.Get("X-Compactor-Generation"), h.Get("X-Compactor-Cut") == "true"
	prev, prevGen, extends := l.prev, l.prevGen, l.extends
	l.prev, l.prevGen, l.extends = r, gen, !cut
	if l.direct || prev == nil || !extends || cut || gen == "" || gen != prevGen || l.branchAt == len(l.history) {
		return
	}
	if !bytes.Equal(prev.System, r.System) || len(r.Messages) < len(prev.Messages) {
		t.Fatalf("request %d: generation %s again, but the system or the messages before changed:\n%s\nthen\n%s",
			l.sends, gen, flatLines(l.wire.upstream(prev)), flatLines(l.wire.upstream(r)))
	}
	for i, m := range prev.Messages {
		if !bytes.Equal(m, r.Messages[i]) {
			t.Fatalf("request %d: generation %s again, but message %d changed:\n%s\nthen\n%s", l.sends, gen, i, m, r.Messages[i])
		}
	}
	l.kept++
}

// estimate is the project's chars4 estimate of messages.
func estimate(fs []flat) int {
	n := 0
	for _, f := range fs {
		m := schemas.Message{Role: schemas.Role(f.Role), Content: schemas.Text(f.Text), ToolCallID: f.Result}
		for _, c := range f.Calls {
			p := strings.SplitN(c, " ", 3)
			m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: p[0], Type: "function", Function: schemas.FunctionCall{Name: p[1], Arguments: p[2]}})
		}
		n += tokens.Estimate(&m)
	}
	return n
}

// checkToolPairs checks that every tool message answers a call of the assistant
// message before its run of tool messages, and every call is answered.
func checkToolPairs(t *testing.T, n int, msgs []flat) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range msgs {
		if m.Role == "tool" {
			if !open[m.Result] {
				t.Fatalf("request %d: message %d answers %q, which no call before it made", n, i, m.Result)
			}
			delete(open, m.Result)
			continue
		}
		if len(open) > 0 {
			t.Fatalf("request %d: message %d follows calls no tool message answered: %v", n, i, open)
		}
		for _, c := range m.Calls {
			open[strings.SplitN(c, " ", 2)[0]] = true
		}
	}
}

// toolResult is turn i's result of call.
func toolResult(i int, call flat) flat {
	if len(call.Calls) != 1 {
		return flat{Role: "tool", Text: "no call"}
	}
	return flat{Role: "tool", Result: strings.SplitN(call.Calls[0], " ", 2)[0], Text: fmt.Sprintf("step %d built: %s", i, filler)}
}

// turn runs turn i: the user's message, the model's call, the tool's result, the
// model's text.
func (l *loop) turn(i int) {
	l.userAt[i] = len(l.history)
	l.history = append(l.history, l.userMessage(i))
	call := l.send()
	if len(call.Calls) != 1 || !strings.Contains(call.Calls[0], fmt.Sprintf("_%d run_build", i)) {
		l.t.Fatalf("turn %d: the client got %s, not the call of run_build", i, call)
	}
	l.history = append(l.history, call, toolResult(i, call))
	l.history = append(l.history, l.send())
}

// disconnectThenRetry sends turn i's first request streamed, goes away while the
// upstream is mid-stream, then sends the same request again.
func (l *loop) disconnectThenRetry(i int) {
	t := l.t
	l.extends = false
	stalled, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	l.s.up.Script(fakeupstream.Reply{Text: fmt.Sprintf("HALF-%03d partial reply that never ends", i), StallAfter: 3,
		Stalled: stalled, Release: release})
	l.userAt[i] = len(l.history)
	l.history = append(l.history, l.userMessage(i))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := l.wire.send(ctx, l.history, true)
		done <- err
	}()
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled request never reached the upstream")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the client that went away got a whole reply")
	}
	l.removed = append(l.removed, fmt.Sprintf("HALF-%03d", i))
	call := l.send() // the retry
	l.history = append(l.history, call, toolResult(i, call))
	l.history = append(l.history, l.send())
}

// retryTwice runs turn i with its last request sent twice, the same body: the client
// keeps the second reply, so the first is one it never had.
func (l *loop) retryTwice(i int) {
	l.userAt[i] = len(l.history)
	l.history = append(l.history, l.userMessage(i))
	call := l.send()
	l.history = append(l.history, call, toolResult(i, call))
	first := l.send()
	l.extends = false
	l.removed = append(l.removed, first.Text)
	l.history = append(l.history, l.send())
}

// regenerate drops the last reply and asks again; the dropped reply is removed.
func (l *loop) regenerate() {
	old := l.history[len(l.history)-1]
	l.history = l.history[:len(l.history)-1]
	l.extends = false
	l.removed = append(l.removed, old.Text)
	l.history = append(l.history, l.send())
}

// edit replaces turn i's user message; its marker is removed.
func (l *loop) edit(i int) {
	l.extends = false
	l.history[l.userAt[i]].Text = fmt.Sprintf("Step %d (edited): run the build with the new flags. EDITED-%03d", i, i)
	l.removed = append(l.removed, fmt.Sprintf("ORIG-%03d", i))
}

// run runs the loop's turns, with its disconnect, regenerate, edits and retry.
func (l *loop) run() {
	for i := 0; i < loopTurns; i++ {
		switch i {
		case 40:
			l.disconnectThenRetry(i)
		case 150:
			l.turn(i)
			if !l.direct {
				l.checkStoredOnce(loopConv)
			}
			l.regenerate()
		case 170:
			l.edit(168)
			l.turn(i)
		case 180:
			l.edit(5)
			l.turn(i)
		case 190:
			l.retryTwice(i)
		default:
			l.turn(i)
		}
	}
}

// checkStoredOnce checks that CHAT holds of conv exactly the client's history, each
// message once, in order.
func (l *loop) checkStoredOnce(conv string) {
	t := l.t
	t.Helper()
	got := flatStored(l.s.waitStored(t, conv, len(l.history)))
	if !sameFlat(got, l.history) {
		t.Fatalf("CHAT holds of %s\n%swant the client's history\n%s", conv, flatLines(got), flatLines(l.history))
	}
}

// checkBranches checks every conversation the proxy named: none holds a message twice,
// and the last holds every message the client sent since it was named, once.
func (l *loop) checkBranches() {
	t := l.t
	t.Helper()
	proctest.WaitFor(t, 20*time.Second, "the last reply in "+l.lastConv, func() error {
		stored := map[string]bool{}
		for _, f := range flatStored(l.s.stored(t, l.lastConv)) {
			stored[f.String()] = true
		}
		var lack []flat
		for _, f := range l.history[l.branchAt:] {
			if !stored[f.String()] {
				lack = append(lack, f)
			}
		}
		if len(lack) > 0 {
			return fmt.Errorf("%s lacks %d messages the client sent since it was named, the first: %s", l.lastConv, len(lack), lack[0])
		}
		return nil
	})
	for conv := range l.convs {
		seen := map[string]int{}
		for i, f := range flatStored(l.s.stored(t, conv)) {
			if j, ok := seen[f.String()]; ok {
				t.Fatalf("%s holds message %d twice (at %d and %d): %s", conv, i, j, i, f)
			}
			seen[f.String()] = i
		}
	}
	t.Logf("conversations the proxy named: %d (the client's and its branches)", len(l.convs))
}

// checkPipelineContext reads the last conversation's context with the pipeline
// client, as an agent using Compactor's own client would: it holds a summary (the
// conversation was compacted), fits the window, and keeps every planted fact.
func (l *loop) checkPipelineContext() {
	t := l.t
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	cx, err := l.s.pc.Context(ctx, l.lastConv)
	if err != nil {
		t.Fatalf("pipeline context of %s: %v", l.lastConv, err)
	}
	if !cx.HasSummary {
		// The last conversation may be a branch made late in the loop, still on the
		// parent's summary it was seeded with: it gets one of its own on request.
		if r, err := l.s.pc.Compact(ctx, l.lastConv, pipeline.Wait(30*time.Second)); err != nil {
			t.Fatalf("compact %s: %v", l.lastConv, err)
		} else {
			t.Logf("%s had no summary of its own yet: compaction %s", l.lastConv, r.Status)
		}
		if cx, err = l.s.pc.Context(ctx, l.lastConv); err != nil {
			t.Fatalf("pipeline context of %s: %v", l.lastConv, err)
		}
	}
	var text strings.Builder
	for _, m := range cx.Messages {
		text.WriteString(m.Content.String())
		text.WriteByte('\n')
	}
	if !cx.HasSummary || cx.Tokens > loopWindow {
		t.Fatalf("the pipeline's context of %s: summary %v, %d tokens (window %d)", l.lastConv, cx.HasSummary, cx.Tokens, loopWindow)
	}
	for _, f := range l.facts {
		if !strings.Contains(text.String(), f) {
			t.Fatalf("the pipeline's context of %s lacks the planted fact %s:\n%s", l.lastConv, f, text.String())
		}
	}
}

// runLoopThroughProxy runs the loop through a proxy with a window of loopWindow and
// checks what only a proxy can make true.
func runLoopThroughProxy(t *testing.T, wire func(s *stack) agentWire) {
	s := startStack(t, fmt.Sprintf("COMPACTOR_CONTEXT_WINDOW=%d", loopWindow))
	l := newLoop(t, s, wire(s))
	l.run()
	l.checkBranches()
	l.checkPipelineContext()
	s.checkSummarizerKey(t)
	summaries := s.up.Summaries()
	if summaries < 5 {
		t.Fatalf("the summarizer was called %d times over %d turns: the window did not force compactions", summaries, loopTurns)
	}
	var input, cached int
	for _, r := range s.up.Agent() {
		if r.Usage != nil {
			input, cached = input+r.Usage.Input, cached+r.Usage.CacheRead
		}
	}
	t.Logf("%d turns, %d requests checked (%d with the previous request's prefix kept byte for byte), %d summarizer calls, %d cut at read time",
		loopTurns, l.checked, l.kept, summaries, l.cut)
	t.Logf("tokens forwarded / tokens the client sent = %d / %d = %.3f; upstream input %d tokens, of them cached (the prefix shared with the previous request) %d = %.3f",
		l.forwardedTokens, l.clientTokens, float64(l.forwardedTokens)/float64(l.clientTokens), input, cached, float64(cached)/float64(input))
}

// A 200-turn agent loop with tool calls, go-openai through the proxy, in a window of
// 6000 tokens: every upstream request is within the window, its tool pairs whole;
// every fact planted in early turns reaches every later request (summary, evidence or
// tail) unless the proxy said it cut; CHAT holds each client message once; a client
// that disconnects mid-stream and retries stores nothing half; after a regenerate, an
// edit of a recent message and one of an early (summarized) message, and a request
// sent twice, the upstream never gets what the client removed.
func TestAgentLoopThroughProxy(t *testing.T) {
	runLoopThroughProxy(t, func(s *stack) agentWire { return newOpenAIAgent(s.proxy) })
}

// The same loop on the Anthropic Messages wire.
func TestAnthropicAgentLoopThroughProxy(t *testing.T) {
	runLoopThroughProxy(t, func(s *stack) agentWire { return &anthropicAgent{root: s.proxy} })
}

// The loop against the fake upstream itself, no proxy between them, on both wires:
// the client's and the fake's part of the loops through the proxy (the replies, the
// disconnect, the regenerate, the edits, the retry) works, and with every history
// forwarded whole the checks that do not need a proxy pass.
func TestAgentLoopAgainstFakeUpstream(t *testing.T) {
	for name, wire := range map[string]func(root string) agentWire{
		"openai":    func(root string) agentWire { return newOpenAIAgent(root) },
		"anthropic": func(root string) agentWire { return &anthropicAgent{root: root} },
	} {
		t.Run(name, func(t *testing.T) {
			up := fakeupstream.New(t)
			l := newLoop(t, &stack{up: up}, wire(up.URL()))
			l.direct = true
			l.run()
			if l.forwardedTokens != l.clientTokens {
				t.Fatalf("forwarded %d tokens, the client sent %d: with no proxy they are the same", l.forwardedTokens, l.clientTokens)
			}
			if g := up.Agent(); !g[len(g)-1].Stream && !g[len(g)-2].Stream && !g[len(g)-3].Stream {
				t.Fatal("no request of the last three was streamed")
			}
			t.Logf("%d requests; %d tokens sent over the loop with no compaction", l.checked, l.clientTokens)
		})
	}
}
