package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedConvs says which compaction's span each turn's context comes from.
type tracedConvs struct {
	*memConvs
	sc trace.SpanContext
}

func (c tracedConvs) TurnSpanContext(*Turn) trace.SpanContext { return c.sc }

func TestEachRequestHasASpanLinkedToTheCompaction(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	up := newFakeUpstream(t, replyJSON("ok"))
	reports := make(reportsOf, 2)
	compaction := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	cfg := DefaultConfig()
	cfg.Listen, cfg.Upstream, cfg.AnthropicUpstream = "", up.URL, up.URL
	convs := tracedConvs{newMemConvs(), compaction}
	s, err := New(cfg, map[string]Wire{"openai": testWire{"openai"}}, convs, Options{Tracer: tp, Observer: reports})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set(ConversationHeader, "c1")
	req.Header.Set("Authorization", "Bearer sk-span-planted")
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	reports.next(t)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	sp := spans[0]
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range sp.Attributes() {
		attrs[a.Key] = a.Value
		if strings.Contains(a.Value.String(), "sk-span-planted") {
			t.Fatalf("the credential is in the span: %s", a.Key)
		}
	}
	if sp.Name() != "proxy openai" || sp.SpanKind() != trace.SpanKindServer || attrs["compactor.proxy.outcome"].AsString() != OutcomeCompacted ||
		attrs[conversationAttribute].AsString() != "c1" || attrs["compactor.generation"].AsInt64() != 7 {
		t.Fatalf("span %s %v %v", sp.Name(), sp.SpanKind(), attrs)
	}
	if sp.Parent().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("the client's trace is not the span's: parent %v", sp.Parent())
	}
	if links := sp.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != compaction.TraceID() {
		t.Fatalf("links %+v", links)
	}
}
