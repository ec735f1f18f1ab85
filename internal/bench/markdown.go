package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/template"
)

// cpuModel is the processor's name from /proc/cpuinfo, or "" elsewhere.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage is the first field of /proc/loadavg (the last minute), or "" elsewhere.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// gap is a target the run did not meet: what was measured, why, and the plan.
type gap struct {
	Title, Cause, Plan string
}

// drainServer is what the server's process used while the trigger drained, when read.
func drainServer(x IngestRow) string {
	if x.TriggerDrainServerCores <= 0 {
		return ""
	}
	return fmt.Sprintf(", while the nats-server process used %.2f", x.TriggerDrainServerCores)
}

// partitionsChanged says, from this run's ingest rows, what trigger partitions
// changed in the figure of (what it did, in unit): each partitioned row against the
// one-partition row.
func (r *Report) partitionsChanged(of func(IngestRow) float64, did, unit string) string {
	rows := r.Ingest.Rows
	if len(rows) < 2 || rows[0].Partitions != 1 {
		return ""
	}
	base := of(rows[0])
	var parts []string
	var factors []float64
	for _, x := range rows[1:] {
		parts = append(parts, fmt.Sprintf("with %d partitions in %s it %s %s %s (%.2f× one partition's, ingest ratio %.2f)",
			x.Partitions, processes(x.Processes), did, thousands(of(x)), unit, of(x)/base, x.Ratio))
		factors = append(factors, of(x)/base)
	}
	return "Trigger partitions, measured in this run: " + strings.Join(parts, "; ") + ". " + verdict(factors)
}

// newConvPartitionsChanged is partitionsChanged for the new conversations' rate.
func (r *Report) newConvPartitionsChanged() string {
	rows := r.Heap.NewConversations
	if len(rows) < 2 || rows[0].Partitions != 1 {
		return ""
	}
	var parts []string
	var factors []float64
	for _, x := range rows[1:] {
		parts = append(parts, fmt.Sprintf("with %d partitions in %s, %s per second (%.2f× one partition's)",
			x.Partitions, processes(x.Processes), thousands(x.PerSec), x.PerSec/rows[0].PerSec))
		factors = append(factors, x.PerSec/rows[0].PerSec)
	}
	return "Trigger partitions, measured in this run: " + strings.Join(parts, "; ") + ". " + verdict(factors)
}

func processes(n int) string {
	switch n {
	case 1:
		return "one trigger process"
	case 2:
		return "two trigger processes"
	}
	return fmt.Sprintf("%d trigger processes", n)
}

// verdict sums up the factors partitioned rows reached over the one-partition row.
// The machine's noise between runs is about a third (see the top of the doc), so
// only a change past that counts.
func verdict(factors []float64) string {
	lo, hi := slices.Min(factors), slices.Max(factors)
	switch {
	case lo >= 1.35:
		return "Partitions raised it past the machine's noise: the handlers of one partition were a limit."
	case hi <= 1/1.35:
		return "Partitions lowered it past the machine's noise: more consumers and handlers cost more than they overlap."
	case lo < 1/1.35 || hi > 1.35:
		return "The layouts disagree: not all of them moved past the machine's noise, or the same way; compare the rows before drawing a conclusion."
	}
	return "Within the machine's noise of one partition: on one machine more handlers do not help, whether what " +
		"limits is the trigger's CPU or the server's answers, since the two trigger processes share the same " +
		"machine's cores and server (they are two triggers.Partitions in the bench's process, each on its own " +
		"connection)."
}

// gaps lists the targets this run missed, each with its cause (as profiled when the
// bench was written: see docs/benchmarks.md) and the plan.
func (r *Report) gaps() []gap {
	var out []gap
	for _, missed := range []func() (gap, bool){r.ingestGap, r.publishGap, r.pipelineCPUGap, r.cpuGap, r.latencyGap, r.readGap, r.costGap, r.scaleOutGap,
		r.heapGap, r.newConversationsGap, r.tokensGap} {
		if g, ok := missed(); ok {
			out = append(out, g)
		}
	}
	return out
}

// ingestGap is the ingest target: publish until the trigger drained, against raw JetStream, when this run missed it.
func (r *Report) ingestGap() (gap, bool) {
	if !(len(r.Ingest.Rows) > 0 && r.IngestRatio < 0.8) {
		return gap{}, false
	}
	row := r.Ingest.Rows[0]
	return gap{
		Title: fmt.Sprintf("Ingest: %.2f of raw JetStream (target ≥ 0.8)", r.IngestRatio),
		Cause: fmt.Sprintf("%s The pipeline run puts the nats-server, the client, the trigger and 4 workers "+
			"(compacting as the conversations cross their threshold) on the machine's %d shared cores: the client "+
			"published at %s msgs/s meanwhile and the trigger fell up to %s messages behind, so most of the draining "+
			"came after the last publish, beside the workers' compactions. The client's own cost is the next gap; "+
			"the server's, storing the messages and serving them to the trigger, is in [CPU per message](#cpu-per-message). %s",
			r.drainAlone(row), r.CPUs, thousands(row.PublishMsgsPerSec), thousands(float64(row.MaxLag)),
			r.partitionsChanged(func(x IngestRow) float64 { return x.TriggerDrainMsgsPerSec }, "drained", "msgs/s")),
		Plan: "Measure on a machine with more cores than the pipeline has processes, or with the server on its own " +
			"machine (the projection below assumes the trigger's CPU per message, not this machine's shared cores); " +
			"then the client's publish (next gap)."}, true
}

