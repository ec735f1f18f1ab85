package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// asyncWindow bounds the publishes in flight, for the baseline and the pipeline alike.
const asyncWindow = 2000

// rawStallWait is how long a raw asynchronous publish waits for a slot when asyncWindow
// are in flight (nats.go's default is 200 ms, then it fails): the raw side waits on
// its acknowledgements as the pipeline's side waits on its window.
const rawStallWait = 30 * time.Second

// benchWindow is the context window of the bench's conversations: small enough that
// the corpus's conversations cross the threshold while they are published, so the
// workers compact while the trigger counts.
const benchWindow = 16000

// IngestRow is one ingest measurement.
type IngestRow struct {
	// Partitions is the trigger's partitions, Processes the trigger processes sharing
	// them (each a triggers.Partitions on its own connection, in the bench's process).
	Partitions int `json:"partitions"`
	Processes  int `json:"trigger_processes"`
	// MsgsPerSec is publish-until-trigger-drained: messages ÷ the time from the first
	// publish until the trigger had acknowledged the last one.
	MsgsPerSec float64 `json:"msgs_per_sec"`
	// Ratio is MsgsPerSec ÷ the baseline's.
	Ratio float64 `json:"ratio"`
	// MaxLag is the most messages stored but not yet acknowledged by the trigger, sampled.
	MaxLag int `json:"max_lag"`
	// Compactions is how many completed while the messages were ingested.
	Compactions int `json:"compactions"`
	// PublishMsgsPerSec is the pipeline client's publishing (every ack in) in this run,
	// while the trigger and the workers run; TriggerDrainMsgsPerSec the trigger's consumption alone, of the same
	// messages stored beforehand (a run of its own). They tell which side a gap is on.
	PublishMsgsPerSec      float64 `json:"publish_msgs_per_sec"`
	TriggerDrainMsgsPerSec float64 `json:"trigger_drain_msgs_per_sec"`
	// TriggerDrainCores is the CPU this process (the trigger, nothing else running) used
	// while it drained, in cores: well under the machine's means it waits, not works.
	TriggerDrainCores float64 `json:"trigger_drain_cores"`
	// TriggerDrainServerCores is the CPU the nats-server process used meanwhile, in
	// cores; 0 when the server is not a child process of the bench's (external or
	// embedded).
	TriggerDrainServerCores float64 `json:"trigger_drain_server_cores"`
}

// IngestReport compares ingest through the pipeline with raw JetStream.
type IngestReport struct {
	Messages      int     `json:"messages"`
	Conversations int     `json:"conversations"`
	PayloadBytes  int     `json:"payload_bytes"`
	RawMsgsPerSec float64 `json:"raw_msgs_per_sec"`
	// RawPublishMsgsPerSec is the raw baseline's publishing (all acks in) while its
	// bare consumer takes the messages.
	RawPublishMsgsPerSec float64 `json:"raw_publish_msgs_per_sec"`
	// RawAloneMsgsPerSec and ClientAloneMsgsPerSec are raw asynchronous publishing and
	// the pipeline client's PublishBatch, each with nothing else running (the median of
	// publishRounds alternating runs); PublishRatio is client ÷ raw.
	AloneMessages         int     `json:"publish_alone_messages"`
	RawAloneMsgsPerSec    float64 `json:"raw_publish_alone_msgs_per_sec"`
	ClientAloneMsgsPerSec float64 `json:"client_publish_alone_msgs_per_sec"`
	PublishRatio          float64 `json:"publish_ratio"`
	// PublishCPU is the same publishing's CPU per message.
	PublishCPU PublishCPU `json:"publish_cpu"`
	// PipelineCPURatio is the CPU a message costs through Compactor (the client's
	// publishing, the server storing it and serving it to the trigger, the trigger) ÷ on
	// plain JetStream (raw publishing, the server storing it and serving it to a bare
	// consumer, the bare consumer), each part measured in this run; 0 when a part was
	// not read.
	PipelineCPURatio float64     `json:"pipeline_cpu_ratio"`
	PipelineMicros   float64     `json:"pipeline_cpu_us_per_msg"`
	PlainMicros      float64     `json:"plain_cpu_us_per_msg"`
	Rows             []IngestRow `json:"rows"`
	// CPU is the trigger's and the server's CPU per message (one partition).
	CPU CPUReport `json:"cpu"`
}

