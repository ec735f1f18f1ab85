package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// opsServe runs serve with the operators' listener on a port the system picks, with
// the variables set before (t.Setenv), and returns the listener's address, read from
// the log. stop ends serve and returns its result.
func opsServe(t *testing.T) (addr string, served <-chan error, logs *proctest.LogBuffer, stop func() error) {
	t.Helper()
	t.Setenv("COMPACTOR_HTTP_LISTEN", "127.0.0.1:0")
	t.Setenv("COMPACTOR_LOG_LEVEL", "info")
	logs = &proctest.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		ch <- run(ctx, []string{"serve"}, stdio{in: strings.NewReader(""), out: io.Discard, err: logs}, os.LookupEnv)
	}()
	stopped := false
	var result error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-ch:
			case <-time.After(60 * time.Second):
				t.Fatalf("serve did not stop\n%s", logs)
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	eventually(t, 10*time.Second, "the HTTP listener's address in the log", func() bool {
		select {
		case err := <-ch:
			t.Fatalf("serve returned: %v\n%s", err, logs)
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Message, "HTTP listener for operators") {
				addr = line.Addr
				return true
			}
		}
		return false
	})
	return addr, ch, logs, stop
}

// get answers a GET of path on addr: status and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape is one scrape of /metrics, parsed.
type scrape struct {
	body     string
	families map[string]*dto.MetricFamily
}