// drainAlone says how the trigger's drain alone compares with the raw baseline.
func (r *Report) drainAlone(row IngestRow) string {
	alone := fmt.Sprintf("alone, the trigger drained the stored messages at %s msgs/s using %.2f of the machine's %d cores%s",
		thousands(row.TriggerDrainMsgsPerSec), row.TriggerDrainCores, r.CPUs, drainServer(row))
	if row.TriggerDrainMsgsPerSec >= r.Ingest.RawMsgsPerSec {
		return fmt.Sprintf("The trigger is not the limit: %s, as fast as raw publish + bare consumer (%s msgs/s) or faster.",
			alone, thousands(r.Ingest.RawMsgsPerSec))
	}
	return fmt.Sprintf("The trigger is part of the limit: %s, slower than raw publish + bare consumer (%s msgs/s).",
		alone, thousands(r.Ingest.RawMsgsPerSec))
}

// publishGap is the client's publishing target, when this run missed it.
func (r *Report) publishGap() (gap, bool) {
	if !(r.Ingest.ClientAloneMsgsPerSec > 0 && r.PublishRatio < 0.9) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Client publishing: %.2f of raw asynchronous publishing, both alone (target ≥ 0.9)", r.PublishRatio),
		Cause: fmt.Sprintf("%s msgs/s through pipeline.Client.PublishBatch against %s msgs/s of raw PublishAsync of the "+
			"same payloads, with nothing else running. Raw publishing sends bytes already encoded; the client validates "+
			"each message against the wire contract, checks its tool calls against the "+
			"conversation's open calls, encodes it into a buffer of its own (and the garbage collector collects "+
			"that buffer) and sends it with the header that pins it to the CHAT stream; nats.go arms an ack "+
			"timer for each. `go test -run '^$' -bench PublishRatio ./pipeline/` reports the CPU a message of each "+
			"side.", thousands(r.Ingest.ClientAloneMsgsPerSec), thousands(r.Ingest.RawAloneMsgsPerSec)),
		Plan: "Validate while encoding (one pass over the content instead of two), one timer per batch instead of " +
			"one per publish, and encoding into reused buffers."}, true
}

// pipelineCPUGap is the whole pipeline's CPU per message target (at most 1.6× plain
// JetStream's), when this run missed it.
func (r *Report) pipelineCPUGap() (gap, bool) {
	ir := r.Ingest
	if !(ir.PipelineCPURatio > 1.6) {
		return gap{}, false
	}
	pc, cr := ir.PublishCPU, ir.CPU
	return gap{
		Title: fmt.Sprintf("CPU per message, whole pipeline: %.2f× plain JetStream's (target ≤ 1.6)", ir.PipelineCPURatio),
		Cause: fmt.Sprintf("A message cost %.1f µs of CPU through Compactor against %.1f µs on plain JetStream. By part, "+
			"Compactor's against plain: the publisher %.2f against %.2f µs, the server storing it %.2f against %.2f µs, "+
			"the server serving it %.2f against %.2f µs, the consumer %.2f against %.2f µs. The trigger acknowledges "+
			"in batches (one for up to 64 messages, see [design](design.md)); what the server spends beyond the bare "+
			"consumer serves the trigger's reads (a new conversation's tombstone, value and tail) and its requests.",
			ir.PipelineMicros, ir.PlainMicros, pc.ClientMicros, pc.RawMicros, pc.ClientServerMicros, pc.RawServerMicros,
			cr.ServeTriggerMicros, cr.ServeBareMicros, cr.TriggerMicros, cr.BareMicros),
		Plan: "The publisher's own path (validation fused with encoding, acknowledgements decoded without encoding/json), " +
			"then the trigger's reads per new conversation."}, true
}

// cpuGap is the trigger's CPU target (at most the server's per message), when this
// run missed it.
func (r *Report) cpuGap() (gap, bool) {
	if !(r.TriggerServerCPURatio > 1) {
		return gap{}, false
	}
	cr := r.Ingest.CPU
	return gap{
		Title: fmt.Sprintf("Trigger CPU: %.2f× the server's per message (target ≤ 1)", r.TriggerServerCPURatio),
		Cause: fmt.Sprintf("The trigger spent %.1f s of CPU per million messages, the nats-server %.1f s storing them and "+
			"serving them to the trigger. The trigger reads each message in one validating pass (schemas.ScanMessage); "+
			"a profile of this run's drain tells where the rest goes (`--only ingest --cpuprofile`).", cr.TriggerPerMillion, cr.ServerPerMillion),
		Plan: "Profile the drain and remove what is not the message's own reading."}, true
}

