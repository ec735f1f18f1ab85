package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

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
	stepRE   = regexp.MustCompile(`Step (\d+)`)
	callIDRE = regexp.MustCompile(`^call_(\d+)$`)
	filler   = strings.Repeat("compiling module with nothing of note; ", 15)
	words    = []string{"amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"}
)

var runBuild = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "run_build", Description: "runs the build of one step",
	Parameters: json.RawMessage(`{"type":"object","properties":{"step":{"type":"integer"}}}`)}}

// loopResponder answers the loop's requests: a user message last (Step N) gets a call
// of run_build (id call_N); a tool result last gets a text reply, unique to the
// request, so a regenerated reply differs from the one it replaces.
func loopResponder(seq *int) func(r *fakeupstream.Request) fakeupstream.Reply {
	return func(r *fakeupstream.Request) fakeupstream.Reply {
		*seq++
		last := r.Messages[len(r.Messages)-1]
		var m struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
		}
		_ = json.Unmarshal(last, &m)
		if m.Role == "tool" {
			if g := callIDRE.FindStringSubmatch(m.ToolCallID); g != nil {
				return fakeupstream.Reply{Text: fmt.Sprintf("Build %s passed (reply %d).", g[1], *seq)}
			}
		}
		if g := stepRE.FindStringSubmatch(fakeupstream.Text(last)); m.Role == "user" && g != nil {
			return fakeupstream.Reply{ToolCalls: []fakeupstream.ToolCall{{ID: "call_" + g[1], Name: "run_build",
				Arguments: fmt.Sprintf(`{"step":%s}`, g[1])}}}
		}
		return fakeupstream.Reply{Text: "unexpected request"}
	}
}

// loop is the agent: its history, what it has removed, and the figures.
type loop struct {
	t       *testing.T
	s       *stack
	client  *openai.Client
	tr      *headerTransport
	history []openai.ChatCompletionMessage
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
}

func (l *loop) userMessage(i int) openai.ChatCompletionMessage {
	text := fmt.Sprintf("Step %d: run the build again. ORIG-%03d", i, i)
	if i%10 == 0 {
		f := fmt.Sprintf("FACT-%03d=%s", i, words[(i/10)%len(words)])
		text = fmt.Sprintf("Step %d: remember %s and run the build. ORIG-%03d", i, f, i)
		l.facts = append(l.facts, f)
	}
	return openai.ChatCompletionMessage{Role: "user", Content: text}
}

// send sends the history (streamed every third request) and returns the reply.
func (l *loop) send() openai.ChatCompletionMessage {
	t := l.t
	t.Helper()
	l.sends++
	n := len(l.s.up.Agent())
	req := openai.ChatCompletionRequest{Model: "gpt-loop", Messages: l.history, Tools: []openai.Tool{runBuild},
		MaxCompletionTokens: loopMaxTokens, Stream: l.sends%3 == 0}
	msg, err := goTurn(t, l.client, req)
	if err != nil {
		t.Fatalf("request %d: %v", l.sends, err)
	}
	l.check(lastAgent(t, l.s.up, n))
	return msg
}

