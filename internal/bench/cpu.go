package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
)

// CPUReport is the CPU the trigger and the nats-server spend per message, each read
// from its own process: the machine-independent figure of ingest.
type CPUReport struct {
	// Messages is how many messages were stored, then drained by the trigger.
	Messages int `json:"messages"`
	// TriggerProcess says where the trigger ran: its own process (the compactor binary's
	// bench-trigger command, nothing else in it) or, without a binary to start, the
	// bench's process (then its CPU includes the bench's polling).
	TriggerProcess string `json:"trigger_process"`
	// TriggerCPUSeconds is the trigger process's CPU (user and system) from the moment it
	// was told to start until it had acknowledged every message.
	TriggerCPUSeconds float64 `json:"trigger_cpu_s"`
	// ServerStoreCPUSeconds is the nats-server process's CPU while the messages were
	// published and stored (asynchronous publishes, nothing consuming); ServerDrainCPUSeconds
	// its CPU while the trigger drained them (delivery, acknowledgements, the trigger's
	// reads and requests).
	ServerStoreCPUSeconds float64 `json:"server_store_cpu_s"`
	ServerDrainCPUSeconds float64 `json:"server_drain_cpu_s"`
	// TriggerPerMillion and ServerPerMillion are CPU seconds per million messages; the
	// server's is storing plus serving the trigger. Ratio is trigger ÷ server.
	TriggerPerMillion float64 `json:"trigger_cpu_s_per_million"`
	ServerPerMillion  float64 `json:"server_cpu_s_per_million"`
	Ratio             float64 `json:"trigger_server_cpu_ratio"`
	// DrainMsgsPerSec is the trigger's drain rate in this measurement.
	DrainMsgsPerSec float64 `json:"drain_msgs_per_sec"`
	// BareCPUSeconds is the CPU of the baseline: a bare nats.go pull consumer in the
	// bench's process (nothing else running in it) that drained the same messages after
	// the trigger, acknowledging each; ServerBareCPUSeconds the server's meanwhile.
	BareCPUSeconds       float64 `json:"bare_cpu_s"`
	ServerBareCPUSeconds float64 `json:"server_bare_cpu_s"`
	// The same per message, in microseconds: the trigger's and the bare consumer's own
	// CPU, the server's storing a message, serving it to the trigger and to the bare
	// consumer.
	TriggerMicros      float64 `json:"trigger_cpu_us_per_msg"`
	BareMicros         float64 `json:"bare_cpu_us_per_msg"`
	StoreMicros        float64 `json:"server_store_us_per_msg"`
	ServeTriggerMicros float64 `json:"server_serve_trigger_us_per_msg"`
	ServeBareMicros    float64 `json:"server_serve_bare_us_per_msg"`
	// TriggerBareRatio is the trigger's CPU per message ÷ the bare consumer's;
	// ServeBareRatio the server's CPU serving the trigger ÷ serving the bare consumer.
	TriggerBareRatio float64 `json:"trigger_bare_cpu_ratio"`
	ServeBareRatio   float64 `json:"serve_bare_cpu_ratio"`
	// Note says why a figure is 0 (not available), when one is.
	Note string `json:"note,omitempty"`
}

// triggerOwnProcess and triggerInBench are CPUReport.TriggerProcess's two values.
const (
	triggerOwnProcess = "its own process (the compactor binary's bench-trigger command)"
	triggerInBench    = "the bench's process (no binary to start): its CPU includes the bench's polling"
)

// measureCPU stores load (one trigger partition), then has a trigger drain it, and
// reads the CPU of the server's process over both phases and of the trigger's over the
// drain.
func measureCPU(ctx context.Context, url, self string, serverCPU func() time.Duration, load []published) (CPUReport, error) {
	cr := CPUReport{Messages: len(load), TriggerProcess: triggerOwnProcess}
	if self == "" {
		cr.TriggerProcess = triggerInBench
	}
	r, err := newRig(ctx, url)
	if err != nil {
		return cr, err
	}
	defer r.close()
	s0 := serverCPU()
	if err := r.storeLoad(load); err != nil {
		return cr, err
	}
	s1 := serverCPU()
	cons, err := r.triggerConsumers(ctx)
	if err != nil {
		return cr, err
	}
	trig, err := r.cpuTrigger(ctx, self)
	if err != nil {
		return cr, err
	}
	defer trig.stop()
	start, t0, s2 := time.Now(), trig.cpu(), serverCPU()
	if err := trig.start(); err != nil {
		return cr, err
	}
	if err := wait(ctx, 5*time.Minute, "the trigger to acknowledge every message", func() bool { return drained(ctx, cons) }); err != nil {
		return cr, err
	}
	elapsed, t1, s3 := time.Since(start), trig.cpu(), serverCPU()
	cr.DrainMsgsPerSec = float64(len(load)) / elapsed.Seconds()
	cr.fill(t0, t1, s0, s1, s2, s3)
	trig.stop()
	runtime.GC() // the bare consumer runs in this process: the garbage made before is not its
	b0, s4 := cpuTime(), serverCPU()
	if err := r.bareDrain(ctx, len(load)); err != nil {
		return cr, fmt.Errorf("bare consumer: %w", err)
	}
	cr.fillBare(b0, cpuTime(), s4, serverCPU())
	return cr, nil
}

