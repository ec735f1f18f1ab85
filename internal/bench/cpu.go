package bench

import (
	"context"
	"fmt"
	"time"

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
	return cr, nil
}

// fill computes the figures from the CPU readings: the trigger's t0 and t1 around the
// drain, the server's s0, s1 around storing and s2, s3 around the drain (-1: unread).
func (cr *CPUReport) fill(t0, t1, s0, s1, s2, s3 time.Duration) {
	perMillion := func(d time.Duration) float64 { return d.Seconds() / float64(cr.Messages) * 1e6 }
	if t0 >= 0 && t1 >= 0 {
		cr.TriggerCPUSeconds, cr.TriggerPerMillion = (t1 - t0).Seconds(), perMillion(t1-t0)
	} else {
		cr.Note = "the trigger's CPU could not be read on this system"
	}
	if min(s0, s1, s2, s3) < 0 {
		cr.Note = "the server is not a child process of the bench (embedded in it, or --nats-url): its CPU is not " +
			"read, so the ratio is not available"
		return
	}
	cr.ServerStoreCPUSeconds, cr.ServerDrainCPUSeconds = (s1 - s0).Seconds(), (s3 - s2).Seconds()
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
