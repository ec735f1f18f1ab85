package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// kvPolicies resolves settings from the resolver's tiers and the conversation's policy
// in KV, as the command does.
type kvPolicies struct {
	st *jetstream.Store
	r  *policy.Resolver
}

func (p kvPolicies) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	data, _, err := p.st.Policies().Get(ctx, conv)
	if err != nil || data == nil {
		return p.r.Base(), err
	}
	l, err := policy.DecodeConversation(data)
	if err == nil {
		var s policy.Settings
		if s, err = p.r.Resolve(l); err == nil {
			return s, nil
		}
	}
	return p.r.Base(), fmt.Errorf("policy of %s: %w", conv, err)
}

// svcStack is a running compactor service on a fresh server; client is a connection
// of its own, as another service's would be.
type svcStack struct {
	nc     *nats.Conn // the service's connection
	st     *jetstream.Store
	client *nats.Conn
	cancel context.CancelFunc
	done   chan error
	subs   int // the service connection's subscriptions before the service started
}

func startService(t *testing.T, cfg service.Config, setup ...func(*service.Service)) *svcStack {
	t.Helper()
	return startServiceOn(t, jstest.Server(t).ClientURL(), cfg, setup...)
}

// startServiceOn is startService on a server of the test's own, at url.
func startServiceOn(t *testing.T, url string, cfg service.Config, setup ...func(*service.Service)) *svcStack {
	t.Helper()
	nc := jstest.ConnTo(t, url)
	st := jstest.Provision(t, nc)
	r, err := policy.NewResolver(policy.Layer{"context_window": "4000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(cfg, nc, st, kvPolicies{st: st, r: r}, r.Resolve, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(svc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &svcStack{nc: nc, st: st, client: jstest.ConnTo(t, url), cancel: cancel, done: make(chan error, 1), subs: nc.NumSubscriptions()}
	go func() { s.done <- svc.Run(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.client.Request(schemas.StatusSubject, nil, time.Second)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("service did not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop cancels Run and waits for it.
func (s *svcStack) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func svcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// svcCall sends a request and returns the answer; a micro error answer fails the test.
func svcCall(t *testing.T, nc *nats.Conn, subj, body string, out any) {
	t.Helper()
	m, err := nc.Request(subj, []byte(body), 20*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", subj, body, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("%s %s: error %s: %s", subj, body, code, m.Header.Get(micro.ErrorHeader))
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		t.Fatalf("%s answer %s: %v", subj, m.Data, err)
	}
}

// svcError sends a request that must fail and returns the code and description.
func svcError(t *testing.T, nc *nats.Conn, subj, body string) (string, string) {
	t.Helper()
	m, err := nc.Request(subj, []byte(body), 20*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", subj, body, err)
	}
	code := m.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		t.Fatalf("%s %s answered %s; want an error", subj, body, m.Data)
	}
	var b struct {
		Error string `json:"error"`
		Code  int    `json:"code"`
	}
	if err := json.Unmarshal(m.Data, &b); err != nil || b.Error != m.Header.Get(micro.ErrorHeader) || fmt.Sprint(b.Code) != code {
		t.Errorf("error body %s does not repeat the headers (%v)", m.Data, err)
	}
	return code, m.Header.Get(micro.ErrorHeader)
}

// asyncCall sends a request whose answer comes later.
func asyncCall(nc *nats.Conn, subj, body string) <-chan *nats.Msg {
	ch := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(subj, []byte(body), 60*time.Second)
		if err != nil {
			m = &nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {"client"}, micro.ErrorHeader: {err.Error()}}}
		}
		ch <- m
	}()
	return ch
}

func compactAnswer(t *testing.T, ch <-chan *nats.Msg) schemas.CompactResponse {
	t.Helper()
	select {
	case m := <-ch:
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("compact: error %s: %s", code, m.Header.Get(micro.ErrorHeader))
		}
		var r schemas.CompactResponse
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("compact answer %s: %v", m.Data, err)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no compact answer")
	}
	return schemas.CompactResponse{}
}

// eventWatch collects the events of every conversation.
type eventWatch struct{ ch chan schemas.Event }

func watchEvents(t *testing.T, nc *nats.Conn) *eventWatch {
	t.Helper()
	w := &eventWatch{ch: make(chan schemas.Event, 256)}
	sub, err := nc.Subscribe("compact.event.*", func(m *nats.Msg) {
		var ev schemas.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			w.ch <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

// next waits for the event of that type and conversation.
func (w *eventWatch) next(t *testing.T, typ, conv string) schemas.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-w.ch:
			if ev.Type == typ && ev.Conversation == conv {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event for %s", typ, conv)
		}
	}
}

func pendingRequest(t *testing.T, st *jetstream.Store, conv string) schemas.Request {
	t.Helper()
	ctx := svcCtx(t)
	r, err := st.Queue().Pending(ctx, conv)
	if err != nil || r == nil {
		t.Fatalf("no request queued for %s: %v", conv, err)
	}
	return *r
}

// stored publishes a message to each conversation: compactor.compact refuses one with
// nothing stored (404).
func stored(t *testing.T, st *jetstream.Store, convs ...string) {
	t.Helper()
	for _, conv := range convs {
		if _, err := st.Chat().Publish(svcCtx(t), conv, []byte(`{"role":"user","content":"hello"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServiceCompactIsQueuedThenBusy(t *testing.T) {
	s := startService(t, service.Config{})
	stored(t, s.st, "c1")
	events := watchEvents(t, s.client)
	var first schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"c1","instructions":"keep every path"}`, &first)
	if first.Status != schemas.CompactQueued || first.RequestID == "" || first.Error != "" {
		t.Fatalf("first compact = %+v; want queued with a request id", first)
	}
	req := pendingRequest(t, s.st, "c1")
	if req.RequestID != first.RequestID || req.Trigger != schemas.TriggerManual || req.Instructions != "keep every path" ||
		req.Reason != "requested through compactor.compact" {
		t.Fatalf("queued request = %+v", req)
	}
	if ev := events.next(t, schemas.EventRequested, "c1"); ev.RequestID != first.RequestID || ev.Trigger != schemas.TriggerManual {
		t.Fatalf("requested event = %+v", ev)
	}

	var busy schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"c1","instructions":"other wishes"}`, &busy)
	if busy.Status != schemas.CompactBusy || !strings.Contains(busy.Error, "NOT queued") || !strings.Contains(busy.Error, "retry after the pending one completes") {
		t.Fatalf("second compact = %+v; want busy saying the instructions were not queued", busy)
	}
	if busy.RequestID != first.RequestID {
		t.Fatalf("busy names request %q; want the pending %q", busy.RequestID, first.RequestID)
	}
	if req := pendingRequest(t, s.st, "c1"); req.Instructions != "keep every path" {
		t.Fatalf("pending request's instructions changed to %q", req.Instructions)
	}

	// A retry of the same request is the same request, not a busy one.
	var again schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, fmt.Sprintf(`{"conversation":"c1","request_id":%q}`, first.RequestID), &again)
	if again.Status != schemas.CompactQueued || again.RequestID != first.RequestID {
		t.Fatalf("retry with the same request_id = %+v; want queued", again)
	}

	var st schemas.ConversationStatus
	svcCall(t, s.client, schemas.StatusSubject, `{"conversation":"c1"}`, &st)
	if !st.Pending || st.PendingRequestID != first.RequestID || st.Value != nil {
		t.Fatalf("status = %+v; want pending %s", st, first.RequestID)
	}
}

func TestServiceWaitAnswersItsOwnOutcome(t *testing.T) {
	s := startService(t, service.Config{})
	stored(t, s.st, "c2", "c3-"+schemas.EventFailed, "c3-"+schemas.EventDeclined)
	ctx := svcCtx(t)
	events := watchEvents(t, s.client)

	ch := asyncCall(s.client, schemas.CompactSubject, `{"conversation":"c2","request_id":"mine","wait_ms":20000}`)
	events.next(t, schemas.EventRequested, "c2")
	// Another request's outcome arrives first; it must not answer this wait.
	publishEvent(t, s.st, schemas.Event{Type: schemas.EventCompleted, Conversation: "c2", RequestID: "other", Generation: 1})
	v := &schemas.Result{SchemaVersion: 1, Conversation: "c2", Generation: 1, Summary: "the summary",
		TailStartSeq: 5, CoveredThroughSeq: 4, RequestID: "mine", Fallback: true, CreatedAt: time.Now().UTC()}
	if _, err := s.st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	publishEvent(t, s.st, schemas.Event{Type: schemas.EventCompleted, Conversation: "c2", RequestID: "mine", Generation: 1,
		Error: "llm: 503 from the endpoint; extractive fallback written"})
	got := compactAnswer(t, ch)
	if got.Status != schemas.CompactCompleted || got.RequestID != "mine" {
		t.Fatalf("wait = %+v; want completed for request mine", got)
	}
	if got.Result == nil || got.Result.RequestID != "mine" || got.Result.Summary != "the summary" || got.Result.TailStartSeq != 5 {
		t.Fatalf("result = %+v; want the KV value", got.Result)
	}
	if !strings.Contains(got.Error, "extractive fallback") {
		t.Fatalf("error = %q; want the event's error", got.Error)
	}

	// failed and declined answer with the event's error and no result.
	for _, typ := range []string{schemas.EventFailed, schemas.EventDeclined} {
		conv := "c3-" + typ
		ch := asyncCall(s.client, schemas.CompactSubject, fmt.Sprintf(`{"conversation":%q,"wait_ms":20000}`, conv))
		req := events.next(t, schemas.EventRequested, conv)
		publishEvent(t, s.st, schemas.Event{Type: typ, Conversation: conv, RequestID: req.RequestID, Error: "why: " + typ})
		got := compactAnswer(t, ch)
		if got.Status != typ || got.RequestID != req.RequestID || got.Error != "why: "+typ || got.Result != nil {
			t.Fatalf("%s wait = %+v", typ, got)
		}
	}

	// A retried request_id whose outcome is already stored answers at once.
	var again schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"c2","request_id":"mine","wait_ms":20000}`, &again)
	if again.Status != schemas.CompactCompleted || again.Result == nil || again.Result.RequestID != "mine" {
		t.Fatalf("retried wait = %+v; want the stored completed outcome", again)
	}
}

func publishEvent(t *testing.T, st *jetstream.Store, ev schemas.Event) {
	t.Helper()
	ev.At = time.Now().UTC()
	if err := st.Events().Publish(svcCtx(t), ev); err != nil {
		t.Fatal(err)
	}
}

func TestServiceWaitTimeoutAnswersQueued(t *testing.T) {
	s := startService(t, service.Config{MaxWait: 300 * time.Millisecond})
	stored(t, s.st, "slow")
	var got schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"slow","wait_ms":600000}`, &got)
	if got.Status != schemas.CompactQueued || got.RequestID == "" {
		t.Fatalf("wait without outcome = %+v; want queued", got)
	}
	if !strings.Contains(got.Error, "no outcome within 300ms") || !strings.Contains(got.Error, "capped at 300") {
		t.Fatalf("error = %q; want it to say the wait ended (capped) without an outcome", got.Error)
	}
	if req := pendingRequest(t, s.st, "slow"); req.RequestID != got.RequestID {
		t.Fatalf("queued request %s; want %s", req.RequestID, got.RequestID)
	}
}

func TestServiceContextStatusAndPolicy(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	var last uint64
	for i := range 3 {
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("message %d", i))}
		data, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if last, err = s.st.Chat().Publish(ctx, "ctx", data, ""); err != nil {
			t.Fatal(err)
		}
	}

	m, err := s.client.Request(schemas.ContextSubject, []byte(`{"conversation":"ctx"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"conversation":"ctx","value":null,"tail_start_seq":1,"last_seq":%d}`, last); string(m.Data) != want {
		t.Fatalf("context before any compaction = %s; want %s", m.Data, want)
	}
	v := &schemas.Result{SchemaVersion: 1, Conversation: "ctx", Generation: 1, Summary: "s", TailStartSeq: last,
		CoveredThroughSeq: last - 1, CreatedAt: time.Now().UTC(), Unknown: map[string]json.RawMessage{"future": []byte(`"kept"`)}}
	if _, err := s.st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	var cx schemas.ContextResponse
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"ctx"}`, &cx)
	if cx.TailStartSeq != last || cx.LastSeq != last || cx.Value == nil || cx.Value.Generation != 1 || string(cx.Value.Unknown["future"]) != `"kept"` {
		t.Fatalf("context = %+v", cx)
	}

	// With a format the answer also carries the context, rendered.
	for _, f := range schemas.ContextFormats() {
		var rx schemas.ContextResponse
		svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"ctx","format":"`+f+`"}`, &rx)
		if rx.Format != f || rx.TailStartSeq != last || rx.Value == nil || !json.Valid(rx.Rendered) ||
			!strings.Contains(string(rx.Rendered), "message 2") || strings.Contains(string(rx.Rendered), "message 1") {
			t.Fatalf("context as %s = %+v (rendered %s); want the summary and the tail from seq %d", f, rx, rx.Rendered, last)
		}
	}
	if len(cx.Rendered) != 0 || cx.Format != "" {
		t.Fatalf("context without a format rendered %s", cx.Rendered)
	}

	var cs schemas.ConversationStatus
	svcCall(t, s.client, schemas.StatusSubject, `{"conversation":"ctx"}`, &cs)
	if cs.Pending || cs.LastSeq != last || cs.Value == nil || cs.Value.Generation != 1 {
		t.Fatalf("status of ctx = %+v", cs)
	}
	var all jetstream.Status
	svcCall(t, s.client, schemas.StatusSubject, `{}`, &all)
	if len(all.Streams) == 0 || all.Streams[0].Name != "CHAT" || all.Streams[0].Messages != 3 || len(all.Consumers) == 0 {
		t.Fatalf("status = %+v", all)
	}

	// policy: get, set (merge), remove a key, clear.
	var p schemas.PolicyResponse
	svcCall(t, s.client, schemas.PolicySubject, `{"conversation":"ctx"}`, &p)
	if len(p.Policy) != 0 || p.Settings["threshold"] != 0.75 || p.Settings["context_window"] != 4000.0 {
		t.Fatalf("policy get = %+v", p)
	}
	want := []string{policy.ProfileKey}
	for _, k := range policy.Keys {
		want = append(want, k.Name)
	}
	var got []string
	for k := range p.Settings {
		got = append(got, k)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("settings keys = %v; want every policy key: %v", got, want)
	}
	svcCall(t, s.client, schemas.PolicySubject, `{"conversation":"ctx","set":{"threshold":0.6,"strategy":"tool-rounds"}}`, &p)
	if p.Policy["threshold"] != "0.6" || p.Policy["strategy"] != "tool-rounds" || p.Settings["threshold"] != 0.6 {
		t.Fatalf("policy set = %+v", p)
	}
	p = schemas.PolicyResponse{} // a fresh map: Unmarshal merges into an existing one
	svcCall(t, s.client, schemas.PolicySubject, `{"conversation":"ctx","set":{"strategy":"","keep_last_n":"8"}}`, &p)
	if _, ok := p.Policy["strategy"]; ok || p.Policy["threshold"] != "0.6" || p.Policy["keep_last_n"] != "8" {
		t.Fatalf("policy merge = %+v; want strategy removed, threshold kept, keep_last_n added", p.Policy)
	}
	data, _, err := s.st.Policies().Get(ctx, "ctx")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := policy.DecodeConversation(data)
	if err != nil || len(stored) != 2 || stored["keep_last_n"] != "8" {
		t.Fatalf("stored policy = %v, %v", stored, err)
	}
	p = schemas.PolicyResponse{}
	svcCall(t, s.client, schemas.PolicySubject, `{"conversation":"ctx","clear":true}`, &p)
	if len(p.Policy) != 0 || p.Settings["threshold"] != 0.75 {
		t.Fatalf("policy clear = %+v", p)
	}
	if data, _, _ := s.st.Policies().Get(ctx, "ctx"); data != nil {
		t.Fatalf("policy still stored after clear: %s", data)
	}
}

func TestServiceRefusesBadInputNamingTheField(t *testing.T) {
	s := startService(t, service.Config{})
	long := strings.Repeat("x", schemas.MaxInstructionsBytes+1)
	for _, tc := range []struct {
		name, subj, body string
		want             string
	}{
		{"malformed", schemas.CompactSubject, `{"conversation":`, "request: malformed JSON"},
		{"empty", schemas.CompactSubject, ``, "request: body is empty"},
		{"not an object", schemas.CompactSubject, `["c1"]`, "request: must be a JSON object"},
		{"trailing data", schemas.CompactSubject, `{"conversation":"c"} {}`, "request: must be one JSON object"},
		{"bad id", schemas.CompactSubject, `{"conversation":"bad id"}`, "conversation: character ' ' at position 3"},
		{"missing id", schemas.CompactSubject, `{"wait_ms":10}`, "conversation: must not be empty"},
		{"wait type", schemas.CompactSubject, `{"conversation":"c","wait_ms":"soon"}`, "wait_ms: must be an integer"},
		{"negative wait", schemas.CompactSubject, `{"conversation":"c","wait_ms":-1}`, "wait_ms: must not be negative"},
		{"bad request id", schemas.CompactSubject, `{"conversation":"c","request_id":"a/b"}`, "request_id: character '/'"},
		{"unknown field", schemas.CompactSubject, `{"conversation":"c","priority":1}`, "priority: unknown field"},
		{"long instructions", schemas.CompactSubject, `{"conversation":"c","instructions":"` + long + `"}`, "instructions: is 8193 bytes long"},
		{"context without id", schemas.ContextSubject, `{}`, "conversation: must not be empty"},
		{"unknown format", schemas.ContextSubject, `{"conversation":"c","format":"claude"}`, `format: "claude" is not a format; use one of openai, anthropic, responses, gemini`},
		{"format type", schemas.ContextSubject, `{"conversation":"c","format":1}`, "format: must be a string"},
		{"status bad id", schemas.StatusSubject, `{"conversation":"x.y"}`, "conversation: character '.'"},
		{"endpoint", schemas.PolicySubject, `{"conversation":"c","set":{"llm_base_url":"http://elsewhere"}}`, "set.llm_base_url: cannot be set per conversation"},
		{"model", schemas.PolicySubject, `{"conversation":"c","set":{"llm_model":"big"}}`, "set.llm_model: cannot be set per conversation"},
		{"key variable", schemas.PolicySubject, `{"conversation":"c","set":{"llm_api_key_env":"HOME"}}`, "set.llm_api_key_env: cannot be set per conversation"},
		{"unknown key", schemas.PolicySubject, `{"conversation":"c","set":{"colour":"red"}}`, "set.colour: unknown key"},
		{"bool value", schemas.PolicySubject, `{"conversation":"c","set":{"threshold":true}}`, "set.threshold: must be a string or a number"},
		{"out of range", schemas.PolicySubject, `{"conversation":"c","set":{"threshold":"2"}}`, "threshold"},
		{"unknown profile", schemas.PolicySubject, `{"conversation":"c","set":{"profile":"gold"}}`, `profile "gold" does not exist`},
		{"clear type", schemas.PolicySubject, `{"conversation":"c","clear":"yes"}`, "clear: must be true or false"},
		{"forget without id", schemas.ForgetSubject, `{}`, "conversation: must not be empty"},
		{"forget empty", schemas.ForgetSubject, ``, "request: body is empty"},
		{"forget wildcard", schemas.ForgetSubject, `{"conversation":"*"}`, "conversation: character '*' at position 0"},
		{"forget subject", schemas.ForgetSubject, `{"conversation":"a.b"}`, "conversation: character '.' at position 1"},
		{"forget unknown field", schemas.ForgetSubject, `{"conversation":"c","everything":true}`, "everything: unknown field"},
	} {
		code, desc := svcError(t, s.client, tc.subj, tc.body)
		if code != "400" || !strings.Contains(desc, tc.want) {
			t.Errorf("%s: got %s %q; want 400 containing %q", tc.name, code, desc, tc.want)
		}
	}
	ctx := svcCtx(t)
	if data, _, _ := s.st.Policies().Get(ctx, "c"); data != nil {
		t.Errorf("a refused policy was stored: %s", data)
	}
	for _, ss := range s.st.Status(ctx).Streams {
		if ss.Name == "COMPACT_REQUESTS" && (ss.Error != "" || ss.Messages != 0) {
			t.Errorf("refused requests were queued: %d, %s", ss.Messages, ss.Error)
		}
	}
}

func TestServiceRefusesCompactWhenThePolicyIsInvalid(t *testing.T) {
	s := startService(t, service.Config{})
	// Written past the service (an older tool, by hand): the worker would fail it.
	if err := s.st.Policies().Put(svcCtx(t), "broken", []byte(`{"profile":"gone"}`), 0); err != nil {
		t.Fatal(err)
	}
	code, desc := svcError(t, s.client, schemas.CompactSubject, `{"conversation":"broken"}`)
	if code != "409" || !strings.Contains(desc, `profile "gone" does not exist`) || !strings.Contains(desc, "nothing was queued") {
		t.Fatalf("compact with an invalid policy: %s %q", code, desc)
	}
	var p schemas.PolicyResponse
	svcCall(t, s.client, schemas.PolicySubject, `{"conversation":"broken","clear":true,"set":{"threshold":0.8}}`, &p)
	if len(p.Policy) != 1 || p.Policy["threshold"] != "0.8" {
		t.Fatalf("policy replaced = %+v", p.Policy)
	}
}

func TestServiceWaitsDoNotBlockOtherRequests(t *testing.T) {
	s := startService(t, service.Config{MaxConcurrentWaits: 3})
	stored(t, s.st, "w0", "w1", "w2", "w9", "nowait")
	events := watchEvents(t, s.client)
	var waits []<-chan *nats.Msg
	for i := range 3 {
		conv := fmt.Sprintf("w%d", i)
		waits = append(waits, asyncCall(s.client, schemas.CompactSubject, fmt.Sprintf(`{"conversation":%q,"wait_ms":60000}`, conv)))
		events.next(t, schemas.EventRequested, conv)
	}
	// Every wait slot is taken and nobody answers the waits; the other requests go on.
	var cx schemas.ContextResponse
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"w0"}`, &cx)
	if cx.Conversation != "w0" || cx.TailStartSeq != 1 {
		t.Fatalf("context = %+v", cx)
	}
	var q schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"nowait"}`, &q)
	if q.Status != schemas.CompactQueued {
		t.Fatalf("compact without wait = %+v", q)
	}
	code, desc := svcError(t, s.client, schemas.CompactSubject, `{"conversation":"w9","wait_ms":1000}`)
	if code != "503" || !strings.Contains(desc, "too many") || !strings.Contains(desc, "nothing was queued") {
		t.Fatalf("a wait beyond the limit: %s %q; want 503", code, desc)
	}
	for i, ch := range waits {
		select {
		case m := <-ch:
			t.Fatalf("wait %d answered before any outcome: %s", i, m.Data)
		default:
		}
	}
	// An outcome frees a slot.
	req := pendingRequest(t, s.st, "w1")
	publishEvent(t, s.st, schemas.Event{Type: schemas.EventDeclined, Conversation: "w1", RequestID: req.RequestID})
	if got := compactAnswer(t, waits[1]); got.Status != schemas.CompactDeclined {
		t.Fatalf("w1 = %+v", got)
	}
	var later schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"w9","wait_ms":1}`, &later)
	if later.Status != schemas.CompactQueued {
		t.Fatalf("a wait after a slot freed = %+v", later)
	}
}

