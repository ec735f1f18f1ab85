package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/pipeline"
)

// publishRounds is how many times each side of the publish comparison runs,
// alternately; the median of each is reported.
const publishRounds = 3

// publishAlone compares the pipeline client's publishing with raw asynchronous
// publishing, each with nothing else running (no trigger, no workers, no consumer
// taking messages: each stream has one idle durable consumer, as CHAT has the
// trigger's), the same payloads and the same window in flight; the rounds alternate so
// the two see the same machine. It returns the medians, messages/s until every
// publish is acknowledged.
func publishAlone(ctx context.Context, url string, serverCPU func() time.Duration, load []published) (PublishCPU, error) {
	var raws, clients []time.Duration
	var rawCPU, clientCPU, rawServer, clientServer []float64
	// round runs one side and reads the CPU of this process (the publisher: nothing
	// else runs in it meanwhile) and of the server around it, in µs per message.
	round := func(side func(context.Context, string, []published, *cpuMeter) (time.Duration, error), took *[]time.Duration, own, server *[]float64) error {
		m := &cpuMeter{server: serverCPU}
		d, err := side(ctx, url, load, m)
		if err != nil {
			return err
		}
		c0, c1, s0, s1 := m.c0, m.c1, m.s0, m.s1
		*took = append(*took, d)
		if c0 >= 0 && c1 >= 0 {
			*own = append(*own, float64((c1-c0).Nanoseconds())/1e3/float64(len(load)))
		}
		if s0 >= 0 && s1 >= 0 {
			*server = append(*server, float64((s1-s0).Nanoseconds())/1e3/float64(len(load)))
		}
		return nil
	}
	for range publishRounds {
		if err := round(rawPublishOnly, &raws, &rawCPU, &rawServer); err != nil {
			return PublishCPU{}, fmt.Errorf("raw: %w", err)
		}
		if err := round(clientPublishOnly, &clients, &clientCPU, &clientServer); err != nil {
			return PublishCPU{}, fmt.Errorf("client: %w", err)
		}
	}
	n := float64(len(load))
	pc := PublishCPU{RawMsgsPerSec: n / pct(raws, 50).Seconds(), ClientMsgsPerSec: n / pct(clients, 50).Seconds(),
		RawMicros: medianOf(rawCPU), ClientMicros: medianOf(clientCPU), RawServerMicros: medianOf(rawServer), ClientServerMicros: medianOf(clientServer)}
	if pc.RawMicros > 0 && pc.ClientMicros > 0 {
		pc.Ratio, pc.OverheadMicros = pc.ClientMicros/pc.RawMicros, pc.ClientMicros-pc.RawMicros
	}
	return pc, nil
}

// PublishCPU is publishing alone, raw and through the client: the rates and, each
// read from its own process, the CPU per message of the publisher and of the server
// storing what it published (the median of the rounds; 0 when not read). Ratio is
// the client's CPU per message ÷ raw's, OverheadMicros their difference.
type PublishCPU struct {
	RawMsgsPerSec      float64 `json:"raw_msgs_per_sec"`
	ClientMsgsPerSec   float64 `json:"client_msgs_per_sec"`
	RawMicros          float64 `json:"raw_cpu_us_per_msg"`
	ClientMicros       float64 `json:"client_cpu_us_per_msg"`
	RawServerMicros    float64 `json:"raw_server_us_per_msg"`
	ClientServerMicros float64 `json:"client_server_us_per_msg"`
	Ratio              float64 `json:"publish_cpu_ratio"`
	OverheadMicros     float64 `json:"publish_overhead_us_per_msg"`
}

// medianOf is the median of xs in any order (0 for none).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return median(s)
}

// rawPublishOnly publishes load asynchronously to a plain stream shaped like CHAT and
// times it until every publish is acknowledged.
func rawPublishOnly(ctx context.Context, url string, load []published, m *cpuMeter) (time.Duration, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	js, err := natsjs.New(r.nc, natsjs.WithPublishAsyncMaxPending(asyncWindow))
	if err != nil {
		return 0, err
	}
	s, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "RAW_" + r.ns, Subjects: []string{r.ns + ".raw.*.msg"},
		Storage: natsjs.FileStorage, AllowDirect: true, Duplicates: 2 * time.Minute})
	if err != nil {
		return 0, err
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "idle", AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
		return 0, err
	}
	m.start()
	start := time.Now()
	for _, p := range load {
		if _, err := js.PublishAsync(fmt.Sprintf("%s.raw.c%d.msg", r.ns, p.conv), p.msg.Payload, natsjs.WithStallWait(rawStallWait)); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, errors.New("publishes not acked within 5m")
	}
	took := time.Since(start)
	m.stop()
	return took, nil
}

// clientPublishOnly publishes load through the pipeline client (PublishBatch) into a
// fresh namespace where nothing runs, and times it until every publish is
// acknowledged.
func clientPublishOnly(ctx context.Context, url string, load []published, m *cpuMeter) (time.Duration, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	client := r.client()
	m.start()
	start := time.Now()
	if err := publishInOrder(ctx, client, load); err != nil {
		return 0, err
	}
	took := time.Since(start)
	m.stop()
	return took, nil
}

// cpuMeter reads this process's CPU and the server's (-1: unread) at the start and
// the end of what is measured.
type cpuMeter struct {
	server         func() time.Duration
	c0, c1, s0, s1 time.Duration
}

// start collects the garbage this process made before, so that its collection is not
// counted in what is measured (the bench's heap holds the corpus and every report).
func (m *cpuMeter) start() {
	runtime.GC()
	m.c0, m.s0 = cpuTime(), m.server()
}
func (m *cpuMeter) stop() { m.c1, m.s1 = cpuTime(), m.server() }

// publishInOrder publishes load through client's PublishBatch, with at most
// asyncWindow publishes unacknowledged, until every one is acknowledged or one fails.
// Its conversations' names are made inside the timed part, as the raw baseline makes
// its subjects.
func publishInOrder(ctx context.Context, client *pipeline.Client, load []published) error {
	msgs := make([]pipeline.BatchMsg, len(load))
	for i, p := range load {
		msgs[i] = pipeline.BatchMsg{Conv: "c" + strconv.Itoa(p.conv), Message: p.msg.Message}
	}
	_, err := client.PublishBatch(ctx, msgs, pipeline.BatchOptions{Window: asyncWindow})
	return err
}