// latencyGap is the trigger latency target, when this run missed it.
func (r *Report) latencyGap() (gap, bool) {
	if !(r.Latency.Probes > 0 && r.TriggerP99Ratio > 3) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Trigger p99 latency: %.1f× a bare publish until delivery (target ≤ 3)", r.TriggerP99Ratio),
		Cause: fmt.Sprintf("The trigger's path is the baseline's plus a second hop: the chat message reaches the "+
			"trigger the way it reaches the bare consumer, and then the trigger decodes and counts it, evaluates the "+
			"conversation and publishes the request through the server again, where the measurement sees it; so even "+
			"the median is %.1f× the bare publish until delivery (%.2f ms against %.2f ms). The tail above that was not "+
			"profiled since the trigger hands each conversation to its own handler: a probe waits behind its own "+
			"conversation's messages only, and on the server it shares with the load's rebuilds (see ingest).",
			r.Latency.P50Ratio, r.Latency.TriggerP50Ms, r.Latency.RawP50Ms),
		Plan: "A block profile of the latency run, as for ingest; fewer round trips per rebuild (as for ingest) " +
			"take load off the server the probes go through. The second hop is the design (the request is durable on the work queue before the " +
			"chat message is acknowledged); a baseline of two hops (publish, consume, publish, consume) would be the " +
			"like-for-like comparison."}, true
}

// readGap is the context read targets, when this run missed it.
func (r *Report) readGap() (gap, bool) {
	if !(r.Read.Messages > 0 && (r.ReadSpeedup < 10 || r.ReadOverFloor > 3)) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Context read: %.0f× faster than a replay and %.1f× the floor (target ≥ 10×, ≤ 3×)", r.ReadSpeedup, r.ReadOverFloor),
		Cause: "See the profile of `compactor context` (pipeline.Client.Context): KV get, pinned gets, tail batches, assembly.",
		Plan:  "Read pinned messages and the tail in one batch where they are adjacent."}, true
}

// costGap is the flat compaction cost target, when this run missed it.
func (r *Report) costGap() (gap, bool) {
	if !(len(r.Cost) > 1 && r.CostGrowth > 1.5) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Compaction cost grows %.1f× from the shortest to the longest history (target: flat)", r.CostGrowth),
		Cause: "An incremental job reads only from the previous tail start; a growth means some step reads the whole history.",
		Plan:  "Profile the job at 10,000 messages (`--only cost --cpuprofile`)."}, true
}

// scaleOutGap is the worker scale-out target, when this run missed it.
func (r *Report) scaleOutGap() (gap, bool) {
	if !(len(r.ScaleOut) > 0 && r.ScaleOut8 < 7) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Worker scale-out: 8 slots give %.1f× one slot (target ≥ 7)", r.ScaleOut8),
		Cause: "The two cores are shared by the server, the workers and the fake LLM.",
		Plan:  "Measure on more cores; profile the job's non-LLM part."}, true
}

// heapGap is the trigger heap target, when this run missed it.
func (r *Report) heapGap() (gap, bool) {
	if !(r.Heap.Conversations > 0 && r.BytesPerConversation > 512) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Trigger heap: %.0f B per tracked conversation (target ≤ 512 B)", r.BytesPerConversation),
		Cause: "A conversation's state (triggers.convState) is 280 bytes, a 288-byte allocation: its policy is a pointer to " +
			"settings shared by every conversation of the same policy, its instants Unix nanoseconds, its small counters " +
			"32 bits, and 48 bytes are the witness of the messages it saw (for hole detection). Its entry in the map of " +
			"tracked conversations (two mutexes and the pending signals), the map's own slot and the id string add the rest. " +
			"A word more in the state takes it to the 320-byte class (the witness did, once: 532 B). The heap profile " +
			"(`--heapprofile`) puts the trigger's share in rebuild (the state) and get (the entry). Sizes by unsafe.Sizeof on " +
			"linux/amd64; TestTrackedStateIsSmall holds them.",
		Plan: "Find what grew with the heap profile; keep the state within its size class (move rarely used fields, such " +
			"as the retry timers', to a side table kept only for the conversations that have one)."}, true
}

// newConversationsGap is the new conversations target, when this run missed it.
func (r *Report) newConversationsGap() (gap, bool) {
	if !(r.Heap.Conversations > 0 && r.NewConversationsPerSec < 10000) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("New conversations: %s per second (target ≥ 10,000)", thousands(r.NewConversationsPerSec)),
		Cause: "Every new conversation's state is rebuilt before its first message is counted: its tombstone, its KV " +
			"value and its messages are read from the server in turn (see ingest: the same rebuilds are most of the " +
			"trigger's waiting there), so a conversation costs three round trips, two of them message gets answered by " +
			"the stream leader, and the handlers of many conversations at once wait on the same server. " +
			r.newConvPartitionsChanged(),
		Plan: "The plan of ingest: the three reads in flight together, direct gets if a replica's answer is enough, " +
			"then partitions over trigger processes on other machines."}, true
}

// tokensGap is the token reduction target, when this run missed it.
func (r *Report) tokensGap() (gap, bool) {
	if !(r.Tokens.Turns > 0 && (r.TokenReduction1000 < 8 || r.SummarizerShare > 0.15)) {
		return gap{}, false
	}
	return gap{
		Title: fmt.Sprintf("Token reduction %.1f× with a summarizer share of %.1f%% (target ≥ 8×, ≤ 15%%)", r.TokenReduction1000, 100*r.SummarizerShare),
		Cause: "See the per-strategy rows.",
		Plan:  "Tune the default strategy's knobs."}, true
}