func TestServiceShutdownAnswersWaitsInFlight(t *testing.T) {
	s := startService(t, service.Config{})
	stored(t, s.st, "down")
	events := watchEvents(t, s.client)
	ch := asyncCall(s.client, schemas.CompactSubject, `{"conversation":"down","request_id":"r1","wait_ms":60000}`)
	events.next(t, schemas.EventRequested, "down")
	s.stop(t) // Run returns only after the wait was answered
	select {
	case m := <-ch:
		var got schemas.CompactResponse
		if err := json.Unmarshal(m.Data, &got); err != nil {
			t.Fatalf("answer %s: %v", m.Data, err)
		}
		if got.Status != schemas.CompactQueued || got.RequestID != "r1" || !strings.Contains(got.Error, "service is stopping") {
			t.Fatalf("wait at shutdown = %+v; want queued, saying the service is stopping", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait in flight was not answered at shutdown")
	}
	// Nothing is left behind: the service's subscriptions are gone (the drained ones
	// are removed asynchronously) and nobody answers any more.
	nc := s.nc
	deadline := time.Now().Add(5 * time.Second)
	for nc.NumSubscriptions() != s.subs {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions after stop; want %d as before start", nc.NumSubscriptions(), s.subs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.client.Request(schemas.StatusSubject, nil, 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("status after stop: %v; want no responders", err)
	}
}

func TestServiceConfigIsChecked(t *testing.T) {
	r, _ := policy.NewResolver(nil, nil, nil)
	for _, cfg := range []service.Config{{MaxWait: -1}, {MaxConcurrentWaits: -1}} {
		if _, err := service.New(cfg, &nats.Conn{}, &jetstream.Store{}, kvPolicies{r: r}, r.Resolve, zerolog.Nop()); !errors.Is(err, service.ErrConfig) {
			t.Errorf("New(%+v) = %v; want ErrConfig", cfg, err)
		}
	}
	if _, err := service.New(service.Config{}, &nats.Conn{}, &jetstream.Store{}, nil, r.Resolve, zerolog.Nop()); !errors.Is(err, service.ErrConfig) {
		t.Errorf("New without policies = %v; want ErrConfig", err)
	}
}

// Policy writes are compare-and-set on the revision read: a write on a stale revision
// is refused with ErrRevisionMismatch, whatever it does (create, update or delete).
func TestPolicyWritesAreCompareAndSet(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	if err := s.st.Policies().Put(ctx, "cas", []byte(`{"threshold":0.6}`), 0); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := s.st.Policies().Put(ctx, "cas", []byte(`{"threshold":0.7}`), 0); !errors.Is(err, jetstream.ErrRevisionMismatch) {
		t.Fatalf("create over a policy: %v; want ErrRevisionMismatch", err)
	}
	_, rev, err := s.st.Policies().Get(ctx, "cas")
	if err != nil || rev == 0 {
		t.Fatalf("get: revision %d, %v", rev, err)
	}
	if err := s.st.Policies().Put(ctx, "cas", []byte(`{"threshold":0.7}`), rev); err != nil {
		t.Fatalf("update on the current revision: %v", err)
	}
	if err := s.st.Policies().Put(ctx, "cas", []byte(`{"threshold":0.8}`), rev); !errors.Is(err, jetstream.ErrRevisionMismatch) {
		t.Fatalf("update on a stale revision: %v; want ErrRevisionMismatch", err)
	}
	if err := s.st.Policies().Put(ctx, "cas", nil, rev); !errors.Is(err, jetstream.ErrRevisionMismatch) {
		t.Fatalf("delete on a stale revision: %v; want ErrRevisionMismatch", err)
	}
	data, rev, err := s.st.Policies().Get(ctx, "cas")
	if err != nil || string(data) != `{"threshold":0.7}` {
		t.Fatalf("policy after refused writes = %s, %v; want the update", data, err)
	}
	if err := s.st.Policies().Put(ctx, "cas", nil, rev); err != nil {
		t.Fatalf("delete on the current revision: %v", err)
	}
	if data, rev, err := s.st.Policies().Get(ctx, "cas"); data != nil || rev != 0 || err != nil {
		t.Fatalf("policy after delete = %s at %d, %v; want none", data, rev, err)
	}
	if err := s.st.Policies().Put(ctx, "cas", []byte(`{"threshold":0.9}`), 0); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
}

// Concurrent policy sets on different keys all survive: each write is compare-and-set,
// and a write that lost the race is applied again on top of the winner's.
func TestServiceConcurrentPolicySetsAllSurvive(t *testing.T) {
	s := startService(t, service.Config{})
	// More instances of the service, so requests are handled at the same time (one
	// instance handles the requests of an endpoint one after the other).
	r, err := policy.NewResolver(policy.Layer{"context_window": "4000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		svc, err := service.New(service.Config{}, s.nc, s.st, kvPolicies{st: s.st, r: r}, r.Resolve, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v", err)
			}
		})
	}
	ctx := svcCtx(t)
	sets := map[string]string{"threshold": "0.7", "keep_last_n": "8", "tool_rounds": "3"}
	for round := range 10 {
		conv := fmt.Sprintf("race%d", round)
		var answers []<-chan *nats.Msg
		for k, v := range sets {
			answers = append(answers, asyncCall(s.client, schemas.PolicySubject, fmt.Sprintf(`{"conversation":%q,"set":{%q:%q}}`, conv, k, v)))
		}
		for _, ch := range answers {
			m := <-ch
			if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
				t.Fatalf("%s: policy set: error %s: %s", conv, code, m.Header.Get(micro.ErrorHeader))
			}
		}
		data, _, err := s.st.Policies().Get(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		got, err := policy.DecodeConversation(data)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range sets {
			if got[k] != v {
				t.Fatalf("%s: stored policy %v; want every concurrent set %v (an update was lost)", conv, got, sets)
			}
		}
	}
}

