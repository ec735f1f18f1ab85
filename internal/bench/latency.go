package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// LatencyReport compares the trigger's latency (a message that puts a conversation
// over its threshold, until its compaction request is on the work queue) with a bare
// JetStream publish until a bare consumer's delivery (one hop: no reply, no second
// publish; the trigger's path has a second hop, its request), both under background load at half the pipeline's
// maximum ingest rate.
type LatencyReport struct {
	LoadMsgsPerSec float64 `json:"load_msgs_per_sec"`
	Probes         int     `json:"probes"`
	TriggerP50Ms   float64 `json:"trigger_p50_ms"`
	TriggerP90Ms   float64 `json:"trigger_p90_ms"`
	TriggerP99Ms   float64 `json:"trigger_p99_ms"`
	TriggerMaxMs   float64 `json:"trigger_max_ms"`
	RawP50Ms       float64 `json:"raw_p50_ms"`
	RawP90Ms       float64 `json:"raw_p90_ms"`
	RawP99Ms       float64 `json:"raw_p99_ms"`
	P50Ratio       float64 `json:"p50_ratio"`
	P99Ratio       float64 `json:"p99_ratio"`
}

// latencyConvs is how many conversations the background load of the latency
// measurement is spread over.
const latencyConvs = 500

// probeEvery spaces the probes.
const probeEvery = 25 * time.Millisecond

func measureLatency(ctx context.Context, url string, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
	lr := &rep.Latency
	rate := 2000.0 // without an ingest figure of this run
	if len(rep.Ingest.Rows) > 0 {
		rate = rep.Ingest.Rows[0].MsgsPerSec / 2
	}
	lr.LoadMsgsPerSec, lr.Probes = rate, sz.latencyProbes
	load := c.interleaved(latencyConvs+int(rate*probeEvery.Seconds()*float64(sz.latencyProbes))+1, latencyConvs)
	progress("latency: bare publish until a consumer's delivery (one hop), %d probes under %.0f msgs/s", sz.latencyProbes, rate)
	raw, err := rawLatency(ctx, url, load, rate, sz.latencyProbes)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	progress("latency: trigger, %d probes under %.0f msgs/s", sz.latencyProbes, rate)
	trig, err := triggerLatency(ctx, url, load, rate, sz.latencyProbes)
	if err != nil {
		return fmt.Errorf("trigger: %w", err)
	}
	lr.RawP50Ms, lr.RawP90Ms, lr.RawP99Ms = ms(pct(raw, 50)), ms(pct(raw, 90)), ms(pct(raw, 99))
	lr.TriggerP50Ms, lr.TriggerP90Ms, lr.TriggerP99Ms = ms(pct(trig, 50)), ms(pct(trig, 90)), ms(pct(trig, 99))
	lr.TriggerMaxMs = ms(pct(trig, 100))
	lr.P50Ratio, lr.P99Ratio = lr.TriggerP50Ms/lr.RawP50Ms, lr.TriggerP99Ms/lr.RawP99Ms
	progress("latency: trigger p50 %.2f ms p90 %.2f ms p99 %.2f ms max %.2f ms; raw p50 %.2f ms p90 %.2f ms p99 %.2f ms; p99 ratio %.2f",
		lr.TriggerP50Ms, lr.TriggerP90Ms, lr.TriggerP99Ms, lr.TriggerMaxMs, lr.RawP50Ms, lr.RawP90Ms, lr.RawP99Ms, lr.P99Ratio)
	return nil
}

// paced calls bg for the background messages due at rate (msgs/s) and probe every
// probeEvery, probes times.
func paced(ctx context.Context, rate float64, probes int, bg func(i int) error, probe func(i int) error) error {
	start := time.Now()
	sent := 0
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for i := range probes {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		due := int(time.Since(start).Seconds() * rate)
		for ; sent < due; sent++ {
			if err := bg(sent); err != nil {
				return err
			}
		}
		if err := probe(i); err != nil {
			return err
		}
	}
	return nil
}

// probeText is a user message of about n tokens (chars/4).
func probeText(n int, tag string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(tag + " " + strings.Repeat("please review the logs of the build again ", n*4/42))}
}

func rawLatency(ctx context.Context, url string, load []published, rate float64, probes int) ([]time.Duration, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return nil, err
	}
	defer r.close()
	js, err := natsjs.New(r.nc, natsjs.WithPublishAsyncMaxPending(asyncWindow))
	if err != nil {
		return nil, err
	}
	s, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "RAW_" + r.ns, Subjects: []string{r.ns + ".raw.*.msg"},
		Storage: natsjs.FileStorage, AllowDirect: true, Duplicates: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "bare", AckPolicy: natsjs.AckExplicitPolicy, MaxAckPending: 10000})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	got := make(chan struct{}, probes)
	cc, err := cons.Consume(func(m natsjs.Msg) {
		if t0 := m.Headers().Get("Bench-Sent"); t0 != "" {
			ns, _ := strconv.ParseInt(t0, 10, 64)
			mu.Lock()
			lat = append(lat, time.Since(time.Unix(0, ns)))
			mu.Unlock()
			got <- struct{}{}
		}
		_ = m.Ack()
	})
	if err != nil {
		return nil, err
	}
	defer cc.Stop()
	payload := probeText(1600, "probe")
	data, _ := payload.Encode()
	err = paced(ctx, rate, probes, func(i int) error {
		p := load[(latencyConvs+i)%len(load)]
		_, err := js.PublishAsync(fmt.Sprintf("%s.raw.c%d.msg", r.ns, p.conv), p.msg.Payload, natsjs.WithStallWait(rawStallWait))
		return err
	}, func(i int) error {
		m := nats.NewMsg(fmt.Sprintf("%s.raw.probe%d.msg", r.ns, i))
		m.Data = data
		m.Header.Set("Bench-Sent", strconv.FormatInt(time.Now().UnixNano(), 10))
		_, err := js.PublishMsgAsync(m, natsjs.WithStallWait(rawStallWait))
		return err
	})
	if err != nil {
		return nil, err
	}
	for range probes {
		select {
		case <-got:
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("%d probes not consumed within 1m", probes-len(lat))
		}
	}
	return lat, nil
}