var docTemplate = template.Must(template.New("doc").Funcs(template.FuncMap{
	"pct":       func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) },
	"pct100":    func(x float64) float64 { return 100 * x },
	"thousands": thousands,
}).Parse(
	`# Benchmarks

For anyone sizing a deployment or judging a change's cost. Back to the [README](../README.md).

Compactor against plain JetStream, each figure against its baseline measured in the same run on
the same server (issue 10). Generated by ` + "`" + `compactor bench` + "`" + `; do not edit by hand. To
regenerate this file and its charts, from the module root:

` + "```sh" + `
{{.Command}}
` + "```" + `

Without ` + "`" + `--nats-url` + "`" + ` the bench starts a standalone nats-server process (` + "`" + `--nats-server PATH` + "`" + `,
else ` + "`" + `nats-server` + "`" + ` on PATH, else it builds the version go.mod pins with the go tool), so
the process measured holds only the client, the trigger and the workers. ` + "`" + `--quick` + "`" + ` runs
small sizes in under a minute; ` + "`" + `--json` + "`" + ` prints every figure as one JSON object. The
machine is shared, so absolute rates move between runs (by a third, on the two cores these
were measured on); the two sides of each ratio ran on it at nearly the same moment, so the
ratios move less.

## Running the bench

` + "`" + `compactor bench` + "`" + ` measures Compactor against plain JetStream, every figure against its
baseline in the same run on the same server: ingest, trigger latency, context reads,
compaction cost beyond the LLM, worker scale-out, the trigger's heap per conversation, and the
tokens compaction saves an agent over 1,000 turns (a seeded simulation over the corpus that
uses the worker's own split and pre-trim code). This file
holds the last full run, its charts and, for each target missed, the cause and the plan. One
command regenerates all of it:

` + "```" + `sh
go run ./cmd/compactor bench --charts docs --doc docs/benchmarks.md --calibrate 5   # about 6 minutes on 2 cores
go run ./cmd/compactor bench --quick                                   # under a minute: the table only
go run ./cmd/compactor bench --quick --json                            # one JSON object (ingest_ratio, trigger_p99_ratio, ...)
go run ./cmd/compactor bench --quick --check docs/benchmarks.md        # compare a quick run with the figures checked below
` + "```" + `

The transcripts it draws on come from ` + "`" + `--corpus DIR` + "`" + `, by default those that ship in
[examples/transcripts](../examples/transcripts/README.md); the run below used the full test
corpus of 142 transcripts. Progress goes to stderr, the table (or JSON) to stdout. Without ` + "`" + `--nats-url` + "`" + ` the bench starts
a nats-server process of its own (` + "`" + `--nats-server PATH` + "`" + `, else ` + "`" + `nats-server` + "`" + ` on PATH, else the
version go.mod pins, built with the go tool, which takes about a minute on a cold build cache;
only without any of them an embedded server, which the output says), so the heap measured is
Compactor's alone. The scale-out's two-process row starts the binary itself twice as worker
processes (its hidden ` + "`" + `bench-worker` + "`" + ` command), and the CPU figure runs the trigger in a
process of its own the same way (` + "`" + `bench-trigger` + "`" + `). Each measurement works in a
namespace of its own (every stream, bucket and consumer name prefixed) that it deletes
afterwards, so ` + "`" + `--nats-url` + "`" + ` never touches the contract's own streams. ` + "`" + `--cpuprofile` + "`" + ` and
` + "`" + `--heapprofile` + "`" + ` write profiles of the bench's process for ` + "`" + `go tool pprof` + "`" + `. The code is in
` + "`" + `internal/bench` + "`" + `, which only the command imports; the charts are drawn with the standard
library and a small built-in bitmap font, so the bench adds no dependency.

The trigger figures (ingest, and the new conversations per second) are measured in three
layouts, ` + "`" + `triggerLayouts` + "`" + ` in the bench's ` + "`" + `rig.go` + "`" + `: one partition, 4 partitions in one
trigger process, and the 4 shared by two trigger processes (two ` + "`" + `triggers.Partitions` + "`" + ` in the
bench's process, each on its own connection). The partition count is a stream setting, so
each layout gets a namespace provisioned with it; the members are announced before the
triggers start and the clock starts only once every partition is owned by exactly one of
them. The JSON adds ` + "`" + `ingest_ratio_4` + "`" + `, ` + "`" + `ingest_ratio_4x2` + "`" + `, ` + "`" + `new_conversations_per_sec_4` + "`" + ` and
` + "`" + `new_conversations_per_sec_4x2` + "`" + `, and a row per layout under ` + "`" + `ingest.rows` + "`" + ` and
` + "`" + `heap.new_conversations` + "`" + `; the drain also reports the CPU the nats-server process used.
` + "`" + `trigger_cpu_s_per_million` + "`" + `, ` + "`" + `server_cpu_s_per_million` + "`" + ` and ` + "`" + `trigger_server_cpu_ratio` + "`" + ` are
ingest's machine-independent figure (CPU time, read from each process), and ` + "`" + `publish_ratio` + "`" + `
is the client's publishing against raw publishing, both with nothing else running. [Targets](#targets) says where the trigger's ingest stands and what is planned.

A running ` + "`" + `compactor serve` + "`" + ` is profiled through ` + "`" + `COMPACTOR_HTTP_LISTEN` + "`" + ` (see [configuration](operations.md#configuration)):
` + "`" + `go tool pprof http://127.0.0.1:9090/debug/pprof/profile?seconds=30` + "`" + `.

## This run

| | |
|---|---|
| date | {{.Started.Format "2006-01-02 15:04 UTC"}} |
| machine | {{.CPUs}} CPUs (nproc){{with .CPUModel}}, {{.}}{{end}}, {{.GOOS}}/{{.GOARCH}} |
| Go | {{.GoVersion}} |
| server | {{.Server}}: {{.ServerNote}} |
| scale-out processes | {{.ScaleOutProcesses}} |
| corpus | {{.CorpusMessages}} messages of the corpus given with --corpus; seed {{.Seed}} |
| sizes | {{if .Quick}}--quick{{else}}full{{end}}; the whole run took {{.Elapsed}} |{{if .LoadStart}}
| load average (1 min) | {{.LoadStart}} at the start, {{.LoadEnd}} at the end: other work on the machine meanwhile shows here |{{end}}

## Results

{{.Table}}
## Charts

![Cumulative input tokens per turn, with and without compaction](tokens.png)

![Worker scale-out: compactions per second by worker slots](workers.png)

![Ingest until the trigger drained, by trigger partitions and trigger processes](trigger.png)

## CPU per message

{{if .Ingest.CPU.Messages}}{{with .Ingest.CPU}}The trigger, in a process of its own, spent **{{printf "%.1f" .TriggerPerMillion}} s of CPU per million
messages** it drained{{if .Ratio}}; the nats-server process spent **{{printf "%.1f" .ServerPerMillion}} s** per million storing them
and serving them to the trigger ({{printf "%.2f" .ServerStoreCPUSeconds}} s and {{printf "%.2f" .ServerDrainCPUSeconds}} s for these {{.Messages}} messages). The
trigger costs **{{printf "%.2f" .Ratio}}×** the CPU of the server that stores the messages{{else}}. {{.Note}}{{end}}. These are CPU
time, not wall time: they depend much less on how busy the machine was than the rates above
do (contention, the cores' speed and how much each side batches still move them), so they
carry to other machines better than any rate (` + "`" + `go run ./cmd/compactor bench --only ingest` + "`" + `).
{{if .BareMicros}}
Side by side with plain JetStream, per message: the trigger's own CPU **{{printf "%.2f" .TriggerMicros}} µs** against
**{{printf "%.2f" .BareMicros}} µs** of a bare nats.go pull consumer acknowledging each message ({{printf "%.2f" .TriggerBareRatio}}×){{if .ServeBareMicros}}, and the
server's serving it **{{printf "%.2f" .ServeTriggerMicros}} µs** against **{{printf "%.2f" .ServeBareMicros}} µs** for the bare consumer ({{printf "%.2f" .ServeBareRatio}}×;
storing a message costs it {{printf "%.2f" .StoreMicros}} µs){{end}}. The trigger acknowledges up to 64 messages with one
acknowledgement (its consumer's ack policy is all; see [design](design.md)); the bare consumer
acknowledges each, as the trigger did before.{{end}}{{end}}{{with .Ingest}}{{if .PipelineCPURatio}}
The whole pipeline, publisher + server + consumer, spent **{{printf "%.2f" .PipelineMicros}} µs** of CPU per message against
**{{printf "%.2f" .PlainMicros}} µs** on plain JetStream: **{{printf "%.2f" .PipelineCPURatio}}×** (target ≤ 1.6). The publisher's part: the client
{{printf "%.2f" .PublishCPU.ClientMicros}} µs against raw asynchronous publishing's {{printf "%.2f" .PublishCPU.RawMicros}} µs (target: at most 1 µs more).
{{end}}{{end}}{{else}}The ingest measurement did not run.{{end}}
## How each figure is measured

1. **Ingest.** {{.Ingest.Messages}} corpus messages ({{.Ingest.PayloadBytes}} bytes) over {{.Ingest.Conversations}}
   conversations, round-robin. Baseline: asynchronous publishing of the same payloads to a
   plain file stream shaped like CHAT, with a bare pull consumer acknowledging each message;
   the time until the last is acknowledged (the median of 3 runs). Compactor: the same messages through
   ` + "`" + `pipeline.Client.PublishBatch` + "`" + ` while a real trigger and a pool of 4 workers (go-openai against
   an httptest LLM answering at once) run, at a 16k window so conversations compact while they
   are published; the time until the trigger acknowledged the last message. The lag (stored,
   not yet acknowledged by the trigger) is sampled every 50 ms. Both sides keep at most 2,000
   publishes in flight. The trigger's own drain rate (the same messages stored first), with the
   CPU the bench's process and the nats-server process used meanwhile, and the client's
   publishing rate while the trigger runs are reported beside it. Every row runs in three trigger layouts,
   each in a namespace of its own, since the partition count is the streams' setting
   (` + "`" + `jetstream.Config.TriggerPartitions` + "`" + `): one partition (the contract's single trigger), 4
   partitions in one trigger process, and the 4 shared by two trigger processes (two
   ` + "`" + `triggers.Partitions` + "`" + ` in the bench's process, each on its own connection, as two processes
   would be; 500 ms heartbeat). The members are announced before the triggers start, as
   processes already running would be, so no partition moves during the run, and publishing
   starts once every partition is owned by exactly one of them (` + "`" + `Partitions.Owned` + "`" + `).
   Drained means every partition's consumer has nothing pending and nothing unacknowledged.
   **Publishing alone** ({{.Ingest.AloneMessages}} messages): raw asynchronous publishing and the client's
   ` + "`" + `PublishBatch` + "`" + `, each into a namespace where nothing else runs (no trigger, no workers, no
   consumer taking messages; each stream has one idle durable consumer), 3 rounds each,
   alternating, the median of each; ` + "`" + `publish_ratio` + "`" + ` is client ÷ raw. Both keep at most 2,000
   publishes in flight; the batch waits on its acknowledgements in order, as nats.go does for
   the raw side, and checks and encodes its messages on a goroutine of its own. **CPU per message**
   ({{.Ingest.CPU.Messages}} messages): the messages are stored first (raw asynchronous publishes into CHAT,
   nothing consuming), then one unpartitioned trigger drains them in a process of its own (the
   binary's hidden ` + "`" + `bench-trigger` + "`" + ` command: it connects and builds its trigger, then starts
   consuming when told, so its start-up is not counted). The trigger's CPU is its process's
   user and system time from /proc/PID/stat over the drain; the server's is the nats-server
   process's, over the storing and over the drain (delivery, acknowledgements and the
   trigger's reads and requests), both per million messages; ` + "`" + `trigger_server_cpu_ratio` + "`" + ` is
   trigger ÷ server. With an embedded server (or ` + "`" + `--nats-url` + "`" + `) the server's CPU is not the
   bench's to read, and the ratio is reported as not available. After the trigger, a bare
   durable pull consumer in the bench's process (no filter, no priority group, the trigger's max
   ack pending; nothing else runs in that process meanwhile) drains the same messages,
   acknowledging each, its completion seen in its own callback rather than polled: the plain
   baseline, the bench's CPU and the server's read around it (` + "`" + `trigger_bare_cpu_ratio` + "`" + `,
   ` + "`" + `serve_bare_cpu_ratio` + "`" + `). Publishing alone also reads the CPU of the bench's process and of
   the server around each round's publishing (the namespace's set-up left out):
   ` + "`" + `publish_cpu_ratio` + "`" + ` is the client's CPU per message ÷ raw's. ` + "`" + `pipeline_cpu_ratio` + "`" + ` sums
   the parts of each side: the client's publishing, the server storing it, serving it to the
   trigger, the trigger; against raw publishing, storing, serving the bare consumer, the bare
   consumer.
   Reproduce: ` + "`" + `go run ./cmd/compactor bench --only ingest` + "`" + `.
2. **Trigger latency.** Background load at half the pipeline's ingest rate over 500 conversations
   (tracked before the probes start), and every 25 ms a probe: a conversation already at 70% of
   its window gets 10% more; the latency is from the publish to its compaction request on the
   work queue (a core subscription on the request subjects). Baseline: the same load and probes
   on a plain stream, from the publish to a bare consumer's delivery: one hop, where the
   trigger's path has two (the message to the trigger, then its request through the server).
   It is not a request-reply round trip. Reproduce: ` + "`" + `go run ./cmd/compactor bench --only ingest,latency` + "`" + `
   (the load's rate comes from the ingest figure; alone it is 2,000 msgs/s).
3. **Context read.** A {{.Read.Messages}}-message conversation (the corpus files one after the
   other) compacted once by a real worker, then ` + "`" + `pipeline.Client.Context` + "`" + ` (KV value, pinned
   messages, tail, assembly), median of {{.Read.Repeats}}. Baselines: replaying the conversation's
   subject with an ordered consumer (decoding each message), and the floor: one KV get plus
   one batched direct get from the tail start. Reproduce: ` + "`" + `go run ./cmd/compactor bench --only read` + "`" + `.
4. **Compaction cost beyond the LLM.** One worker slot; a conversation of N messages compacted
   once (every message new), then five times after 40 more messages each (median). The time
   from queueing the request to its completed event, less the time the go-openai calls took
   (the LLM answers at once; the HTTP round trips are counted as LLM time). The content is
   held equal: every history is the same block of corpus messages (the first ones, cut where
   no tool call is left open) repeated a whole number of times, and the 40-message additions
   are the same at every length, so the rows differ in length alone and the growth is the
   cost of length. Reproduce: ` + "`" + `go run ./cmd/compactor bench --only cost` + "`" + `.
5. **Worker scale-out.** Pools of 1 to 16 slots started first, in the bench's process, and the
   largest also as two worker processes of half the slots each (the binary's hidden
   ` + "`" + `bench-worker` + "`" + ` command, a real pool on its own connection); then one request each for fresh
   conversations (8 per slot) is queued, and the time runs until every one
   completed or was declined. Each conversation is corpus messages from its own file on, at
   least 30 and at least 4,000 tokens by the project's estimate: twice the 2,000-token target
   of its 4,000-token window, so the worker always has messages to cover. A decline is
   counted in its row (` + "`" + `declined` + "`" + `, and ` + "`" + `scaleout_declined` + "`" + ` over all rows), not an abort, and
   the rate counts completed compactions only. The LLM answers every call after 200 ms.
   Reproduce: ` + "`" + `go run ./cmd/compactor bench --only scaleout` + "`" + `.
6. **Trigger heap.** {{.Heap.Conversations}} conversations of one message each stored first; the
   live heap after GC before a trigger starts and once it tracks every conversation and
   acknowledged every message, per conversation, and the process's resident set (VmRSS of
   /proc/self/status, after a GC that returns freed memory to the system) at the same two
   moments, per conversation: what the machine pays, the heap with the runtime's spare and
   fragmented pages. The same conversations are then taken on by a trigger in a process of
   its own (` + "`" + `bench-trigger` + "`" + `), its VmRSS read after a GC it is told to do before it starts
   and once it acknowledged every message: the trigger's resident memory alone
   (` + "`" + `trigger_process_rss_bytes_per_conversation` + "`" + `, and ` + "`" + `rss_bytes_per_conversation` + "`" + ` when
   measured). The rate it takes them on is the new
   conversations per second, measured again, with the same conversations in namespaces of
   their own, for the 4-partition layouts of figure 1 (the clock starts as the triggers start,
   for every layout). Reproduce: ` + "`" + `go run ./cmd/compactor bench --only heap --heapprofile heap.pprof` + "`" + `.
7. **Token economics.** A seeded simulation (` + "`" + `--seed` + "`" + `), no server: {{.Tokens.Sessions}} sessions of
   {{.Tokens.Turns}} turns, each starting with a system prompt of the corpus and each turn one unit of
   the corpus (a single message, or a whole tool round), drawn at random; tokens by the
   project's estimator (` + "`" + `schemas/tokens` + "`" + `). Each turn sends the whole context. Without
   compaction the context is the whole history. With compaction the policy's defaults at a
   {{.Tokens.Window}}-token window apply: when the context reaches the threshold the strategy
   (` + "`" + `split.Apply` + "`" + `, the worker's own code) chooses the tail, the covered messages are pre-trimmed
   (` + "`" + `pretrim.ToolOutputs` + "`" + `) and summarized with the previous summary; the summarizer reads
   ` + "`" + `summarizer.PromptOverhead` + "`" + ` plus that and writes a summary of {{.Tokens.SummaryModel}}.
   Ahead of time (soft threshold 0.6): the compaction starts in the background and lands 2 s
   later (a turn takes 3 s); a turn waits only if it reaches the threshold first. Inline: the
   turn that reaches the threshold waits the 2 s. Reproduce: ` + "`" + `go run ./cmd/compactor bench --only tokens` + "`" + `.
8. **The proxy.** {{if .Proxy.Turns}}{{.Proxy.Turns}} turns of an agent loop ({{.Proxy.History}} corpus messages: the
   corpus files one after the other, each up to its last answered tool call; a turn is each
   assistant message) at a {{.Proxy.Window}}-token window, with a real trigger and one worker slot
   (the LLM answering at once). Each turn the agent's whole history up to the assistant message
   is sent as a Chat Completions request twice with the same body: straight to a fake upstream
   and through the proxy (` + "`" + `internal/proxy` + "`" + ` in this process, over HTTP) to another; both answer at
   once with that assistant message. The added latency is the per-turn difference, its p50
   and p99 against a NATS request-reply round trip on the same server (one client, one
   responder) measured after the loop. Tokens are the proxy's ` + "`" + `X-Compactor-Tokens-Client` + "`" + ` and
   ` + "`" + `-Sent` + "`" + ` headers summed; the stored messages are read back from CHAT at the end. Each fake
   upstream counts as cached the bytes its request shares as a prefix with the previous one (a
   prompt cache holding the previous request, 4 bytes to a token). Reproduce: ` + "`" + `go run
   ./cmd/compactor bench --only proxy` + "`" + `.{{else}}The proxy's measurement did not run.{{end}}
9. **Durability.** {{if .Durability.Messages}}{{.Durability.Messages}} corpus messages published through the client
   (` + "`" + `PublishBatch` + "`" + `, every ack in) on two fresh servers of this run's kind side by side: one syncing
   every write before acknowledging it (` + "`" + `sync_interval: always` + "`" + `, what Compactor ships,
   [Durability below the process](guarantees.md#durability-below-the-process)), one flushing every 2
   minutes (nats-server's default), 3 rounds each, alternating; the ratio is of their medians. Every other
   measurement runs on nats-server's default. The cost is the disk's: an fsync per write. Reproduce:
   ` + "`" + `go run ./cmd/compactor bench --only durability` + "`" + `.{{else}}The durability measurement did not run{{with .Durability.Note}} ({{.}}){{end}}.{{end}}

Each reproduction adds ` + "`" + `--corpus DIR` + "`" + ` for the corpus this run used, and ` + "`" + `--quick` + "`" + ` for the
smaller sizes.

The hot pure functions have ` + "`go test -bench`" + ` benchmarks beside them (the corpus is their input):

` + "```sh" + `
go test ./schemas ./schemas/tokens ./schemas/assemble ./summarizer/split ./summarizer/pretrim -run '^$' -bench . -benchmem
` + "```" + `

## Targets
{{with .Gaps}}
Targets this run did not meet, with the cause found and the plan:
{{range .}}
### {{.Title}}

{{.Cause}}

Plan: {{.Plan}}
{{end}}{{else}}
Every target was met in this run.
{{end}}
## Checked figures

{{with .Check}}CI runs ` + "`" + `compactor bench --quick --check docs/benchmarks.md` + "`" + ` (bounded by ` + "`" + `timeout` + "`" + `) and fails
when a figure below and the quick run's disagree by more than the figure's band. Only ratios
are checked, each side of which ran on the same machine at nearly the same moment. The
figures are the median of {{.Runs}} quick runs made with this file (` + "`" + `--calibrate {{.Runs}}` + "`" + `), since a
quick run's workloads are smaller than the full run's above; each band is twice the runs'
widest spread from the median, in ratio, leaving out the one run furthest from it, and at
least ±50% for a ratio of two rates, ±25% for the CPU ratio and ±10% for the simulation's
figures (floors from this machine's quick runs, which moved that much between a quiet
hour and a busy one): a figure agrees when it is within median ÷ (1 + band) and median × (1 + band), and
the check fails only on a figure outside its band in two quick runs, so one stall of the
machine fails neither the calibration nor the check. A band is as wide as the machine was
noisy while the quick runs ran ({{$.LoadStart}} load average at the start of the run above): a
wide one checks little, and a run on a quieter machine narrows it. The trigger's latency is
checked at the median (` + "`" + `trigger_p50_ratio` + "`" + `), since a quick run's p99 is one of its 100 probes.

| figure | median of the quick runs | runs' spread | band | agrees between |
|---|---|---|---|---|
{{range .Figures}}| {{.Key}} | {{printf "%.3g" .Value}} | {{printf "%.3g" .Min}} to {{printf "%.3g" .Max}} | ±{{printf "%.0f" (pct100 .Noise)}}% | {{printf "%.3g" .Low}} to {{printf "%.3g" .High}} |
{{end}}{{else}}This run made no check figures (` + "`" + `--calibrate N` + "`" + ` makes them from N quick runs).
{{end}}
## Past one machine

Every figure above is one process against one server on two cores; each grows along its own
axis. **Workers** share nothing but the work queue: a request goes to one free slot of any
process (a pull consumer fetching only for free slots), so compactions per second grow with
slots × processes until the LLM endpoint's rate limit, which is the real ceiling (on two
cores, the 200 ms LLM leaves the CPU mostly idle, so the slots scale; with a real LLM the CPU
per job is the non-LLM cost of figure 4, a few milliseconds). **The trigger** is one active
consumer by design (one pinned consumer, standbys for failover), so ingest past one trigger
process's rate needs **trigger partitions**: conversations hashed to partitions, one active
consumer per partition, each in any process (` + "`COMPACTOR_TRIGGER_PARTITIONS`" + `,
[Scaling the trigger](operations.md#scaling-the-trigger)). Figures 1 and 6 measure 4 partitions in one and in two trigger
processes; on one machine, sharing its cores with the server, they show what partitions cost
and whether the server's answers, not the trigger's handlers, are the limit, while the gain
they are for, processes on machines of their own, needs more than one machine to show. The
trigger's memory is per tracked conversation and evicted when idle, so it grows with active
conversations, not with history. **A JetStream cluster** (R3 streams, ` + "`COMPACTOR_REPLICAS=3`" + `) costs every write a
quorum round trip, so raw and pipeline ingest both drop by about the same factor on the same
network, while reads scale out: direct gets are answered by any replica
(` + "`AllowDirect`" + `), so context reads grow with replicas, and the reader's cost stays one KV get
plus a batch of the tail, independent of history. Subjects per conversation spread the
streams' load evenly, and past one cluster's write rate, conversations can be split across
streams or accounts by id prefix, since nothing in Compactor spans conversations.

### Trigger processes for a fleet

{{with .Projection}}From the trigger's measured CPU per message (see [CPU per message](#cpu-per-message)), the trigger
processes a fleet needs at a given rate of messages:

| fleet rate | trigger CPU | cores planned (busy ≤ {{pct100 $.Busy | printf "%.0f"}}%) | trigger processes of {{$.CoresPerProcess}} cores | partitions | nats-server CPU, for scale |
|---|---|---|---|---|---|
{{range .}}| {{thousands .Rate}} msgs/s | {{printf "%.2f" .TriggerCores}} cores | {{printf "%.2f" .PlannedCores}} | {{.Processes}} | {{.Partitions}} | {{if .ServerCores}}{{printf "%.2f" .ServerCores}} cores{{else}}not measured{{end}} |
{{end}}
It assumes: partitions spread the trigger's work linearly over processes on machines of their
own (conversations hash evenly to partitions and nothing is shared between them but the
server; on one machine, figure 1's partitioned rows show no gain, because they share its
cores); the CPU per message of one partition holds with more (the partitioned layouts were
not measured for CPU); a fleet's messages are like the corpus's in size and tool calls; a
trigger process's cores are its own, planned busy at most {{pct100 $.Busy | printf "%.0f"}}% of the time (headroom for
bursts, the rebuilds after a restart and partitions moving); the partitions are a power of
two at least the processes, so each process owns at least one. The nats-server's CPU is
not included in the trigger's count: the server cluster is sized on its own (its column is
this run's server CPU per message at the same rate, one server, R1); neither are the workers,
whose cost is per compaction, not per message.
{{else}}The trigger's CPU per message was not measured in this run, so there is no projection.
{{end}}`))

// WriteMarkdown writes docs/benchmarks.md: how to regenerate it, the machine, the
// table, the charts (written by WriteCharts beside it), the methods, the missed targets
// with their causes and plans, and how each figure scales past one machine.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	data := struct {
		*Report
		Table           string
		CPUModel        string
		Gaps            []gap
		Projection      []ProjectionRow
		Busy            float64
		CoresPerProcess int
	}{r, table.String(), cpuModel(), r.gaps(), Projection(r.Ingest.CPU), projectionBusy, projectionCoresPerProcess}
	var out bytes.Buffer
	if err := docTemplate.Execute(&out, data); err != nil {
		return err
	}
	if r.Check != nil {
		c, err := r.Check.checkComment()
		if err != nil {
			return err
		}
		out.WriteString("\n" + c)
	}
	_, err := w.Write(out.Bytes())
	return err
}
