package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/triggers"
)

// Metrics are a node's Prometheus metrics, on a registry of their own (not the global
// one: two serves in one test binary do not share counters). Label values come only
// from closed sets (trigger kinds, outcomes, error kinds) and from the operator's own
// configuration (model names: llm_model is an operator-only key), never from what a
// message says: a conversation id is never a label.
type Metrics struct {
	reg *prometheus.Registry

	compactions      *prometheus.CounterVec   // trigger, outcome
	duration         *prometheus.HistogramVec // trigger, outcome
	tokensBefore     *prometheus.HistogramVec // trigger
	tokensAfter      *prometheus.HistogramVec // trigger
	fallbacks        *prometheus.CounterVec   // trigger
	repairs          *prometheus.CounterVec   // outcome
	llmRequests      *prometheus.CounterVec   // model
	llmErrors        *prometheus.CounterVec   // model, kind
	llmDuration      *prometheus.HistogramVec // model
	summarizerTokens *prometheus.CounterVec   // model, kind
	triggerLag       prometheus.Histogram
	triggerRequests  *prometheus.CounterVec // trigger, result
	usageIgnored     prometheus.Counter
	syncsEveryWrite  prometheus.Gauge

	// The per-tenant families (tenants.go), registered with the first tenant.
	tenantOnce sync.Once
	tenants    *tenantFamilies
	log        zerolog.Logger
}

// triggerKinds are the values of the trigger label.
var triggerKinds = []string{schemas.TriggerBudget, schemas.TriggerStructural, schemas.TriggerTemporal, schemas.TriggerManual}

// NewMetrics registers every metric on a registry of their own; version is the
// compactor_build_info label.
func NewMetrics(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), log: zerolog.Nop()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	tokenBuckets := prometheus.ExponentialBuckets(1000, 2, 12) // 1k to 2M tokens
	m.compactions = counter("compactor_compactions_total",
		"Deliveries of compaction requests handled by this process's workers, by the request's trigger and how the delivery ended.",
		"trigger", "outcome")
	m.duration = histogram("compactor_compaction_duration_seconds",
		"Time from a worker taking a request to its outcome (load, summarize, write), by trigger and outcome.",
		[]float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}, "trigger", "outcome")
	m.tokensBefore = histogram("compactor_compaction_tokens_before",
		"Context size in tokens before each completed compaction.", tokenBuckets, "trigger")
	m.tokensAfter = histogram("compactor_compaction_tokens_after",
		"Context size in tokens after each completed compaction (pinned + summary + tail).", tokenBuckets, "trigger")
	m.fallbacks = counter("compactor_fallback_summaries_total",
		"Completed compactions that wrote the deterministic fallback summary because the summarizer failed.", "trigger")
	m.repairs = counter("compactor_fallback_repairs_total",
		"Repairs of fallback summaries tried, by outcome (repaired: the LLM summarized the raw messages again; failed: tried again later; gap: messages left CHAT, the fallback stays).",
		"outcome")
	m.llmRequests = counter("compactor_llm_requests_total",
		"Chat completion requests sent to the summarizer's LLM, by configured model.", "model")
	m.llmErrors = counter("compactor_llm_errors_total",
		"Failed LLM requests, by configured model and kind of failure.", "model", "kind")
	m.llmDuration = histogram("compactor_llm_request_duration_seconds",
		"Duration of LLM requests, failed ones included, by configured model.",
		[]float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}, "model")
	m.summarizerTokens = counter("compactor_summarizer_tokens_total",
		"Tokens the LLM reported for summaries, by configured model and kind (prompt, completion, or cached: the part of prompt the endpoint served from its prompt cache).", "model", "kind")
	m.triggerLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "compactor_trigger_lag_seconds",
		Help:    "Age of each chat message when the trigger counted it (time since JetStream stored it).",
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800}})
	m.reg.MustRegister(m.triggerLag)
	m.usageIgnored = prometheus.NewCounter(prometheus.CounterOpts{Name: "compactor_trigger_usage_ignored_total",
		Help: "Replies whose usage (prompt_tokens + completion_tokens) was under half the trigger's estimate of their context, and was ignored (docs/wire.md says which fields to send)."})
	m.reg.MustRegister(m.usageIgnored)
	m.triggerRequests = counter("compactor_trigger_requests_total",
		"Compaction requests the trigger made, by trigger kind and what the work queue said (queued, pending: one already waits, error).",
		"trigger", "result")

	// Every series of a closed label set exists from the start at 0, so rate() and
	// alerts see the first increment.
	for _, k := range append(triggerKinds, summarizer.TriggerUnknown) {
		for _, o := range summarizer.Outcomes {
			m.compactions.WithLabelValues(k, string(o))
		}
	}
	for _, o := range summarizer.RepairOutcomes {
		m.repairs.WithLabelValues(string(o))
	}
	for _, k := range triggerKinds {
		m.fallbacks.WithLabelValues(k)
		for _, r := range []triggers.RequestResult{triggers.RequestQueued, triggers.RequestPending, triggers.RequestError} {
			m.triggerRequests.WithLabelValues(k, string(r))
		}
	}

	m.syncsEveryWrite = prometheus.NewGauge(prometheus.GaugeOpts{Name: "compactor_nats_syncs_every_write",
		Help: "1 when every NATS server this process uses flushes each JetStream write to disk before acknowledging it (sync_interval: always), 0 when one does not (an OS crash or power loss loses what it acknowledged since its last flush), -1 while unknown (not read yet, or this process cannot read it)."})
	m.syncsEveryWrite.Set(-1)
	m.reg.MustRegister(m.syncsEveryWrite)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_build_info",
		Help: "Always 1; the version label is the module version this binary was built from.", ConstLabels: prometheus.Labels{"version": version}},
		func() float64 { return 1 }))
	return m
}