func measureIngest(ctx context.Context, url, self string, serverCPU func() time.Duration, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
	load := c.interleaved(sz.ingestMessages, sz.ingestConversations)
	ir := &rep.Ingest
	ir.Messages, ir.Conversations = len(load), sz.ingestConversations
	for _, p := range load {
		ir.PayloadBytes += len(p.msg.Payload)
	}
	progress("ingest: raw JetStream, %d messages over %d conversations, %d runs", len(load), sz.ingestConversations, rawRuns)
	raw, pub, err := rawIngestMedian(ctx, url, load)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	ir.RawMsgsPerSec, ir.RawPublishMsgsPerSec = raw, pub
	progress("ingest: raw %.0f msgs/s (publishing while the consumer takes them %.0f msgs/s)", raw, pub)
	alone := c.interleaved(sz.cpuMessages, sz.ingestConversations)
	ir.AloneMessages = len(alone)
	progress("ingest: publishing %d messages alone, raw and through the client, %d rounds each, alternating", len(alone), publishRounds)
	if ir.PublishCPU, err = publishAlone(ctx, url, serverCPU, alone); err != nil {
		return fmt.Errorf("publishing alone: %w", err)
	}
	ir.RawAloneMsgsPerSec, ir.ClientAloneMsgsPerSec = ir.PublishCPU.RawMsgsPerSec, ir.PublishCPU.ClientMsgsPerSec
	ir.PublishRatio = ir.ClientAloneMsgsPerSec / ir.RawAloneMsgsPerSec
	progress("ingest: publishing alone: raw %.0f msgs/s, client %.0f msgs/s: %.2f of raw; CPU per message raw %.2f µs, client %.2f µs",
		ir.RawAloneMsgsPerSec, ir.ClientAloneMsgsPerSec, ir.PublishRatio, ir.PublishCPU.RawMicros, ir.PublishCPU.ClientMicros)
	for _, l := range triggerLayouts {
		row, err := pipelineIngest(ctx, url, load, l)
		if err != nil {
			return fmt.Errorf("pipeline, %s: %w", l, err)
		}
		row.Ratio = row.MsgsPerSec / raw
		if row.TriggerDrainMsgsPerSec, row.TriggerDrainCores, row.TriggerDrainServerCores, err = triggerDrain(ctx, url, serverCPU, load, l); err != nil {
			return fmt.Errorf("trigger drain, %s: %w", l, err)
		}
		ir.Rows = append(ir.Rows, row)
		progress("ingest: pipeline, %s: %.0f msgs/s (%.2f of raw), max lag %d, %d compactions; "+
			"client publishing meanwhile %.0f msgs/s, trigger draining alone %.0f msgs/s using %.2f cores (the server %.2f)",
			l, row.MsgsPerSec, row.Ratio, row.MaxLag, row.Compactions, row.PublishMsgsPerSec, row.TriggerDrainMsgsPerSec, row.TriggerDrainCores, row.TriggerDrainServerCores)
	}
	progress("ingest: CPU per message, %d messages stored, then drained by a trigger in %s", sz.cpuMessages, triggerWhere(self))
	cr, err := measureCPU(ctx, url, self, serverCPU, c.interleaved(sz.cpuMessages, sz.ingestConversations))
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	ir.CPU = cr
	ir.pipelineCPU()
	progress("ingest: CPU per million messages: trigger %.2f s, server %.2f s (storing %.2f s, serving the trigger %.2f s, in all): ratio %s%s",
		cr.TriggerPerMillion, cr.ServerPerMillion, cr.ServerStoreCPUSeconds, cr.ServerDrainCPUSeconds, f2(cr.Ratio), noteSuffix(cr.Note))
	return nil
}

