package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Report is one run's figures. The headline keys come first (see Headline); the
// measurements' details follow.
type Report struct {
	Headline

	// Command is the command line that produced the report (set by the caller).
	Command        string    `json:"command"`
	Quick          bool      `json:"quick"`
	Seed           uint64    `json:"seed"`
	GoVersion      string    `json:"go_version"`
	GOOS           string    `json:"goos"`
	GOARCH         string    `json:"goarch"`
	CPUs           int       `json:"cpus"`
	Server         string    `json:"server"`
	ServerNote     string    `json:"server_note"`
	CorpusMessages int       `json:"corpus_messages"`
	Started        time.Time `json:"started"`
	Elapsed        string    `json:"elapsed"`
	// LoadStart and LoadEnd are the machine's load average (1 minute) when the run started
	// and ended ("" where unknown): other work on a shared machine moves the figures.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`

	Ingest   IngestReport  `json:"ingest"`
	Latency  LatencyReport `json:"latency"`
	Read     ReadReport    `json:"read"`
	Cost     []CostRow     `json:"cost"`
	ScaleOut []ScaleRow    `json:"scaleout"`
	// ScaleOutProcesses says what the scale-out's multi-process row ran as.
	ScaleOutProcesses string `json:"scaleout_processes"`
	// ScaleOutDeclined is how many scale-out compactions were declined, over every row.
	ScaleOutDeclined int        `json:"scaleout_declined"`
	Heap             HeapReport `json:"heap"`
	// Check is the figures a doc states for the quick check (--calibrate), when made.
	Check      *CheckFile       `json:"check,omitempty"`
	Tokens     TokenReport      `json:"tokens"`
	Proxy      ProxyReport      `json:"proxy"`
	Durability DurabilityReport `json:"durability"`
}