// JobDone is summarizer.Observer.
func (m *Metrics) JobDone(r summarizer.JobReport) {
	outcome := string(r.Outcome)
	m.compactions.WithLabelValues(r.Trigger, outcome).Inc()
	m.duration.WithLabelValues(r.Trigger, outcome).Observe(r.Duration.Seconds())
	if r.Outcome == summarizer.OutcomeCompleted {
		m.tokensBefore.WithLabelValues(r.Trigger).Observe(float64(r.TokensBefore))
		m.tokensAfter.WithLabelValues(r.Trigger).Observe(float64(r.TokensAfter))
		if r.Fallback {
			m.fallbacks.WithLabelValues(r.Trigger).Inc()
		}
	}
	if r.Repair != "" {
		m.repairs.WithLabelValues(string(r.Repair)).Inc()
	}
}

// Counted is triggers.Observer.
func (m *Metrics) Counted(age time.Duration) { m.triggerLag.Observe(age.Seconds()) }

// Requested is triggers.Observer.
func (m *Metrics) Requested(kind string, r triggers.RequestResult) {
	m.triggerRequests.WithLabelValues(kind, string(r)).Inc()
}

// UsageIgnored is triggers.UsageObserver.
func (m *Metrics) UsageIgnored() { m.usageIgnored.Inc() }

// llmModel makes the series of a model's LLM metrics exist at 0.
func (m *Metrics) llmModel(model string) {
	m.llmRequests.WithLabelValues(model)
	for _, k := range llm.ErrorKinds {
		m.llmErrors.WithLabelValues(model, k)
	}
	m.summarizerTokens.WithLabelValues(model, "prompt")
	m.summarizerTokens.WithLabelValues(model, "completion")
	m.summarizerTokens.WithLabelValues(model, "cached")
}

// llmCall records one LLM request.
func (m *Metrics) llmCall(model string, took time.Duration, usage *schemas.Usage, err error) {
	m.llmRequests.WithLabelValues(model).Inc()
	m.llmDuration.WithLabelValues(model).Observe(took.Seconds())
	if err != nil {
		m.llmErrors.WithLabelValues(model, llm.ErrorKind(err)).Inc()
		return
	}
	if usage != nil {
		m.summarizerTokens.WithLabelValues(model, "prompt").Add(float64(max(usage.PromptTokens, 0)))
		m.summarizerTokens.WithLabelValues(model, "completion").Add(float64(max(usage.CompletionTokens, 0)))
		m.summarizerTokens.WithLabelValues(model, "cached").Add(float64(max(usage.CachedTokens, 0)))
	}
}