// pipelineCPU sums the CPU per message of each side (see PipelineCPURatio).
func (ir *IngestReport) pipelineCPU() {
	pc, cr := ir.PublishCPU, ir.CPU
	parts := []float64{pc.ClientMicros, pc.ClientServerMicros, cr.ServeTriggerMicros, cr.TriggerMicros,
		pc.RawMicros, pc.RawServerMicros, cr.ServeBareMicros, cr.BareMicros}
	for _, x := range parts {
		if x <= 0 {
			return
		}
	}
	ir.PipelineMicros = pc.ClientMicros + pc.ClientServerMicros + cr.ServeTriggerMicros + cr.TriggerMicros
	ir.PlainMicros = pc.RawMicros + pc.RawServerMicros + cr.ServeBareMicros + cr.BareMicros
	ir.PipelineCPURatio = ir.PipelineMicros / ir.PlainMicros
}

// triggerWhere is where the CPU measurement's trigger runs, for progress.
func triggerWhere(self string) string {
	if self == "" {
		return "the bench's process"
	}
	return "its own process"
}

// noteSuffix is "; note" when note is set.
func noteSuffix(note string) string {
	if note == "" {
		return ""
	}
	return "; " + note
}

// rawRuns is how many times the raw baseline runs; its median is the baseline. It
// takes a fraction of the pipeline's time, and one stall of the shared machine in a
// single run would move every ingest ratio.
const rawRuns = 3

// rawIngestMedian is rawIngest's medians over rawRuns runs.
func rawIngestMedian(ctx context.Context, url string, load []published) (drained, publishOnly float64, err error) {
	var ds, ps []float64
	for range rawRuns {
		d, p, err := rawIngest(ctx, url, load)
		if err != nil {
			return 0, 0, err
		}
		ds, ps = append(ds, d), append(ps, p)
	}
	slices.Sort(ds)
	slices.Sort(ps)
	return ds[len(ds)/2], ps[len(ps)/2], nil
}

// rawIngest publishes load asynchronously to a plain stream shaped like CHAT, while a
// bare pull consumer acknowledges every message: messages/s until the last is acked,
// and publishing's own rate.
func rawIngest(ctx context.Context, url string, load []published) (drained, publishOnly float64, err error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer r.close()
	js, err := natsjs.New(r.nc, natsjs.WithPublishAsyncMaxPending(asyncWindow))
	if err != nil {
		return 0, 0, err
	}
	stream := "RAW_" + r.ns
	s, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{r.ns + ".raw.*.msg"},
		Storage: natsjs.FileStorage, AllowDirect: true, Duplicates: 2 * time.Minute})
	if err != nil {
		return 0, 0, err
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "bare", AckPolicy: natsjs.AckExplicitPolicy,
		MaxAckPending: 10000})
	if err != nil {
		return 0, 0, err
	}
	var acked atomic.Int64
	all := make(chan struct{})
	n := int64(len(load))
	cc, err := cons.Consume(func(m natsjs.Msg) {
		_ = m.Ack()
		if acked.Add(1) == n {
			close(all)
		}
	})
	if err != nil {
		return 0, 0, err
	}
	defer cc.Stop()
	start := time.Now()
	for _, p := range load {
		if _, err := js.PublishAsync(fmt.Sprintf("%s.raw.c%d.msg", r.ns, p.conv), p.msg.Payload, natsjs.WithStallWait(rawStallWait)); err != nil {
			return 0, 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, 0, errors.New("publishes not acked within 5m")
	}
	published := time.Since(start)
	select {
	case <-all:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, 0, fmt.Errorf("bare consumer acked %d of %d within 5m", acked.Load(), n)
	}
	return float64(n) / time.Since(start).Seconds(), float64(n) / published.Seconds(), nil
}