// check checks one upstream request against the loop's rules.
func (l *loop) check(r *fakeupstream.Request) {
	t := l.t
	t.Helper()
	l.checked++
	h := l.tr.last
	if l.direct {
		h = http.Header{"X-Compactor-Status": {"compacted"}, "X-Compactor-Conversation": {loopConv}}
	}
	if h.Get("X-Compactor-Status") != "compacted" {
		t.Fatalf("request %d: X-Compactor-Status %q", l.sends, h.Get("X-Compactor-Status"))
	}
	conv := h.Get("X-Compactor-Conversation")
	l.convs[conv] = true
	if conv != l.lastConv {
		l.lastConv, l.branchAt = conv, len(l.history)
	}
	var msgs []schemas.Message
	size := loopMaxTokens
	for _, raw := range r.Messages {
		var m schemas.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("request %d: message %s: %v", l.sends, raw, err)
		}
		msgs = append(msgs, m)
		size += tokens.Estimate(&m)
	}
	if size > loopWindow && !l.direct {
		t.Fatalf("request %d: the upstream was sent %d tokens (max_tokens included), over the window of %d", l.sends, size, loopWindow)
	}
	checkToolPairs(t, l.sends, msgs)
	body := string(r.Body)
	for _, gone := range l.removed {
		if strings.Contains(body, gone) {
			t.Fatalf("request %d: the upstream was sent %q, which the client removed; headers %v; it was sent\n%s",
				l.sends, gone, h, flatLines(flatOpenAI(t, r.Messages)))
		}
	}
	if h.Get("X-Compactor-Cut") == "true" {
		l.cut++
	} else {
		for _, f := range l.facts {
			if !strings.Contains(body, f) {
				t.Fatalf("request %d: the upstream was not sent the planted fact %s (no cut said); headers %v; it was sent\n%s",
					l.sends, f, h, flatLines(flatOpenAI(t, r.Messages)))
			}
		}
	}
	for _, m := range l.history {
		cm := schemas.Message{Role: schemas.Role(m.Role), Content: schemas.Text(m.Content), ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, schemas.ToolCall{ID: c.ID, Type: "function", Function: schemas.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		l.clientTokens += tokens.Estimate(&cm)
	}
	l.forwardedTokens += size - loopMaxTokens
}

// checkToolPairs checks that every tool message answers a call of the assistant
// message before its run of tool messages, and every call is answered.
func checkToolPairs(t *testing.T, n int, msgs []schemas.Message) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case schemas.RoleTool:
			if !open[m.ToolCallID] {
				t.Fatalf("request %d: message %d answers %q, which no call before it made", n, i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		default:
			if len(open) > 0 {
				t.Fatalf("request %d: message %d follows calls no tool message answered: %v", n, i, open)
			}
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		}
	}
}

// turn runs turn i: the user's message, the model's call, the tool's result, the
// model's text.
func (l *loop) turn(i int) {
	l.userAt[i] = len(l.history)
	l.history = append(l.history, l.userMessage(i))
	call := l.send()
	if len(call.ToolCalls) != 1 || call.ToolCalls[0].ID != fmt.Sprintf("call_%d", i) {
		l.t.Fatalf("turn %d: the client got %+v, not the call of run_build", i, call)
	}
	l.history = append(l.history, call, openai.ChatCompletionMessage{Role: "tool", ToolCallID: call.ToolCalls[0].ID,
		Content: fmt.Sprintf("step %d built: %s", i, filler)})
	l.history = append(l.history, l.send())
}

// disconnectThenRetry sends turn i's first request streamed, goes away while the
// upstream is mid-stream, then sends the same request again.
func (l *loop) disconnectThenRetry(i int) {
	t := l.t
	stalled, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	l.s.up.Script(fakeupstream.Reply{Text: fmt.Sprintf("HALF-%03d partial reply that never ends", i), StallAfter: 3,
		Stalled: stalled, Release: release})
	l.userAt[i] = len(l.history)
	l.history = append(l.history, l.userMessage(i))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		st, err := l.client.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: "gpt-loop", Stream: true,
			Messages: l.history, Tools: []openai.Tool{runBuild}, MaxCompletionTokens: loopMaxTokens})
		if err == nil {
			_, err = st.Recv()
			for err == nil {
				_, err = st.Recv()
			}
			st.Close()
		}
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
	l.history = append(l.history, call, openai.ChatCompletionMessage{Role: "tool", ToolCallID: call.ToolCalls[0].ID,
		Content: fmt.Sprintf("step %d built: %s", i, filler)})
	l.history = append(l.history, l.send())
}

// retryTwice runs turn i with its last request sent twice, the same body: the client
// keeps the second reply, so the first is one it never had.
func (l *loop) retryTwice(i int) {
	l.userAt[i] = len(l.history)
	l.history = append(l.history, l.userMessage(i))
	call := l.send()
	l.history = append(l.history, call, openai.ChatCompletionMessage{Role: "tool", ToolCallID: call.ToolCalls[0].ID,
		Content: fmt.Sprintf("step %d built: %s", i, filler)})
	first := l.send()
	l.removed = append(l.removed, first.Content)
	l.history = append(l.history, l.send())
}

// regenerate drops the last reply and asks again; the dropped reply is removed.
func (l *loop) regenerate() {
	old := l.history[len(l.history)-1]
	l.history = l.history[:len(l.history)-1]
	l.removed = append(l.removed, old.Content)
	l.history = append(l.history, l.send())
}