// SyncsEveryWrite sets compactor_nats_syncs_every_write: known says the servers'
// setting was read, syncs whether each syncs every write.
func (m *Metrics) SyncsEveryWrite(known, syncs bool) {
	switch {
	case !known:
		m.syncsEveryWrite.Set(-1)
	case syncs:
		m.syncsEveryWrite.Set(1)
	default:
		m.syncsEveryWrite.Set(0)
	}
}

// Connection exports the state of the process's NATS connection.
func (m *Metrics) Connection(nc *nats.Conn) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_nats_connected",
			Help: "1 while the process's NATS connection is connected, 0 while it reconnects."},
			func() float64 {
				if nc.IsConnected() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compactor_nats_reconnects_total",
			Help: "Times the process's NATS connection reconnected."},
			func() float64 { return float64(nc.Stats().Reconnects) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compactor_nats_permission_refusals_total",
			Help: "Publishes and subscriptions the server refused this process for want of permission (each is logged with its subject)."},
			func() float64 { return float64(jetstream.Refusals(nc)) }),
	)
}

// PolicyCacheFigures is what a process's policy cache did: the lookups it answered
// from memory (Hits) and from the stream (Misses), the conversations it holds, and
// whether the subscription that keeps it current is live.
type PolicyCacheFigures struct {
	// Hits are answers from memory, Absent among them those of a conversation known to
	// have no policy; Misses reads of the policy stream.
	Hits, Misses, Absent uint64
	Entries              int
	Live                 bool
}

// PolicyCache exports the process's policy cache, as figures reads it.
func (m *Metrics) PolicyCache(figures func() PolicyCacheFigures) {
	lookups := func(result string, of func(PolicyCacheFigures) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compactor_policy_cache_lookups_total",
			Help:        "Conversation settings this process looked up, by where the answer came from: hit (its cached entry), no_policy (a conversation the cache knows has no policy: the defaults, no read, no entry) or miss (a read of the policy stream).",
			ConstLabels: prometheus.Labels{"result": result}},
			func() float64 { return float64(of(figures())) })
	}
	m.reg.MustRegister(
		lookups("hit", func(f PolicyCacheFigures) uint64 { return f.Hits - f.Absent }),
		lookups("no_policy", func(f PolicyCacheFigures) uint64 { return f.Absent }),
		lookups("miss", func(f PolicyCacheFigures) uint64 { return f.Misses }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_policy_cache_entries",
			Help: "Conversations whose settings this process's policy cache holds."},
			func() float64 { return float64(figures().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_policy_watch_live",
			Help: "1 while this process hears policy changes (its cache is used), 0 while every lookup reads the stream."},
			func() float64 {
				if figures().Live {
					return 1
				}
				return 0
			}),
	)
}

// Pool exports the workers' saturation.
func (m *Metrics) Pool(p *summarizer.Pool) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_workers",
			Help: "Requests this process's summarizer pool works on at most at once (COMPACTOR_WORKERS)."},
			func() float64 { return float64(p.Workers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_workers_busy",
			Help: "Requests this process's summarizer pool is working on now."},
			func() float64 { return float64(p.Busy()) }),
	)
}

// TriggerRole is what the metrics read of the trigger (a Trigger or Partitions).
type TriggerRole interface {
	Tracked() int
	Partitions() []jetstream.Partition
}

// Trigger exports the trigger's state.
func (m *Metrics) Trigger(t TriggerRole) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compactor_trigger_conversations",
		Help: "Conversations the trigger of this process holds state for (evicted when idle)."},
		func() float64 { return float64(t.Tracked()) }))
}