func scrapeMetrics(t *testing.T, addr string) scrape {
	t.Helper()
	code, body := get(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return scrape{body: body, families: fams}
}

// value is the value of the series name{labels} (pairs of name and value): a counter's
// or gauge's value; for a histogram, name_count and name_sum are its count and sum.
// ok is false when the series is not in the scrape.
func (s scrape) value(name string, labels ...string) (v float64, ok bool) {
	base, part := name, ""
	for _, suffix := range []string{"_count", "_sum"} {
		if b, found := strings.CutSuffix(name, suffix); found && s.families[b] != nil && s.families[b].GetType() == dto.MetricType_HISTOGRAM {
			base, part = b, suffix
		}
	}
	fam := s.families[base]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case part == "_count":
			return float64(m.GetHistogram().GetSampleCount()), true
		case part == "_sum":
			return m.GetHistogram().GetSampleSum(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// sum is the sum of value over the series of name that have labels.
func (s scrape) sum(name string, labels ...string) float64 {
	total := 0.0
	fam := s.families[name]
	if fam == nil {
		return 0
	}
next:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// With COMPACTOR_HTTP_LISTEN, serve answers /healthz, /readyz, /metrics and the pprof
// profiles on that address, serves nothing else, and closes the listener when it stops.
func TestServeHTTPListenerForOperators(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	addr, served, logs, stop := opsServe(t)
	waitForService(t, srv.ClientURL(), served, logs, "started with an HTTP listener")

	if code, body := get(t, addr, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q; want 200 \"ok\\n\"", code, body)
	}
	eventually(t, 10*time.Second, "/readyz to answer 200", func() bool {
		code, _ := get(t, addr, "/readyz")
		return code == http.StatusOK
	})
	if code, body := get(t, addr, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d, body without the goroutine profile:\n%.300s", code, body)
	}
	// A profile of this process: the trigger's goroutines are in it.
	if code, body := get(t, addr, "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "compactor/triggers") {
		t.Errorf("/debug/pprof/goroutine: %d, no goroutine of the trigger in:\n%.300s", code, body)
	}
	m := scrapeMetrics(t, addr)
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "compactor_build_info",
		"compactor_nats_connected", "compactor_workers", "compactor_request_backlog", "compactor_trigger_backlog"} {
		if _, ok := m.value(name); !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if code, _ := get(t, addr, "/"); code != http.StatusNotFound {
		t.Errorf("/: %d; want 404 (the listener serves only /healthz, /readyz, /metrics and /debug/pprof/)", code)
	}

	if err := stop(); err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after serve stopped", addr)
	}
}

// A listener address that is not host:port stops start-up, naming the variable.
func TestHTTPListenMustBeHostPort(t *testing.T) {
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_HTTP_LISTEN", "9090")
	_, err := loadEnv(os.LookupEnv)
	if err == nil || !strings.Contains(err.Error(), "COMPACTOR_HTTP_LISTEN") {
		t.Fatalf("loadEnv: %v; want an error naming COMPACTOR_HTTP_LISTEN", err)
	}
}

// /healthz is the process's liveness and never depends on NATS; /readyz is 200 only
// while the connection is up and JetStream answers, and says why not otherwise: while
// serve waits for NATS at start-up, while it waits for JetStream, and while the server
// is away after it ran. The scrape of /metrics stays quick with NATS away.
func TestReadinessFollowsNATSAndJetStream(t *testing.T) {
	testEnv(t, 128000)
	port := proctest.FreePort(t)
	t.Setenv("COMPACTOR_NATS_URL", fmt.Sprintf("nats://127.0.0.1:%d", port))
	addr, _, logs, stop := opsServe(t)

	readyz := func() (int, string) { return get(t, addr, "/readyz") }
	waitReady := func(what string, want int, reason string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() bool {
			code, body := readyz()
			return code == want && strings.Contains(body, reason)
		})
	}
	// Nothing listens yet: serve is alive but not ready.
	if code, _ := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while NATS is away at start-up: %d; want 200", code)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "connecting to NATS") {
		t.Fatalf("/readyz before NATS: %d %q; want 503 saying it connects to NATS", code, body)
	}

	// A server without JetStream: connected, not provisioned.
	ns := jstest.ServerWith(t, func(o *server.Options) { o.Port, o.JetStream = port, false })
	waitReady("/readyz to say serve waits for JetStream", http.StatusServiceUnavailable, "provisioning JetStream")
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	waitReady("/readyz to answer 200 once JetStream is provisioned", http.StatusOK, "ok")

	// The server goes away: not ready, still alive, and /metrics says so at once.
	restart := jstest.Stop(t, ns)
	waitReady("/readyz to answer 503 with NATS away", http.StatusServiceUnavailable, "not connected")
	if code, _ := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with NATS away: %d; want 200 (liveness does not depend on NATS)", code)
	}
	start := time.Now()
	m := scrapeMetrics(t, addr)
	if took := time.Since(start); took > telemetry.BacklogTimeout+time.Second {
		t.Errorf("a scrape with NATS away took %s; want at most about %s", took, telemetry.BacklogTimeout)
	}
	if v, ok := m.value("compactor_nats_connected"); !ok || v != 0 {
		t.Errorf("compactor_nats_connected with NATS away: %v, %v; want 0", v, ok)
	}
	if _, ok := m.value("compactor_request_backlog", "state", "waiting"); ok {
		t.Error("compactor_request_backlog reported with NATS away; want it left out")
	}
	if v, _ := m.value("compactor_backlog_read_errors_total", "consumer", "requests"); v < 1 {
		t.Errorf("compactor_backlog_read_errors_total{consumer=requests} = %v; want at least 1", v)
	}

	restart()
	waitReady("/readyz to answer 200 after NATS is back", http.StatusOK, "ok")
	eventually(t, 30*time.Second, "the backlog in the scrape again", func() bool {
		m := scrapeMetrics(t, addr)
		v, ok := m.value("compactor_nats_connected")
		_, backlog := m.value("compactor_request_backlog", "state", "waiting")
		return ok && v == 1 && backlog
	})
	if v, _ := scrapeMetrics(t, addr).value("compactor_nats_reconnects_total"); v < 1 {
		t.Errorf("compactor_nats_reconnects_total = %v; want at least 1", v)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
}