// Headline holds the figures the issue names, each against its baseline of the same
// run (0 when its measurement did not run).
type Headline struct {
	// IngestRatio: pipeline publish-until-trigger-drained ÷ raw publish + bare consumer
	// (one trigger partition).
	IngestRatio float64 `json:"ingest_ratio"`
	// IngestRatio4 is IngestRatio with 4 trigger partitions in one trigger process,
	// IngestRatio4x2 with the 4 shared by two trigger processes.
	IngestRatio4   float64 `json:"ingest_ratio_4"`
	IngestRatio4x2 float64 `json:"ingest_ratio_4x2"`
	// PublishRatio: the pipeline client's publishing alone ÷ raw asynchronous publishing
	// alone (nothing else running on either side).
	PublishRatio float64 `json:"publish_ratio"`
	// TriggerCPUPerMillion and ServerCPUPerMillion: CPU seconds per million messages of
	// the trigger (draining) and of the nats-server (storing them and serving the
	// trigger), each read from its own process; TriggerServerCPURatio is their ratio (0
	// when the server's CPU could not be read). See CPUReport.
	TriggerCPUPerMillion  float64 `json:"trigger_cpu_s_per_million"`
	ServerCPUPerMillion   float64 `json:"server_cpu_s_per_million"`
	TriggerServerCPURatio float64 `json:"trigger_server_cpu_ratio"`
	// PipelineCPURatio: the CPU a message costs through Compactor ÷ on plain JetStream
	// (IngestReport.PipelineCPURatio), all of it CPU time read from the processes.
	PipelineCPURatio float64 `json:"pipeline_cpu_ratio"`
	// PublishCPURatio: the client's CPU per message publishing alone ÷ raw asynchronous
	// publishing's; PublishOverheadMicros their difference in µs.
	PublishCPURatio       float64 `json:"publish_cpu_ratio"`
	PublishOverheadMicros float64 `json:"publish_overhead_us_per_msg"`
	// TriggerBareCPURatio: the trigger's CPU per message draining ÷ a bare consumer's
	// acknowledging each; ServeBareCPURatio: the server's CPU serving the trigger ÷
	// serving the bare consumer.
	TriggerBareCPURatio float64 `json:"trigger_bare_cpu_ratio"`
	ServeBareCPURatio   float64 `json:"serve_bare_cpu_ratio"`
	// TriggerP99Ratio: the trigger's p99 latency ÷ a bare JetStream publish until a
	// consumer's delivery (one hop), under the same load.
	TriggerP99Ratio float64 `json:"trigger_p99_ratio"`
	// TriggerP50Ratio is the same at the median.
	TriggerP50Ratio float64 `json:"trigger_p50_ratio"`
	// ReadSpeedup: ordered-consumer replay time ÷ context read time.
	ReadSpeedup float64 `json:"read_speedup"`
	// ReadOverFloor: context read time ÷ (one KV get + one batched direct get).
	ReadOverFloor float64 `json:"read_over_floor"`
	// ScaleOut8: compactions/s with 8 worker slots ÷ with 1.
	ScaleOut8 float64 `json:"scaleout_8"`
	// BytesPerConversation: the trigger's live heap per tracked conversation;
	// RSSPerConversation: resident memory per tracked conversation, of the trigger's
	// own process when it ran in one, else of the bench's process.
	BytesPerConversation float64 `json:"bytes_per_conversation"`
	RSSPerConversation   float64 `json:"rss_bytes_per_conversation"`
	// NewConversationsPerSec: new conversations the trigger takes on per second.
	NewConversationsPerSec float64 `json:"new_conversations_per_sec"`
	// NewConversationsPerSec4 and NewConversationsPerSec4x2: the same with 4 trigger
	// partitions in one process, and over two.
	NewConversationsPerSec4   float64 `json:"new_conversations_per_sec_4"`
	NewConversationsPerSec4x2 float64 `json:"new_conversations_per_sec_4x2"`
	// CostGrowth: incremental compaction cost (beyond the LLM) at the largest history
	// ÷ at the smallest; 1 is flat.
	CostGrowth float64 `json:"cost_growth"`
	// TokenReduction1000: cumulative input tokens over 1,000 turns without compaction ÷
	// with it (summarizer tokens included).
	TokenReduction1000 float64 `json:"token_reduction_1000"`
	// SummarizerShare: the summarizer's tokens ÷ all tokens with compaction.
	SummarizerShare float64 `json:"summarizer_share"`
	// ProxyAddedP50Ratio and ProxyAddedP99Ratio: the proxy's added latency per turn ÷ a
	// NATS request-reply round trip, at the median and at p99; ProxyTokenRatio: tokens
	// the proxy forwarded ÷ tokens the agent sent, over the agent loop.
	ProxyAddedP50Ratio float64 `json:"proxy_added_p50_ratio"`
	ProxyAddedP99Ratio float64 `json:"proxy_added_p99_ratio"`
	ProxyTokenRatio    float64 `json:"proxy_token_ratio"`
	// SyncIngestRatio: the client's publishing on a server that syncs every write ÷ on
	// one that flushes every 2 minutes (what the shipped durability costs ingest).
	SyncIngestRatio float64 `json:"sync_ingest_ratio"`
}