// compactor.forget deletes a conversation and answers what it deleted; forgetting it
// again, or one that never existed, deletes nothing and is no error.
func TestServiceForget(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	for i := range 3 {
		for _, conv := range []string{"gone", "stays"} {
			if _, err := s.st.Chat().Publish(ctx, conv, fmt.Appendf(nil, `{"role":"user","content":"%s %d"}`, conv, i), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	var p schemas.PolicyResponse
	svcCall(t, s.client, schemas.PolicySubject, `{"conversation":"gone","set":{"instructions":"keep gone"}}`, &p)
	var out schemas.ForgetResponse
	svcCall(t, s.client, schemas.ForgetSubject, `{"conversation":"gone"}`, &out)
	if out.Conversation != "gone" || out.ThroughSeq != 6 || out.Deleted.ChatMessages != 3 || out.Deleted.PolicyRevisions != 1 || out.ForgottenAt.IsZero() {
		t.Fatalf("forget answered %+v; want 3 messages and 1 policy deleted through seq 6", out)
	}
	if found, _ := jstest.Scan(t, s.client, "gone"); len(found) > 0 {
		t.Fatalf("after the forget: %v", found)
	}
	if es, err := s.st.Chat().LoadEntries(ctx, "stays", 0, 0); err != nil || len(es) != 3 {
		t.Fatalf("the other conversation: %d messages, %v; want 3", len(es), err)
	}
	for _, conv := range []string{"gone", "never-there"} {
		var again schemas.ForgetResponse
		svcCall(t, s.client, schemas.ForgetSubject, fmt.Sprintf(`{"conversation":%q}`, conv), &again)
		if again.Deleted != (schemas.ForgetCounts{}) {
			t.Errorf("forget %s: %+v; want nothing deleted", conv, again)
		}
	}
}

// A compaction asked for a forgotten conversation (with nothing newer than the forget)
// is not queued: the service takes its request back and answers 409; a compact request
// waiting for its outcome when the conversation is forgotten answers 409 at once.
func TestServiceCompactOfAForgottenConversation(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	if _, err := s.st.Chat().Publish(ctx, "waits", []byte(`{"role":"user","content":"hello"}`), ""); err != nil {
		t.Fatal(err)
	}
	waiting := asyncCall(s.client, schemas.CompactSubject, `{"conversation":"waits","wait_ms":30000}`)
	for deadline := time.Now().Add(10 * time.Second); ; { // queued: the service now waits for its outcome
		if r, err := s.st.Queue().Pending(ctx, "waits"); err == nil && r != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the compact request was not queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out schemas.ForgetResponse
	svcCall(t, s.client, schemas.ForgetSubject, `{"conversation":"waits"}`, &out)
	select {
	case m := <-waiting:
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "409" || !strings.Contains(m.Header.Get(micro.ErrorHeader), "was forgotten") {
			t.Fatalf("the waiting compact answered %s %q %s; want 409 forgotten", code, m.Header.Get(micro.ErrorHeader), m.Data)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting compact request was not answered when its conversation was forgotten")
	}

	code, desc := svcError(t, s.client, schemas.CompactSubject, `{"conversation":"waits","instructions":"keep hello"}`)
	if code != "409" || !strings.Contains(desc, "was forgotten") {
		t.Fatalf("compact after the forget: %s %q; want 409 forgotten", code, desc)
	}
	if r, err := s.st.Queue().Pending(ctx, "waits"); r != nil || err != nil {
		t.Fatalf("a request is queued for the forgotten conversation: %+v, %v", r, err)
	}
	if found, _ := jstest.Scan(t, s.client, "waits"); len(found) > 0 {
		t.Fatalf("the refused request left: %v", found)
	}
	// A message after the forget starts a new conversation, which compacts as any other.
	if _, err := s.st.Chat().Publish(ctx, "waits", []byte(`{"role":"user","content":"again"}`), ""); err != nil {
		t.Fatal(err)
	}
	var r schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"waits"}`, &r)
	if r.Status != schemas.CompactQueued {
		t.Fatalf("compact of the new conversation: %+v; want queued", r)
	}
}

// A compaction of a conversation with nothing stored (a typo, a forgotten one) is
// refused with 404 and writes nothing: queued, it would have made a declined marker,
// a value for a conversation that is not there.
func TestServiceCompactOfAnUnknownConversationIsNotFound(t *testing.T) {
	s := startService(t, service.Config{})
	for _, body := range []string{`{"conversation":"ghost"}`, `{"conversation":"ghost","wait_ms":5000}`} {
		code, desc := svcError(t, s.client, schemas.CompactSubject, body)
		if code != "404" || !strings.Contains(desc, "ghost not found") || !strings.Contains(desc, "nothing was queued") {
			t.Fatalf("compact %s: %s %q; want 404 naming the conversation", body, code, desc)
		}
	}
	if found, _ := jstest.Scan(t, s.client, "ghost"); len(found) > 0 {
		t.Fatalf("the refused compaction stored: %v", found)
	}
	// A value without messages (they aged out of CHAT) is still a conversation.
	v := &schemas.Result{SchemaVersion: 1, Conversation: "aged", Generation: 1, Summary: "kept",
		TailStartSeq: 9, CoveredThroughSeq: 8, RequestID: "r0", CreatedAt: time.Now().UTC()}
	if _, err := s.st.Results().Put(svcCtx(t), v, 0); err != nil {
		t.Fatal(err)
	}
	var r schemas.CompactResponse
	svcCall(t, s.client, schemas.CompactSubject, `{"conversation":"aged"}`, &r)
	if r.Status != schemas.CompactQueued {
		t.Fatalf("compact of a conversation with only a value: %+v; want queued", r)
	}
}

// With traces on, a manual compaction is a trace under the caller's span (its request
// carried a traceparent), and the queued request's headers carry that trace to the
// worker, as the trigger's requests do.
func TestServiceCompactCarriesTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	s := startService(t, service.Config{Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	stored(t, s.st, "traced")
	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	msg := nats.NewMsg(schemas.CompactSubject)
	msg.Data = []byte(`{"conversation":"traced"}`)
	msg.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	reply, err := s.client.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r schemas.CompactResponse
	if err := json.Unmarshal(reply.Data, &r); err != nil || r.Status != schemas.CompactQueued {
		t.Fatalf("compact = %s (%v); want queued", reply.Data, err)
	}
	var span sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "compactor.request" {
			span = sp
		}
	}
	if span == nil || span.SpanContext().TraceID().String() != callerTrace || span.Parent().SpanID().String() != callerSpan {
		t.Fatalf("request span %v; want one in the caller's trace %s under its span %s", span, callerTrace, callerSpan)
	}
	js, err := natsjs.New(s.client)
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(svcCtx(t), s.st.Config().RequestsStream)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := str.GetLastMsgForSubject(svcCtx(t), s.st.Config().RequestPrefix+".traced")
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + callerTrace + "-" + span.SpanContext().SpanID().String() + "-01"
	if got := queued.Header.Get("traceparent"); got != want {
		t.Fatalf("queued request's traceparent %q; want %q (the request span's)", got, want)
	}
}

// A value that outlived a forget (written after the tombstone, for an old generation,
// by a worker that gave up its check or crashed before it) is not served by
// compactor.context (with or without a format) nor compactor.status, and the tail
// starts above what the forget deleted.
func TestServiceDoesNotServeAValueTheTombstoneCovers(t *testing.T) {
	s := startService(t, service.Config{})
	ctx := svcCtx(t)
	for i := range 3 {
		if _, err := s.st.Chat().Publish(ctx, "late", fmt.Appendf(nil, `{"role":"user","content":"old %d"}`, i), ""); err != nil {
			t.Fatal(err)
		}
	}
	var out schemas.ForgetResponse
	svcCall(t, s.client, schemas.ForgetSubject, `{"conversation":"late"}`, &out)
	late := &schemas.Result{SchemaVersion: 1, Conversation: "late", Generation: 4, Summary: "FORGOTTEN SUMMARY",
		TailStartSeq: out.ThroughSeq, CoveredThroughSeq: out.ThroughSeq - 1, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := s.st.Results().Put(ctx, late, 0); err != nil {
		t.Fatal(err)
	}
	last, err := s.st.Chat().Publish(ctx, "late", []byte(`{"role":"user","content":"new"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	var cx schemas.ContextResponse
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"late"}`, &cx)
	if cx.Value != nil || cx.TailStartSeq != out.ThroughSeq+1 || cx.LastSeq != last {
		t.Fatalf("context = %+v; want no value and the tail from %d", cx, out.ThroughSeq+1)
	}
	var rx schemas.ContextResponse
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"late","format":"openai"}`, &rx)
	if rx.Value != nil || strings.Contains(string(rx.Rendered), "FORGOTTEN") || !strings.Contains(string(rx.Rendered), "new") {
		t.Fatalf("rendered context = %s; want only the new message", rx.Rendered)
	}
	var st schemas.ConversationStatus
	svcCall(t, s.client, schemas.StatusSubject, `{"conversation":"late"}`, &st)
	if st.Value != nil {
		t.Fatalf("status = %+v; want no value", st)
	}
}