// One compaction against the fake LLM moves the metrics, with the labels of what
// happened: its first LLM call fails (a 500: an LLM error of kind server, a retried
// delivery), the second succeeds (a completed compaction with the tokens before and
// after of the value written, and the summarizer's tokens). While a worker holds the
// request, the backlog shows it in progress. No conversation id is a label.
func TestMetricsOfACompaction(t *testing.T) {
	testEnv(t, 4000)
	srv := jstest.Server(t)
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Failures, f.Block = 1, make(chan struct{}) })
	for k, v := range map[string]string{
		"COMPACTOR_NATS_URL": srv.ClientURL(), "COMPACTOR_CONTEXT_WINDOW": "4000",
		"COMPACTOR_LLM_BASE_URL": llm.URL(), "COMPACTOR_LLM_API_KEY": "test-key",
		"COMPACTOR_BACKOFF_BASE": "20ms", "COMPACTOR_BACKOFF_MAX": "100ms", "COMPACTOR_RETRY_DELAY": "200ms",
	} {
		t.Setenv(k, v)
	}
	addr, served, logs, stop := opsServe(t)
	waitForService(t, srv.ClientURL(), served, logs, "started")
	nc := jstest.Conn(t, srv)
	st, err := jetstream.Open(ctxFor(t, 10*time.Second), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := pipeline.NewWithStore(nc, st)
	const conv = "metrics-conv-7f3a"
	msgs, _ := fakellm.NeedleConversation(7) // over the threshold, under the hard limit
	replay(t, &stack{client: client}, conv, msgs, 0)

	eventually(t, 30*time.Second, "the request in progress in the backlog", func() bool {
		v, _ := scrapeMetrics(t, addr).value("compactor_request_backlog", "state", "in_progress")
		return llm.Held() == 1 && v == 1
	})
	if v, _ := scrapeMetrics(t, addr).value("compactor_workers_busy"); v != 1 {
		t.Errorf("compactor_workers_busy while the LLM holds the request: %v; want 1", v)
	}
	llm.Release(false)

	var value *schemas.Result
	eventually(t, 30*time.Second, "the compaction", func() bool {
		v, _, err := st.Results().Get(ctxFor(t, 10*time.Second), conv, true)
		if err != nil || v == nil || v.Generation == 0 {
			return false
		}
		value = v
		n, _ := scrapeMetrics(t, addr).value("compactor_compactions_total", "trigger", value.Trigger, "outcome", "completed")
		return n == 1
	})
	m := scrapeMetrics(t, addr)
	want := func(name string, want float64, labels ...string) {
		t.Helper()
		if got, ok := m.value(name, labels...); !ok || got != want {
			t.Errorf("%s%v = %v (present: %v); want %v", name, labels, got, ok, want)
		}
	}
	trig := value.Trigger
	want("compactor_compactions_total", 1, "trigger", trig, "outcome", "retried")
	want("compactor_compaction_duration_seconds_count", 1, "trigger", trig, "outcome", "completed")
	want("compactor_compaction_duration_seconds_count", 1, "trigger", trig, "outcome", "retried")
	want("compactor_compaction_tokens_before_count", 1, "trigger", trig)
	want("compactor_compaction_tokens_before_sum", float64(value.TokensBefore), "trigger", trig)
	want("compactor_compaction_tokens_after_sum", float64(value.TokensAfter), "trigger", trig)
	want("compactor_fallback_summaries_total", 0, "trigger", trig)
	want("compactor_llm_requests_total", 2, "model", "gpt-4o-mini")
	want("compactor_llm_errors_total", 1, "model", "gpt-4o-mini", "kind", "server")
	want("compactor_llm_request_duration_seconds_count", 2, "model", "gpt-4o-mini")
	if s := m.sum("compactor_compactions_total", "outcome", "failed"); s != 0 {
		t.Errorf("compactor_compactions_total{outcome=failed} sums to %v; want 0", s)
	}
	if got := m.sum("compactor_llm_errors_total"); got != 1 {
		t.Errorf("compactor_llm_errors_total sums to %v; want 1", got)
	}
	if got, _ := m.value("compactor_summarizer_tokens_total", "model", "gpt-4o-mini", "kind", "prompt"); got != float64(value.Usage.PromptTokens) || got == 0 {
		t.Errorf("compactor_summarizer_tokens_total{kind=prompt} = %v; want the usage the LLM reported, %d", got, value.Usage.PromptTokens)
	}
	if got, _ := m.value("compactor_summarizer_tokens_total", "model", "gpt-4o-mini", "kind", "completion"); got != float64(value.Usage.CompletionTokens) || got == 0 {
		t.Errorf("compactor_summarizer_tokens_total{kind=completion} = %v; want the usage the LLM reported, %d", got, value.Usage.CompletionTokens)
	}
	if got, _ := m.value("compactor_summarizer_tokens_total", "model", "gpt-4o-mini", "kind", "cached"); got != float64(value.Usage.CachedTokens) || got == 0 {
		t.Errorf("compactor_summarizer_tokens_total{kind=cached} = %v; want the cached tokens the LLM reported, %d", got, value.Usage.CachedTokens)
	}
	if got, _ := m.value("compactor_trigger_requests_total", "trigger", trig, "result", "queued"); got < 1 {
		t.Errorf("compactor_trigger_requests_total{result=queued} = %v; want at least 1", got)
	}
	if got, _ := m.value("compactor_trigger_lag_seconds_count"); got < float64(len(msgs)) {
		t.Errorf("compactor_trigger_lag_seconds_count = %v; want at least the %d messages published", got, len(msgs))
	}
	if got, _ := m.value("compactor_trigger_conversations"); got != 1 {
		t.Errorf("compactor_trigger_conversations = %v; want 1", got)
	}
	if strings.Contains(m.body, conv) {
		t.Errorf("the conversation id %s is in /metrics", conv)
	}
	eventually(t, 30*time.Second, "an empty work queue in the backlog", func() bool {
		m := scrapeMetrics(t, addr)
		w, ok1 := m.value("compactor_request_backlog", "state", "waiting")
		p, ok2 := m.value("compactor_request_backlog", "state", "in_progress")
		return ok1 && ok2 && w == 0 && p == 0
	})
	if err := stop(); err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
}

