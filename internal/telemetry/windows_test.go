package telemetry

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
)

// Issue 18: the learned window of each endpoint and model is a gauge, read from the
// windows bucket at scrape time, so every process shows what any worker learned.
func TestLearnedWindowGauge(t *testing.T) {
	st := jstest.Provision(t, jstest.Conn(t, jstest.Server(t)))
	m := NewMetrics("test")
	m.LearnedWindows(st, zerolog.Nop())
	if n, err := testutil.GatherAndCount(m.reg, "compactor_summarizer_learned_window_tokens"); err != nil || n != 0 {
		t.Fatalf("before anything was learned: %d series, %v", n, err)
	}
	for _, lw := range []jetstream.LearnedWindow{
		{Endpoint: "http://llm:8000/v1", Model: "small", Tokens: 3000, RefusedTokens: 8000},
		{Endpoint: "https://api.example.com/v1", Model: "mini", Tokens: 2000, RefusedTokens: 4000},
	} {
		if _, err := st.Windows().Learn(context.Background(), lw); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP compactor_summarizer_learned_window_tokens The context window requests to a summarizer endpoint and model are sized by, learned from its refusals for length (as Compactor counts tokens); absent while none is on record, when the configured summarizer_context_window applies. The same for every process: take max, not sum.
# TYPE compactor_summarizer_learned_window_tokens gauge
compactor_summarizer_learned_window_tokens{endpoint="http://llm:8000/v1",model="small"} 3000
compactor_summarizer_learned_window_tokens{endpoint="https://api.example.com/v1",model="mini"} 2000
`
	fresh := NewMetrics("test") // the first collector keeps its answer for a moment
	fresh.LearnedWindows(st, zerolog.Nop())
	if err := testutil.GatherAndCompare(fresh.reg, strings.NewReader(want), "compactor_summarizer_learned_window_tokens"); err != nil {
		t.Fatal(err)
	}
}

// The compact form of an observed LLM summarizer (what the pool switches to for a small
// window) is observed too: its calls count, and it still names its endpoint and sizes
// its requests.
func TestCompactFormIsObserved(t *testing.T) {
	f := fakellm.New(t)
	s, err := llm.New(llm.Config{BaseURL: f.URL(), Model: "small"})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics("test")
	observed := Telemetry{Metrics: m}.LLM(s)
	c, ok := observed.(interface{ Compact() summary.Summarizer })
	if !ok {
		t.Fatal("the observed summarizer has no compact form")
	}
	short := c.Compact()
	if _, ok := short.(interface{ Endpoint() (string, string) }); !ok {
		t.Fatal("the compact form does not name its endpoint")
	}
	sized, ok := short.(interface{ RequestTokens(summary.Input) int })
	if !ok || sized.RequestTokens(summary.Input{MaxSummaryTokens: 100}) >= s.RequestTokens(summary.Input{MaxSummaryTokens: 100}) {
		t.Fatal("the compact form does not size its shorter requests")
	}
	if _, err := short.Summarize(context.Background(), summary.Input{Messages: []schemas.Message{{Role: schemas.RoleUser, Content: schemas.Text("hi")}}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.llmRequests.WithLabelValues("small")); got != 1 {
		t.Fatalf("%v requests counted; want the compact form's 1", got)
	}
}