// triggerLatency measures the trigger's latency: from a probe message that puts a
// conversation over its threshold to its compaction request, under background load
// at rate.
func triggerLatency(ctx context.Context, url string, load []published, rate float64, probes int) ([]time.Duration, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return nil, err
	}
	defer r.close()
	s := settings(benchWindow)
	_, stop, err := r.startTrigger(ctx, s)
	if err != nil {
		return nil, err
	}
	defer stop()
	client := r.client()
	cons, err := warmProbes(ctx, r, client, probes)
	if err != nil {
		return nil, err
	}
	pt := &probeTimes{sent: make(map[string]time.Time, probes), got: make(chan struct{}, probes)}
	sub, err := r.nc.Subscribe(r.cfg.RequestPrefix+".*", func(m *nats.Msg) {
		pt.requested(strings.TrimPrefix(m.Subject, r.cfg.RequestPrefix+"."))
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := trackBackground(ctx, client, cons, load); err != nil {
		return nil, err
	}
	probe := probeText(int(0.1*benchWindow), "probe")
	err = paced(ctx, rate, probes, func(i int) error {
		p := load[(latencyConvs+i)%len(load)]
		_, err := client.PublishAsync(ctx, fmt.Sprintf("bg%d", p.conv), p.msg.Message)
		return err
	}, func(i int) error {
		conv := fmt.Sprintf("probe%d", i)
		pt.sending(conv)
		_, err := client.PublishAsync(ctx, conv, probe)
		return err
	})
	if err != nil {
		return nil, err
	}
	return pt.wait(probes)
}

// warmProbes starts each probe conversation at 70% of the window and waits until the
// trigger counted them; it returns the trigger's consumer.
func warmProbes(ctx context.Context, r *rig, client *pipeline.Client, probes int) (natsjs.Consumer, error) {
	// Each probe conversation starts at 70% of the window, tracked by the trigger; its
	// probe adds 10% and crosses the 75% threshold.
	warm := probeText(int(0.7*benchWindow), "warm")
	for i := range probes {
		if _, err := client.PublishAsync(ctx, fmt.Sprintf("probe%d", i), warm); err != nil {
			return nil, err
		}
	}
	select {
	case <-client.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("warm-up publishes not acked within 1m")
	}
	cons, err := r.js.Consumer(ctx, r.cfg.ChatStream, r.cfg.TriggerConsumer)
	if err != nil {
		return nil, err
	}
	if err := wait(ctx, 2*time.Minute, "the trigger to count the warm-up messages", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= uint64(probes)
	}); err != nil {
		return nil, err
	}
	return cons, nil
}

// trackBackground publishes the first message of each background conversation and
// waits until the trigger (its consumer cons) counted them all.
func trackBackground(ctx context.Context, client *pipeline.Client, cons natsjs.Consumer, load []published) error {
	// The background conversations are tracked before the probes start, as in a
	// pipeline that has been running: taking on new conversations is measured on its
	// own (heap), and here it would only add its own queue.
	for _, p := range load[:min(latencyConvs, len(load))] {
		if _, err := client.PublishAsync(ctx, fmt.Sprintf("bg%d", p.conv), p.msg.Message); err != nil {
			return err
		}
	}
	select {
	case <-client.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("warm-up publishes not acked within 1m")
	}
	return wait(ctx, 2*time.Minute, "the trigger to count the background conversations' first messages", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	})
}

// probeTimes times the probes: from when each is sent until its conversation's
// compaction request.
type probeTimes struct {
	mu   sync.Mutex
	sent map[string]time.Time
	lat  []time.Duration
	got  chan struct{} // one per probe requested
}

// sending notes that conv's probe is sent now.
func (pt *probeTimes) sending(conv string) {
	pt.mu.Lock()
	pt.sent[conv] = time.Now()
	pt.mu.Unlock()
}

// requested notes the compaction request of conv, timing its probe.
func (pt *probeTimes) requested(conv string) {
	pt.mu.Lock()
	t0, ok := pt.sent[conv]
	delete(pt.sent, conv)
	if ok {
		pt.lat = append(pt.lat, time.Since(t0))
	}
	pt.mu.Unlock()
	if ok {
		pt.got <- struct{}{}
	}
}

// wait returns the latencies once the probes were all requested, or an error when
// one was not within a minute.
func (pt *probeTimes) wait(probes int) ([]time.Duration, error) {
	for range probes {
		select {
		case <-pt.got:
		case <-time.After(time.Minute):
			pt.mu.Lock()
			defer pt.mu.Unlock()
			return nil, fmt.Errorf("%d probes not requested within 1m", probes-len(pt.lat))
		}
	}
	return pt.lat, nil
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