// Readiness and the backlog gauges work for every serve role of the least-privilege
// users of deploy/nats/accounts.conf: what they ask JetStream is among what each role may
// ask, and no probe or scrape causes a permissions violation.
func TestReadinessAndBacklogUnderTheRolesOfAccountsConf(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	ctx := ctxFor(t, time.Minute)
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	for _, role := range []string{"trigger", "worker", "api"} {
		t.Run(role, func(t *testing.T) {
			c := connect(role)
			st, err := jetstream.Provision(ctx, c.NC, cfg)
			if err != nil {
				t.Fatalf("bind as %s: %v", role, err)
			}
			ready := telemetry.NewReadiness()
			ready.Running(st)
			if err := ready.Check(ctx); err != nil {
				t.Errorf("/readyz as %s: %v", role, err)
			}
			m := telemetry.NewMetrics("test")
			var parts func() []jetstream.Partition
			if role == "trigger" {
				parts = cfg.Partitions
			}
			m.Backlog(st, parts, zerolog.Nop())
			fams, err := m.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, f := range fams {
				for _, mm := range f.Metric {
					got[f.GetName()] += mm.GetGauge().GetValue() + mm.GetCounter().GetValue()
				}
				if f.GetName() == "compactor_request_backlog" || f.GetName() == "compactor_trigger_backlog" {
					got[f.GetName()+" present"] = 1
				}
			}
			if got["compactor_request_backlog present"] != 1 || (role == "trigger" && got["compactor_trigger_backlog present"] != 1) {
				t.Errorf("backlog gauges as %s: %v", role, got)
			}
			if got["compactor_backlog_read_errors_total"] != 0 {
				t.Errorf("backlog read errors as %s: %v", role, got["compactor_backlog_read_errors_total"])
			}
			if v := c.Violations(); v != "" {
				t.Errorf("permissions violations as %s:\n%s", role, v)
			}
		})
	}
}
