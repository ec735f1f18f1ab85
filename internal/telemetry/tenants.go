package telemetry

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/triggers"
)

// Per-tenant metrics (docs/tenants.md): the tenant label takes only the names of the
// tenants file, added when a tenant starts and deleted when it is removed, never a
// value read from traffic. The process-wide families count every tenant's work too.

// tenantFamilies are the per-tenant families, registered with the first tenant.
type tenantFamilies struct {
	compactions *prometheus.CounterVec // tenant, outcome
	tokens      *prometheus.CounterVec // tenant
	declines    *prometheus.CounterVec // tenant, quota
	gauges      *tenantCollector
}

// QuotaNames are the values of the quota label.
var QuotaNames = []string{"conversations", "summarizer_tokens_per_day"}

func (m *Metrics) tenantFamilies() *tenantFamilies {
	m.tenantOnce.Do(func() {
		f := &tenantFamilies{
			compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "compactor_tenant_compactions_total",
				Help: "Deliveries of compaction requests this process's workers handled, by tenant and how the delivery ended."},
				[]string{"tenant", "outcome"}),
			tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "compactor_tenant_summarizer_tokens_total",
				Help: "Summarizer tokens (prompt and completion) this process's workers spent on a tenant's compactions, as the endpoint reported them (the input's estimate when it reported none)."},
				[]string{"tenant"}),
			declines: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "compactor_tenant_quota_declines_total",
				Help: "Compactions this process's workers declined because the tenant was over a quota, by tenant and quota."},
				[]string{"tenant", "quota"}),
			gauges: newTenantCollector(m.log),
		}
		m.reg.MustRegister(f.compactions, f.tokens, f.declines, f.gauges)
		m.tenants = f
	})
	return m.tenants
}

// Tenant is one tenant's metrics: the observer of its trigger and workers (each event
// counted in the process-wide families and in the tenant's), its quota's hooks, and
// gauges of its streams read at scrape time.
type Tenant struct {
	m    *Metrics
	f    *tenantFamilies
	name string
}

// Tenant starts tenant name's series (at 0); Watch adds the gauges of its streams, and
// Remove ends them all.
func (m *Metrics) Tenant(name string) *Tenant {
	f := m.tenantFamilies()
	for _, o := range summarizer.Outcomes {
		f.compactions.WithLabelValues(name, string(o))
	}
	f.tokens.WithLabelValues(name)
	for _, q := range QuotaNames {
		f.declines.WithLabelValues(name, q)
	}
	return &Tenant{m: m, f: f, name: name}
}

// Watch reads the tenant's gauges from st (its store, once its streams are open).
func (t *Tenant) Watch(st *jetstream.Store) { t.f.gauges.add(t.name, st) }

// Remove deletes the tenant's series: a tenant removed from the file is not reported.
func (t *Tenant) Remove() {
	for _, v := range []*prometheus.CounterVec{t.f.compactions, t.f.tokens, t.f.declines} {
		v.DeletePartialMatch(prometheus.Labels{"tenant": t.name})
	}
	t.f.gauges.remove(t.name)
}

// JobDone is summarizer.Observer.
func (t *Tenant) JobDone(r summarizer.JobReport) {
	t.m.JobDone(r)
	t.f.compactions.WithLabelValues(t.name, string(r.Outcome)).Inc()
}

// Counted is triggers.Observer.
func (t *Tenant) Counted(age time.Duration) { t.m.Counted(age) }

// Requested is triggers.Observer.
func (t *Tenant) Requested(kind string, r triggers.RequestResult) { t.m.Requested(kind, r) }

// UsageIgnored is triggers.UsageObserver.
func (t *Tenant) UsageIgnored() { t.m.UsageIgnored() }

// Tokens counts summarizer tokens spent on the tenant's compactions.
func (t *Tenant) Tokens(n int64) {
	if n > 0 {
		t.f.tokens.WithLabelValues(t.name).Add(float64(n))
	}
}

// Declined counts a compaction the tenant's quota (a QuotaNames value) declined.
func (t *Tenant) Declined(quota string) {
	if slices.Contains(QuotaNames, quota) {
		t.f.declines.WithLabelValues(t.name, quota).Inc()
	}
}

// tenantCollector reads each running tenant's streams when Prometheus scrapes (cached
// for backlogTTL, each read bounded): conversations held, bytes stored, and the work
// queue's backlog. A tenant whose figures cannot be read is left out of the scrape.
type tenantCollector struct {
	log                          zerolog.Logger
	conversations, bytes, queued *prometheus.Desc

	mu     sync.Mutex
	stores map[string]*jetstream.Store
	cache  scrapeCache
}

func newTenantCollector(log zerolog.Logger) *tenantCollector {
	return &tenantCollector{log: log, stores: map[string]*jetstream.Store{},
		conversations: prometheus.NewDesc("compactor_tenant_conversations",
			"Conversations a tenant's chat stream holds, each with its proxy branches counted as one, as the conversations quota counts them. The same in every process: take max.", []string{"tenant"}, nil),
		bytes: prometheus.NewDesc("compactor_tenant_stored_bytes",
			"Bytes a tenant's conversations store: its chat stream and its objects bucket (the stored_bytes quota bounds each). The same in every process: take max.", []string{"tenant"}, nil),
		queued: prometheus.NewDesc("compactor_tenant_request_backlog",
			"Compaction requests in a tenant's work queue, waiting or in progress. The same in every process: take max.", []string{"tenant"}, nil),
	}
}

func (c *tenantCollector) add(name string, st *jetstream.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores[name] = st
	c.cache.invalidate()
}

func (c *tenantCollector) remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stores, name)
	c.cache.invalidate()
}

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.conversations
	ch <- c.bytes
	ch <- c.queued
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.cache.get(c.read) {
		ch <- m
	}
}

func (c *tenantCollector) read(ctx context.Context) []prometheus.Metric {
	c.mu.Lock()
	stores := make(map[string]*jetstream.Store, len(c.stores))
	for n, st := range c.stores {
		stores[n] = st
	}
	c.mu.Unlock()
	var (
		mu  sync.Mutex
		out []prometheus.Metric
		wg  sync.WaitGroup
	)
	for name, st := range stores {
		wg.Go(func() {
			state, err := st.ChatState(ctx)
			if err != nil {
				c.log.Debug().Err(err).Str("tenant", name).Msg("read a tenant's figures for metrics")
				return
			}
			b, err := st.Queue().Backlog(ctx)
			mu.Lock()
			defer mu.Unlock()
			out = append(out,
				prometheus.MustNewConstMetric(c.conversations, prometheus.GaugeValue, float64(state.Conversations), name),
				prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(state.Bytes), name))
			if err == nil {
				out = append(out, prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(b.Waiting+b.InProgress), name))
			}
		})
	}
	wg.Wait()
	return out
}