// Finish fills the headline from the measurements.
func (r *Report) Finish() {
	h := &r.Headline
	for _, x := range r.Ingest.Rows {
		switch (triggerLayout{x.Partitions, x.Processes}) {
		case triggerLayout{1, 1}:
			h.IngestRatio = x.Ratio
		case triggerLayout{4, 1}:
			h.IngestRatio4 = x.Ratio
		case triggerLayout{4, 2}:
			h.IngestRatio4x2 = x.Ratio
		}
	}
	for _, x := range r.Heap.NewConversations {
		switch (triggerLayout{x.Partitions, x.Processes}) {
		case triggerLayout{4, 1}:
			h.NewConversationsPerSec4 = x.PerSec
		case triggerLayout{4, 2}:
			h.NewConversationsPerSec4x2 = x.PerSec
		}
	}
	h.TriggerCPUPerMillion, h.ServerCPUPerMillion, h.TriggerServerCPURatio = r.Ingest.CPU.TriggerPerMillion, r.Ingest.CPU.ServerPerMillion, r.Ingest.CPU.Ratio
	h.PublishRatio = r.Ingest.PublishRatio
	h.PublishCPURatio, h.PublishOverheadMicros = r.Ingest.PublishCPU.Ratio, r.Ingest.PublishCPU.OverheadMicros
	h.TriggerBareCPURatio, h.ServeBareCPURatio = r.Ingest.CPU.TriggerBareRatio, r.Ingest.CPU.ServeBareRatio
	h.PipelineCPURatio = r.Ingest.PipelineCPURatio
	h.TriggerP99Ratio, h.TriggerP50Ratio = r.Latency.P99Ratio, r.Latency.P50Ratio
	h.ReadSpeedup, h.ReadOverFloor = r.Read.Speedup, r.Read.OverFloor
	for _, s := range r.ScaleOut {
		if s.Slots == 8 && s.Processes == 1 {
			h.ScaleOut8 = s.Speedup
		}
	}
	h.BytesPerConversation, h.NewConversationsPerSec = r.Heap.BytesPerConversation, r.Heap.NewPerSec
	h.RSSPerConversation = r.Heap.RSSPerConversation
	if x := r.Heap.TriggerProcessRSSPerConversation; x > 0 {
		h.RSSPerConversation = x // the trigger alone in its process
	}
	if n := len(r.Cost); n > 1 && r.Cost[0].IncrementalMs > 0 {
		h.CostGrowth = r.Cost[n-1].IncrementalMs / r.Cost[0].IncrementalMs
	}
	h.TokenReduction1000, h.SummarizerShare = r.Tokens.Reduction, r.Tokens.SummarizerShare
	h.ProxyAddedP50Ratio, h.ProxyAddedP99Ratio, h.ProxyTokenRatio = r.Proxy.AddedP50Ratio, r.Proxy.AddedP99Ratio, r.Proxy.TokenRatio
	h.SyncIngestRatio = r.Durability.Ratio
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// target is one figure's goal.
type target struct {
	ok   bool
	text string
}

func check(ok bool, text string) target { return target{ok, text} }

func (t target) String() string {
	if t.ok {
		return "met (" + t.text + ")"
	}
	return "NOT MET (" + t.text + ")"
}

// WriteTable writes the figures as a Markdown table, one row per figure: what was
// measured, the figure, its baseline, the ratio, and the target.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	row := func(cells ...string) { fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | ")) }
	row("measurement", "Compactor", "baseline (same run, same server)", "ratio", "target")
	row("---", "---", "---", "---", "---")
	r.ingestRows(row)
	if lr := r.Latency; lr.Probes > 0 {
		row(fmt.Sprintf("2. trigger latency (over threshold → request queued), %d probes under %s", lr.Probes, rate(lr.LoadMsgsPerSec, "msgs/s")),
			fmt.Sprintf("p50 %.2f ms, p90 %.2f ms, p99 %.2f ms", lr.TriggerP50Ms, lr.TriggerP90Ms, lr.TriggerP99Ms),
			fmt.Sprintf("bare publish → consumer delivery (one hop) p50 %.2f ms, p90 %.2f ms, p99 %.2f ms", lr.RawP50Ms, lr.RawP90Ms, lr.RawP99Ms),
			fmt.Sprintf("p50 %s, p99 %s", f2(lr.P50Ratio), f2(lr.P99Ratio)), check(lr.P99Ratio <= 3, "p99 ≤ 3").String())
	}
	if rr := r.Read; rr.Messages > 0 {
		row(fmt.Sprintf("3. context read of a %d-message conversation (compacted, tail %d msgs)", rr.Messages, rr.TailMessages),
			fmt.Sprintf("%.2f ms", rr.ReadMs),
			fmt.Sprintf("ordered-consumer replay %.1f ms; KV get + one batch %.2f ms", rr.ReplayMs, rr.FloorMs),
			fmt.Sprintf("%.0fx faster; %.2fx the floor", rr.Speedup, rr.OverFloor),
			check(rr.Speedup >= 10 && rr.OverFloor <= 3, "≥ 10x replay, ≤ 3x floor").String())
	}
	for _, c := range r.Cost {
		row(fmt.Sprintf("4. compaction cost beyond the LLM, %d-message history (the same %d corpus messages repeated)", c.History, c.Block),
			fmt.Sprintf("incremental (+%d msgs) %.1f ms", c.NewMessages, c.IncrementalMs),
			fmt.Sprintf("first compaction of the whole history %.1f ms (%d LLM calls)", c.FirstMs, c.FirstLLMCalls),
			"", "")
	}
	if len(r.Cost) > 1 {
		row("4. incremental cost growth, largest ÷ smallest history", "", "", f2(r.CostGrowth), check(r.CostGrowth <= 1.5, "flat: ≤ 1.5").String())
	}
	for _, s := range r.ScaleOut {
		t := ""
		if s.Slots == 8 && s.Processes == 1 {
			t = check(s.Speedup >= 7, "≥ 7").String()
		}
		row(fmt.Sprintf("5. worker scale-out, %d slots in %d process(es), LLM 200 ms, %d jobs (%d declined)", s.Slots, s.Processes, s.Jobs, s.Declined),
			fmt.Sprintf("%.1f compactions/s", s.PerSec), "1 slot", f2(s.Speedup)+"x", t)
	}
	if hr := r.Heap; hr.Conversations > 0 {
		where := "server in another process"
		if hr.ServerInProcess {
			where = "server in this process: includes its share"
		}
		row(fmt.Sprintf("6. trigger heap after GC per tracked conversation, %d conversations (%s)", hr.Conversations, where),
			fmt.Sprintf("%.0f B live heap", hr.BytesPerConversation), rssCell(hr), "",
			check(hr.BytesPerConversation <= 512, "heap ≤ 512 B").String())
		for _, x := range hr.NewConversations {
			row(fmt.Sprintf("6. new conversations taken on by the trigger, %d partition(s) in %d trigger process(es)", x.Partitions, x.Processes),
				rate(x.PerSec, "convs/s"), "", "", check(x.PerSec >= 10000, "≥ 10,000/s").String())
		}
	}
	if tr := r.Tokens; tr.Turns > 0 {
		row(fmt.Sprintf("7. cumulative input tokens, %d sessions × %d turns, %dk window, %s inline at the threshold", tr.Sessions, tr.Turns, tr.Window/1000, tr.Strategy),
			fmt.Sprintf("%s (agent %s + summarizer %s in, %s out; %.0f compactions)", tok(tr.With+tr.SummarizerIn+tr.SummarizerOut), tok(tr.With), tok(tr.SummarizerIn), tok(tr.SummarizerOut), tr.Compactions),
			"without compaction "+tok(tr.Without), fmt.Sprintf("%.1fx fewer", tr.Reduction), check(tr.Reduction >= 8, "≥ 8x").String())
		row("7. summarizer's share of the tokens", fmt.Sprintf("%.1f%%", 100*tr.SummarizerShare), "", "", check(tr.SummarizerShare <= 0.15, "≤ 15%").String())
		for _, s := range append(tr.Strategies, tr.Ahead) {
			row("7. strategy "+s.Strategy, fmt.Sprintf("%s (summarizer %.1f%%, %.0f compactions)", tok(s.With+s.SummarizerIn+s.SummarizerOut), 100*s.SummarizerShare, s.Compactions),
				"without compaction "+tok(tr.Without), fmt.Sprintf("%.1fx fewer", s.Reduction), "")
		}
		row("7. turn latency added by compaction (2 s summarizer), p50 / p99 over the turns a compaction was due",
			fmt.Sprintf("ahead of time: %.0f / %.0f ms", tr.AheadAddedP50Ms, tr.AheadAddedP99Ms),
			fmt.Sprintf("inline: %.0f / %.0f ms", tr.InlineAddedP50Ms, tr.InlineAddedP99Ms), "", "")
	}
	if pr := r.Proxy; pr.Turns > 0 {
		row(fmt.Sprintf("8. proxy's added latency per turn, %d-turn agent loop (%d messages) at a %dk window, upstream answering at once", pr.Turns, pr.History, pr.Window/1000),
			fmt.Sprintf("p50 %.2f ms, p99 %.2f ms (through the proxy p50 %.2f ms; straight p50 %.2f ms)", pr.AddedP50Ms, pr.AddedP99Ms, pr.ProxyP50Ms, pr.DirectP50Ms),
			fmt.Sprintf("NATS request-reply round trip p50 %.3f ms, p99 %.3f ms", pr.RTTP50Ms, pr.RTTP99Ms),
			fmt.Sprintf("p50 %s, p99 %s", f2(pr.AddedP50Ratio), f2(pr.AddedP99Ratio)), "")
		row("8. tokens the proxy forwarded ÷ tokens the agent sent, over the loop",
			fmt.Sprintf("%s forwarded (largest turn %s; %d over the window; %d cut at read time; generation %d)", tok(float64(pr.SentTokens)), tok(float64(pr.MaxSentTokens)), pr.OverWindow, pr.Cut, pr.Generations),
			"the agent sent "+tok(float64(pr.ClientTokens)), f2(pr.TokenRatio),
			check(pr.OverWindow == 0 && pr.Stored == pr.History, fmt.Sprintf("none over the window; each message stored once: %d of %d", pr.Stored, pr.History)).String())
		billed := func(in, cached int64, price float64) float64 { return float64(in-cached) + price*float64(cached) }
		row("8. the upstream's input tokens over the loop: not served from a prompt cache (one holding the previous request), and billed with cached input at 0.1 (Anthropic) and 0.5 (OpenAI) of the price",
			fmt.Sprintf("through the proxy: %s uncached of %s (%.0f%% cached); billed as %s at 0.1, %s at 0.5", tok(float64(pr.ProxyInput-pr.ProxyCached)), tok(float64(pr.ProxyInput)),
				100*share(pr.ProxyCached, pr.ProxyInput), tok(billed(pr.ProxyInput, pr.ProxyCached, 0.1)), tok(billed(pr.ProxyInput, pr.ProxyCached, 0.5))),
			fmt.Sprintf("straight: %s uncached of %s (%.0f%% cached); billed as %s at 0.1, %s at 0.5", tok(float64(pr.DirectInput-pr.DirectCached)), tok(float64(pr.DirectInput)),
				100*share(pr.DirectCached, pr.DirectInput), tok(billed(pr.DirectInput, pr.DirectCached, 0.1)), tok(billed(pr.DirectInput, pr.DirectCached, 0.5))),
			fmt.Sprintf("billed %s at 0.1, %s at 0.5", f2(ratio(billed(pr.ProxyInput, pr.ProxyCached, 0.1), billed(pr.DirectInput, pr.DirectCached, 0.1))),
				f2(ratio(billed(pr.ProxyInput, pr.ProxyCached, 0.5), billed(pr.DirectInput, pr.DirectCached, 0.5)))), "")
	}
	if dr := r.Durability; dr.Ratio > 0 {
		row(fmt.Sprintf("9. the client's publishing, %d messages, on a server that syncs every write (sync_interval: always, the shipped setting)", dr.Messages),
			rate(dr.SyncMsgsPerSec, "msgs/s"), "flushing every 2 minutes (nats-server's default): "+rate(dr.IntervalMsgsPerSec, "msgs/s"),
			f2(dr.Ratio), "")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ratio is a ÷ b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// share is part ÷ whole, 0 for an empty whole.
func share(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// rssCell is the heap row's resident memory per conversation: the trigger process's,
// and the bench's process's.
func rssCell(hr HeapReport) string {
	s := fmt.Sprintf("resident (VmRSS): the bench's process %.0f B after forced GC", hr.RSSPerConversation)
	if hr.TriggerProcessRSSPerConversation != 0 {
		s = fmt.Sprintf("resident (VmRSS): a trigger process of its own %.0f B; ", hr.TriggerProcessRSSPerConversation) + s
	}
	return s
}

// ingestRows writes the table's rows of figure 1: ingest per layout, publishing alone,
// and the CPU per message.
func (r *Report) ingestRows(row func(cells ...string)) {
	if ir := r.Ingest; len(ir.Rows) > 0 {
		for _, x := range ir.Rows {
			row(fmt.Sprintf("1. ingest, %d msgs over %d convs, %d trigger partition(s) in %d trigger process(es), publish until trigger drained (max lag %d msgs, %d compactions meanwhile; trigger draining alone %s using %.2f cores%s)",
				ir.Messages, ir.Conversations, x.Partitions, x.Processes, x.MaxLag, x.Compactions, rate(x.TriggerDrainMsgsPerSec, "msgs/s"), x.TriggerDrainCores, serverCores(x)),
				rate(x.MsgsPerSec, "msgs/s"), fmt.Sprintf("raw async publish + bare consumer %s (its publishing %s)", rate(ir.RawMsgsPerSec, "msgs/s"), rate(ir.RawPublishMsgsPerSec, "msgs/s")),
				f2(x.Ratio), check(x.Ratio >= 0.8, "≥ 0.8").String())
		}
	}
	if ir := r.Ingest; ir.ClientAloneMsgsPerSec > 0 {
		row(fmt.Sprintf("1. publishing alone, %d msgs over %d convs, nothing else running (median of %d alternating rounds)", ir.AloneMessages, ir.Conversations, publishRounds),
			"client PublishBatch "+rate(ir.ClientAloneMsgsPerSec, "msgs/s"), "raw async publish "+rate(ir.RawAloneMsgsPerSec, "msgs/s"),
			f2(ir.PublishRatio), check(ir.PublishRatio >= 0.9, "≥ 0.9").String())
	}
	if ir := r.Ingest; ir.PublishCPU.ClientMicros > 0 {
		pc := ir.PublishCPU
		row(fmt.Sprintf("1. publishing alone, CPU per message (the publisher's process; the server storing it), median of %d rounds", publishRounds),
			fmt.Sprintf("client %.2f µs (server %.2f µs)", pc.ClientMicros, pc.ClientServerMicros),
			fmt.Sprintf("raw async publish %.2f µs (server %.2f µs)", pc.RawMicros, pc.RawServerMicros),
			fmt.Sprintf("%s (+%.2f µs)", f2(pc.Ratio), pc.OverheadMicros), check(pc.OverheadMicros <= 1, "≤ raw + 1 µs").String())
	}
	if cr := r.Ingest.CPU; cr.BareMicros > 0 && cr.TriggerMicros > 0 {
		serve := "n/a (the server's CPU is not read)"
		if cr.ServeTriggerMicros > 0 && cr.ServeBareMicros > 0 {
			serve = fmt.Sprintf("server serving it %.2f µs", cr.ServeTriggerMicros)
		}
		row(fmt.Sprintf("1. draining %d stored messages, CPU per message: one trigger partition in %s, against a bare pull consumer acknowledging each", cr.Messages, cr.TriggerProcess),
			fmt.Sprintf("trigger %.2f µs; %s", cr.TriggerMicros, serve),
			fmt.Sprintf("bare consumer %.2f µs; server serving it %.2f µs", cr.BareMicros, cr.ServeBareMicros),
			fmt.Sprintf("%s; server %s", f2(cr.TriggerBareRatio), f2(cr.ServeBareRatio)), "")
	}
	if ir := r.Ingest; ir.PipelineCPURatio > 0 {
		row("1. CPU per message, whole pipeline: publisher + server (storing, serving the consumer) + consumer, the rows above summed",
			fmt.Sprintf("client + server + trigger %.2f µs", ir.PipelineMicros),
			fmt.Sprintf("raw publish + server + bare consumer %.2f µs", ir.PlainMicros),
			f2(ir.PipelineCPURatio), check(ir.PipelineCPURatio <= 1.6, "≤ 1.6").String())
	}
	if cr := r.Ingest.CPU; cr.Messages > 0 {
		ratio, t := "n/a: "+cr.Note, ""
		if cr.Ratio > 0 {
			ratio, t = f2(cr.Ratio), check(cr.Ratio <= 1, "≤ 1").String()
		}
		row(fmt.Sprintf("1. CPU per million messages, %d messages stored then drained by one trigger partition in %s", cr.Messages, cr.TriggerProcess),
			fmt.Sprintf("trigger %.1f s", cr.TriggerPerMillion),
			fmt.Sprintf("nats-server %.1f s (storing %.2f s + serving the trigger %.2f s of CPU in all)", cr.ServerPerMillion, cr.ServerStoreCPUSeconds, cr.ServerDrainCPUSeconds),
			ratio, t)
	}
}

// serverCores is ", the server N" when the server's CPU was read.
func serverCores(x IngestRow) string {
	if x.TriggerDrainServerCores <= 0 {
		return ""
	}
	return fmt.Sprintf(", the server %.2f", x.TriggerDrainServerCores)
}

func f2(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}

func rate(x float64, unit string) string { return fmt.Sprintf("%s %s", thousands(x), unit) }

func tok(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.1fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.0fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

// thousands formats x rounded, with commas.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