// edit replaces turn i's user message; its marker is removed.
func (l *loop) edit(i int) {
	k := l.userAt[i]
	l.history[k].Content = fmt.Sprintf("Step %d (edited): run the build with the new flags. EDITED-%03d", i, i)
	l.removed = append(l.removed, fmt.Sprintf("ORIG-%03d", i))
}

// A 200-turn agent loop with tool calls, go-openai through the proxy, in a window of
// 6000 tokens: every upstream request is within the window, its tool pairs whole;
// every fact planted in early turns reaches every later request (summary, evidence or
// tail) unless the proxy said it cut; CHAT holds each client message once; a client
// that disconnects mid-stream and retries stores nothing half; after a regenerate, an
// edit of a recent message and one of an early (summarized) message, and a request
// sent twice, the upstream never gets what the client removed.
func TestAgentLoopThroughProxy(t *testing.T) {
	s := startStack(t, fmt.Sprintf("COMPACTOR_CONTEXT_WINDOW=%d", loopWindow))
	l := newLoop(t, s, s.proxy)
	l.run()
	l.checkBranches()
	s.checkSummarizerKey(t)
	summaries := s.up.Summaries()
	if summaries < 5 {
		t.Fatalf("the summarizer was called %d times over %d turns: the window did not force compactions", summaries, loopTurns)
	}
	t.Logf("%d turns, %d requests checked, %d summarizer calls, %d cut at read time; tokens forwarded / tokens the client sent = %d / %d = %.3f",
		loopTurns, l.checked, summaries, l.cut, l.forwardedTokens, l.clientTokens, float64(l.forwardedTokens)/float64(l.clientTokens))
}

// The loop against the fake upstream itself, no proxy between them: the client's and
// the fake's part of TestAgentLoopThroughProxy (the replies, the disconnect, the
// regenerate, the edits, the retry) works, and with every history forwarded whole the
// checks that do not need a proxy pass, over the whole conversation.
func TestAgentLoopAgainstFakeUpstream(t *testing.T) {
	up := fakeupstream.New(t)
	l := newLoop(t, &stack{up: up}, up.URL())
	l.direct = true
	l.run()
	if l.forwardedTokens != l.clientTokens {
		t.Fatalf("forwarded %d tokens, the client sent %d: with no proxy they are the same", l.forwardedTokens, l.clientTokens)
	}
	t.Logf("%d requests; %d tokens sent over the loop with no compaction", l.checked, l.clientTokens)
}

// newLoop is a loop of go-openai against root, the fake upstream of s answering.
func newLoop(t *testing.T, s *stack, root string) *loop {
	var seq int
	s.up.Respond = loopResponder(&seq)
	client, tr := goClient(root, openAIKey, loopConv)
	return &loop{t: t, s: s, client: client, tr: tr, userAt: map[int]int{}, convs: map[string]bool{}, lastConv: loopConv,
		history: []openai.ChatCompletionMessage{{Role: "system", Content: "You are Ada, a careful build engineer."}}}
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
	want := l.flatHistory()
	got := flatStored(l.s.waitStored(t, conv, len(want)))
	if !sameFlat(got, want) {
		t.Fatalf("CHAT holds of %s\n%swant the client's history\n%s", conv, flatLines(got), flatLines(want))
	}
}

func (l *loop) flatHistory() []flat {
	b, _ := json.Marshal(l.history)
	var raws []json.RawMessage
	_ = json.Unmarshal(b, &raws)
	return flatOpenAI(l.t, raws)
}

// checkBranches checks every conversation the proxy named: none holds a message twice,
// and the last holds every message the client sent since it was named, once.
func (l *loop) checkBranches() {
	t := l.t
	t.Helper()
	var tail []flat
	proctest.WaitFor(t, 20*time.Second, "the last reply in "+l.lastConv, func() error {
		stored := map[string]bool{}
		for _, f := range flatStored(l.s.stored(t, l.lastConv)) {
			stored[f.String()] = true
		}
		tail = nil
		for _, f := range l.flatHistory()[l.branchAt:] {
			if !stored[f.String()] {
				tail = append(tail, f)
			}
		}
		if len(tail) > 0 {
			return fmt.Errorf("%s lacks %d messages the client sent since it was named, the first: %s", l.lastConv, len(tail), tail[0])
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