// pipelineIngest publishes load through the pipeline client while a real trigger (of
// layout l, every partition owned before the clock starts) and a pool of 4 workers
// (fake LLM answering at once) run: messages/s until the trigger has acknowledged the
// last message.
func pipelineIngest(ctx context.Context, url string, load []published, l triggerLayout) (IngestRow, error) {
	row := IngestRow{Partitions: l.partitions, Processes: l.processes}
	r, err := newRigParts(ctx, url, l.partitions)
	if err != nil {
		return row, err
	}
	defer r.close()
	s := settings(benchWindow)
	llm := newFakeLLM(0, 400)
	defer llm.close()
	sum, err := llm.summarizer()
	if err != nil {
		return row, err
	}
	stopPool, err := r.startPool(ctx, s, 4, sum)
	if err != nil {
		return row, err
	}
	defer stopPool()
	trig, err := r.startTriggers(ctx, s, l.processes)
	if err != nil {
		return row, err
	}
	defer trig.stop()
	completed, unsub, err := r.countEvents("completed")
	if err != nil {
		return row, err
	}
	defer unsub()
	cons, err := r.triggerConsumers(ctx)
	if err != nil {
		return row, err
	}
	client := r.client()
	maxLag := sampleLag(ctx, cons)
	start := time.Now()
	if err := publishInOrder(ctx, client, load); err != nil {
		return row, err
	}
	row.PublishMsgsPerSec = float64(len(load)) / time.Since(start).Seconds()
	err = wait(ctx, 5*time.Minute, "the trigger to acknowledge every message", func() bool { return drained(ctx, cons) })
	elapsed := time.Since(start)
	row.MaxLag = maxLag()
	if err != nil {
		return row, err
	}
	row.MsgsPerSec = float64(len(load)) / elapsed.Seconds()
	row.Compactions = int(completed.Load())
	return row, nil
}

// sampleLag samples every 50 ms the stored messages the trigger (its consumers cons)
// has not acknowledged yet, until the function it returns stops it and returns the
// largest.
func sampleLag(ctx context.Context, cons []natsjs.Consumer) func() int {
	sampling := make(chan struct{})
	sampled := make(chan int)
	// The lag sampler: stored messages the trigger has not acknowledged yet.
	go func() {
		maxLag := 0
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling:
				sampled <- maxLag
				return
			case <-t.C:
				if n, err := lag(ctx, cons); err == nil {
					maxLag = max(maxLag, n)
				}
			}
		}
	}()
	return func() int {
		close(sampling)
		return <-sampled
	}
}

// countEvents counts the namespace's events of one type (core subscription).
func (r *rig) countEvents(typ string) (*atomic.Int64, func(), error) {
	var n atomic.Int64
	want := []byte(`"type":"` + typ + `"`)
	sub, err := r.nc.Subscribe(r.cfg.EventPrefix+".*", func(m *nats.Msg) {
		if bytes.Contains(m.Data, want) {
			n.Add(1)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return &n, func() { _ = sub.Unsubscribe() }, nil
}

// triggerDrain stores load first (raw async publishes of the same payloads), then
// starts a trigger of layout l and times it until it acknowledged the last message. The
// clock starts before the trigger does, in every layout: the messages are there, so the
// partitions' start-up (binding the triggers bucket, the first heartbeat) is part of
// the time, a few milliseconds of it.
func triggerDrain(ctx context.Context, url string, serverCPU func() time.Duration, load []published, l triggerLayout) (perSec, cores, serverCores float64, err error) {
	r, err := newRigParts(ctx, url, l.partitions)
	if err != nil {
		return 0, 0, 0, err
	}
	defer r.close()
	if err := r.storeLoad(load); err != nil {
		return 0, 0, 0, err
	}
	cons, err := r.triggerConsumers(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	start, cpu0, server0 := time.Now(), cpuTime(), serverCPU()
	trig, err := r.startTriggers(ctx, settings(benchWindow), l.processes)
	if err != nil {
		return 0, 0, 0, err
	}
	defer trig.stop()
	if err := wait(ctx, 5*time.Minute, "the trigger to acknowledge every message", func() bool { return drained(ctx, cons) }); err != nil {
		return 0, 0, 0, err
	}
	elapsed := time.Since(start)
	if cpu0 >= 0 {
		cores = float64(cpuTime()-cpu0) / float64(elapsed)
	}
	if server0 >= 0 {
		if server1 := serverCPU(); server1 >= 0 {
			serverCores = float64(server1-server0) / float64(elapsed)
		}
	}
	return float64(len(load)) / elapsed.Seconds(), cores, serverCores, nil
}