// Backlog exports the consumers' backlogs: the work queue's, and when parts is not nil
// that of the trigger consumers of the partitions parts returns.
func (m *Metrics) Backlog(st *jetstream.Store, parts func() []jetstream.Partition, log zerolog.Logger) {
	m.reg.MustRegister(newBacklogCollector(st, parts, log))
}

// backlogCollector reads the consumers' backlogs when Prometheus scrapes, each read
// bounded by BacklogTimeout and its answer kept for backlogTTL, so a scrape never
// waits long and many scrapers do not each ask the server. A backlog that cannot be
// read is left out of the scrape (and counted), never reported as a stale number.
type backlogCollector struct {
	st    *jetstream.Store
	parts func() []jetstream.Partition
	log   zerolog.Logger

	requests, trigger *prometheus.Desc
	errors            *prometheus.CounterVec

	cache scrapeCache
}

// scrapeCache keeps what a collector read from JetStream for backlogTTL, so many
// scrapers do not each ask the server, and bounds each read by BacklogTimeout.
type scrapeCache struct {
	mu     sync.Mutex
	readAt time.Time
	cached []prometheus.Metric
}

// invalidate makes the next get read again.
func (sc *scrapeCache) invalidate() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.readAt = time.Time{}
}

// get returns the metrics read less than backlogTTL ago, or those read now.
func (sc *scrapeCache) get(read func(ctx context.Context) []prometheus.Metric) []prometheus.Metric {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if time.Since(sc.readAt) < backlogTTL {
		return sc.cached
	}
	ctx, cancel := context.WithTimeout(context.Background(), BacklogTimeout)
	defer cancel()
	sc.cached, sc.readAt = read(ctx), time.Now()
	return sc.cached
}

const (
	// BacklogTimeout bounds one read of a backlog for a scrape.
	BacklogTimeout = 2 * time.Second
	backlogTTL     = 2 * time.Second
)

func newBacklogCollector(st *jetstream.Store, parts func() []jetstream.Partition, log zerolog.Logger) *backlogCollector {
	c := &backlogCollector{st: st, parts: parts, log: log,
		requests: prometheus.NewDesc("compactor_request_backlog",
			"Compaction requests in the work queue: waiting for a worker, or in progress (held by a worker, not acknowledged yet). The same for every process: take max, not sum.",
			[]string{"state"}, nil),
		trigger: prometheus.NewDesc("compactor_trigger_backlog",
			"Chat messages the trigger consumers of this process's partitions have not counted: waiting, or in progress. Sum over the processes (with one partition, every trigger process reports the same consumer: take max).",
			[]string{"state"}, nil),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "compactor_backlog_read_errors_total",
			Help: "Scrapes whose backlog could not be read from JetStream in time (the gauge is then missing from the scrape)."},
			[]string{"consumer"}),
	}
	c.errors.WithLabelValues("requests")
	if parts != nil {
		c.errors.WithLabelValues("trigger")
	}
	return c
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.trigger
	c.errors.Describe(ch)
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.cache.get(c.read) {
		ch <- m
	}
	c.errors.Collect(ch)
}

func (c *backlogCollector) read(ctx context.Context) []prometheus.Metric {
	var out []prometheus.Metric
	add := func(desc *prometheus.Desc, name string, b jetstream.Backlog, err error) {
		if err != nil {
			c.errors.WithLabelValues(name).Inc()
			c.log.Debug().Err(err).Str("consumer", name).Msg("read backlog for metrics")
			return
		}
		out = append(out,
			prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(b.Waiting), "waiting"),
			prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(b.InProgress), "in_progress"))
	}
	var (
		wg       sync.WaitGroup
		req, trg jetstream.Backlog
		rerr     error
		terr     error
	)
	wg.Go(func() { req, rerr = c.st.Queue().Backlog(ctx) })
	if c.parts != nil {
		wg.Go(func() { trg, terr = c.st.Chat().Backlog(ctx, c.parts()) })
	}
	wg.Wait()
	add(c.requests, "requests", req, rerr)
	if c.parts != nil {
		add(c.trigger, "trigger", trg, terr)
	}
	return out
}

// Registry is the registry the metrics are on (served on /metrics).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }
