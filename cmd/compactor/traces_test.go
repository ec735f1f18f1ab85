package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes what exporters post to
// /v1/traces, as a collector does.
type otlpReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each span's resource
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ex coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &ex); err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range ex.ResourceSpans {
			service := attr(rs.GetResource().GetAttributes(), "service.name")
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, s)
					r.services = append(r.services, service)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) received() ([]*tracepb.Span, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), append([]string(nil), r.services...)
}

// attr is the value of key among kvs, as text.
func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			if v, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// With COMPACTOR_OTEL_ENDPOINT, one compaction is one trace, exported over OTLP/HTTP:
// the trigger's request span (linked to the span of the agent that published the
// message, from its traceparent header), the worker's job span under it (the request
// carried the trace context in its NATS headers), the LLM call with the gen_ai
// attributes of the OpenTelemetry semantic conventions, and the KV write.
func TestTraceOfACompaction(t *testing.T) {
	testEnv(t, 4000)
	srv := jstest.Server(t)
	llm := fakellm.New(t)
	rcv := newOTLPReceiver(t)
	for k, v := range map[string]string{
		"COMPACTOR_NATS_URL": srv.ClientURL(), "COMPACTOR_CONTEXT_WINDOW": "4000",
		"COMPACTOR_LLM_BASE_URL": llm.URL(), "COMPACTOR_LLM_API_KEY": "test-key",
		"COMPACTOR_OTEL_ENDPOINT": rcv.srv.URL, "COMPACTOR_LOG_LEVEL": "warn",
	} {
		t.Setenv(k, v)
	}
	logs := &proctest.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, []string{"serve"}, stdio{in: strings.NewReader(""), out: io.Discard, err: logs}, os.LookupEnv)
	}()
	waitForService(t, srv.ClientURL(), served, logs, "started")

	// The agent publishes its conversation within a trace of its own.
	const agentTrace, agentSpan = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	nc := jstest.Conn(t, srv)
	st, err := jetstream.Open(ctxFor(t, 10*time.Second), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	js := jsFor(t, nc)
	msgs, _ := fakellm.NeedleConversation(7) // over the threshold, under the hard limit
	for _, m := range msgs {
		data, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: must(st.Config().ChatSubject("traced")), Data: data, Header: nats.Header{}}
		msg.Header.Set("traceparent", "00-"+agentTrace+"-"+agentSpan+"-01")
		if _, err := js.PublishMsg(ctxFor(t, 10*time.Second), msg); err != nil {
			t.Fatal(err)
		}
	}
	var value *schemas.Result
	eventually(t, 30*time.Second, "the compaction", func() bool {
		v, _, err := st.Results().Get(ctxFor(t, 10*time.Second), "traced", true)
		value = v
		return err == nil && v != nil && v.Generation == 1
	})
	eventually(t, 30*time.Second, "the request acknowledged", func() bool { return idleWorkers(t, &stack{nc: nc, st: st}) })
	cancel() // serve flushes its spans as it stops
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop\n%s", logs)
	}

	spans, services := rcv.received()
	byName := map[string]*tracepb.Span{}
	for i, s := range spans {
		byName[s.Name] = s
		if services[i] != "compactor" {
			t.Errorf("span %s of service %q; want compactor", s.Name, services[i])
		}
	}
	req, job, chat, put := byName["compactor.request"], byName["compactor.compact"], byName["chat gpt-4o-mini"], byName["compactor.kv.put"]
	if req == nil || job == nil || chat == nil || put == nil {
		names := make([]string, 0, len(spans))
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("spans received: %v; want compactor.request, compactor.compact, chat gpt-4o-mini and compactor.kv.put", names)
	}
	id := func(b []byte) string { return hex.EncodeToString(b) }
	if len(req.ParentSpanId) != 0 {
		t.Errorf("the request span has a parent; want it the root of the compaction's trace")
	}
	if len(req.Links) != 1 || id(req.Links[0].TraceId) != agentTrace || id(req.Links[0].SpanId) != agentSpan {
		t.Errorf("request span links %v; want one to the agent's span %s/%s", req.Links, agentTrace, agentSpan)
	}
	trace := id(req.TraceId)
	for _, s := range []*tracepb.Span{job, chat, put} {
		if id(s.TraceId) != trace {
			t.Errorf("span %s in trace %s; want the request's %s", s.Name, id(s.TraceId), trace)
		}
	}
	if id(job.ParentSpanId) != id(req.SpanId) {
		t.Errorf("the job span's parent is %s; want the request span %s", id(job.ParentSpanId), id(req.SpanId))
	}
	parents := map[string]*tracepb.Span{}
	for _, s := range spans {
		parents[id(s.SpanId)] = s
	}
	for _, s := range []*tracepb.Span{chat, put} {
		up := s
		for up != nil && up != job {
			up = parents[id(up.ParentSpanId)]
		}
		if up != job {
			t.Errorf("span %s is not under the job span", s.Name)
		}
	}
	if chat.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("LLM span kind %s; want client", chat.Kind)
	}
	for k, want := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
		"gen_ai.response.model": "gpt-4o-mini-fake",
	} {
		if got := attr(chat.Attributes, k); got != want {
			t.Errorf("LLM span %s = %q; want %q", k, got, want)
		}
	}
	for k, want := range map[string]int{"gen_ai.usage.input_tokens": value.Usage.PromptTokens, "gen_ai.usage.output_tokens": value.Usage.CompletionTokens} {
		if got := attr(chat.Attributes, k); got != strconv.Itoa(want) || want == 0 {
			t.Errorf("LLM span %s = %q; want %d, what the LLM reported", k, got, want)
		}
	}
	if got := attr(job.Attributes, "compactor.outcome"); got != "completed" {
		t.Errorf("job span compactor.outcome = %q; want completed", got)
	}
}

// Traces are off unless an endpoint is set; COMPACTOR_OTEL_ENDPOINT wins over the
// standard variables, and gets /v1/traces when it has no path; OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none turn them off; an endpoint that is no http(s) URL stops
// start-up, naming the variable.
func TestTracesEndpoint(t *testing.T) {
	tests := []struct {
		name    string
		vars    map[string]string
		wantOn  bool
		wantURL string
		wantErr bool
	}{
		{"nothing set", nil, false, "", false},
		{"ours, a base URL", map[string]string{"COMPACTOR_OTEL_ENDPOINT": "http://collector:4318"}, true, "http://collector:4318/v1/traces", false},
		{"ours, with a path", map[string]string{"COMPACTOR_OTEL_ENDPOINT": "https://otel.example.com/ingest/traces"}, true, "https://otel.example.com/ingest/traces", false},
		{"standard", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true, "", false},
		{"standard, traces only", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true, "", false},
		{"ours wins", map[string]string{"COMPACTOR_OTEL_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318"}, true, "http://a:4318/v1/traces", false},
		{"disabled", map[string]string{"COMPACTOR_OTEL_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}, false, "", false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318", "OTEL_TRACES_EXPORTER": "none"}, false, "", false},
		{"not a URL", map[string]string{"COMPACTOR_OTEL_ENDPOINT": "collector:4318"}, false, "", true},
		{"grpc scheme", map[string]string{"COMPACTOR_OTEL_ENDPOINT": "grpc://collector:4317"}, false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testEnv(t, 128000)
			for k, v := range tt.vars {
				t.Setenv(k, v)
			}
			env, err := loadEnv(os.LookupEnv)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "COMPACTOR_OTEL_ENDPOINT") {
					t.Fatalf("loadEnv: %v; want an error naming COMPACTOR_OTEL_ENDPOINT", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			on, url := telemetry.TracesEndpoint(env.OTelEndpoint, env.lookup)
			if on != tt.wantOn || url != tt.wantURL {
				t.Errorf("tracesEndpoint() = %v, %q; want %v, %q", on, url, tt.wantOn, tt.wantURL)
			}
		})
	}
}

// The SDK's errors are the process's own JSON log lines, one per interval at most, the
// next saying how many were left out.
func TestOpenTelemetryErrorsAreLoggedAndBounded(t *testing.T) {
	var b strings.Builder
	h := telemetry.ErrorHandler(zerolog.New(&b), time.Hour)
	for range 5 {
		h.Handle(errors.New("collector refused the batch"))
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines logged for 5 errors within the interval; want 1:\n%s", len(lines), b.String())
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil || line["error"] != "collector refused the batch" || line["level"] != "warn" {
		t.Fatalf("logged %q (%v); want a JSON warning with the error", lines[0], err)
	}
	b.Reset()
	h = telemetry.ErrorHandler(zerolog.New(&b), 0)
	h.Handle(errors.New("one"))
	h.Handle(errors.New("two"))
	if n := strings.Count(b.String(), "\n"); n != 2 {
		t.Fatalf("%d lines with no interval; want 2", n)
	}
}