// fillBare computes the bare consumer's figures from the CPU readings around its
// drain: the bench process's b0, b1 and the server's s0, s1 (-1: unread).
func (cr *CPUReport) fillBare(b0, b1, s0, s1 time.Duration) {
	micros := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(cr.Messages) }
	if b0 >= 0 && b1 >= 0 {
		cr.BareCPUSeconds, cr.BareMicros = (b1 - b0).Seconds(), micros(b1-b0)
	}
	if s0 >= 0 && s1 >= 0 {
		cr.ServerBareCPUSeconds, cr.ServeBareMicros = (s1 - s0).Seconds(), micros(s1-s0)
	}
	if cr.TriggerMicros > 0 && cr.BareMicros > 0 {
		cr.TriggerBareRatio = cr.TriggerMicros / cr.BareMicros
	}
	if cr.ServeTriggerMicros > 0 && cr.ServeBareMicros > 0 {
		cr.ServeBareRatio = cr.ServeTriggerMicros / cr.ServeBareMicros
	}
}

// bareDrain drains the rig's CHAT, n messages, with a bare durable pull consumer in
// this process that acknowledges each message (no filter, no priority group, the
// trigger consumer's max ack pending): the plain JetStream baseline of the trigger's
// drain. It returns once the server confirmed the last acknowledgement, without
// polling meanwhile.
func (r *rig) bareDrain(ctx context.Context, n int) error {
	c, err := r.js.CreateOrUpdateConsumer(ctx, r.cfg.ChatStream, natsjs.ConsumerConfig{Durable: "bare",
		AckPolicy: natsjs.AckExplicitPolicy, MaxAckPending: 4096})
	if err != nil {
		return err
	}
	var got atomic.Int64
	last := make(chan natsjs.Msg, 1)
	cc, err := c.Consume(func(m natsjs.Msg) {
		if got.Add(1) == int64(n) {
			last <- m
			return
		}
		_ = m.Ack()
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case m := <-last:
		return m.DoubleAck(ctx)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%d of %d messages in 5m", got.Load(), n)
	}
}

// fill computes the figures from the CPU readings: the trigger's t0 and t1 around the
// drain, the server's s0, s1 around storing and s2, s3 around the drain (-1: unread).
func (cr *CPUReport) fill(t0, t1, s0, s1, s2, s3 time.Duration) {
	perMillion := func(d time.Duration) float64 { return d.Seconds() / float64(cr.Messages) * 1e6 }
	if t0 >= 0 && t1 >= 0 {
		cr.TriggerCPUSeconds, cr.TriggerPerMillion = (t1 - t0).Seconds(), perMillion(t1-t0)
		cr.TriggerMicros = cr.TriggerPerMillion
	} else {
		cr.Note = "the trigger's CPU could not be read on this system"
	}
	if min(s0, s1, s2, s3) < 0 {
		cr.Note = "the server is not a child process of the bench (embedded in it, or --nats-url): its CPU is not " +
			"read, so the ratio is not available"
		return
	}
	cr.ServerStoreCPUSeconds, cr.ServerDrainCPUSeconds = (s1 - s0).Seconds(), (s3 - s2).Seconds()
	cr.StoreMicros, cr.ServeTriggerMicros = perMillion(s1-s0), perMillion(s3-s2) // s per million = µs per message
	cr.ServerPerMillion = perMillion(s1 - s0 + s3 - s2)
	if cr.TriggerPerMillion > 0 && cr.ServerPerMillion > 0 {
		cr.Ratio = cr.TriggerPerMillion / cr.ServerPerMillion
	} else if cr.Note == "" {
		cr.Note = "a process's CPU did not move by one clock tick (10 ms) over the measurement: too few messages for a ratio"
	}
}

// cpuTrigger is the trigger of the CPU measurement, built and not yet consuming.
type cpuTrigger interface {
	start() error
	cpu() time.Duration
	stop()
}

// inBenchTrigger runs the trigger in the bench's process; its CPU is the process's.
type inBenchTrigger struct {
	ctx context.Context
	r   *rig
	end func() error
}

func (t *inBenchTrigger) start() error {
	_, stop, err := t.r.startTrigger(t.ctx, settings(benchWindow))
	t.end = stop
	return err
}

func (t *inBenchTrigger) cpu() time.Duration { return cpuTime() }

func (t *inBenchTrigger) stop() {
	if t.end != nil {
		_ = t.end()
		t.end = nil
	}
}

// cpuTrigger starts the trigger process (self's bench-trigger command), or without a
// binary prepares one in this process.
func (r *rig) cpuTrigger(ctx context.Context, self string) (cpuTrigger, error) {
	if self == "" {
		return &inBenchTrigger{ctx: ctx, r: r}, nil
	}
	return r.startTriggerProcess(self, benchWindow)
}

// storeLoad stores load in the rig's CHAT and waits until every one is stored.
func (r *rig) storeLoad(load []published) error {
	return r.storeRaw(len(load), func(i int) (string, []byte) { return fmt.Sprintf("c%d", load[i].conv), load[i].msg.Payload })
}

// storeRaw stores n messages in the rig's CHAT, message(i) giving the i-th's
// conversation and payload: raw asynchronous publishes, at most asyncWindow in flight,
// each window waited for before the next.
func (r *rig) storeRaw(n int, message func(i int) (conv string, data []byte)) error {
	futures := make([]jetstream.PubAckFuture, 0, asyncWindow)
	for i := range n {
		conv, data := message(i)
		f, err := r.store.Chat().PublishAsync(conv, data, "")
		if err != nil {
			return err
		}
		futures = append(futures, f)
		if len(futures) == asyncWindow || i == n-1 {
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return err
				}
			}
			futures = futures[:0]
		}
	}
	return nil
}
