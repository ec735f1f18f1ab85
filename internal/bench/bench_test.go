package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/corpustest"
)

// corpus loads the shared corpus and returns it with its directory; absent, the test
// skips (fails under CI=true).
func corpus(t *testing.T) (*Corpus, string) {
	t.Helper()
	dir := corpustest.Dir()
	if dir == "" {
		corpustest.Load(t) // skips, or fails in CI
	}
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, dir
}

// tiny are sizes that run every measurement in seconds.
var tiny = sizes{ingestMessages: 600, ingestConversations: 30, cpuMessages: 10000, latencyProbes: 20,
	readMessages: 300, readRepeats: 3, costHistories: []int{50, 200},
	scaleSlots: []int{1, 2, 8}, scaleJobsPerSlot: 1, heapConversations: 300,
	sessions: 2, turns: 300, durabilityMessages: 300}

// Every measurement runs against a server and fills the headline: each key of the JSON
// object is there and is a positive finite number, and the charts are PNG files.
func TestRunReportsEveryFigure(t *testing.T) {
	_, dir := corpus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	self, err := os.Executable() // TestMain runs the child processes' commands
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, Config{Corpus: dir, sizes: &tiny, Progress: &progress, Seed: 7, Self: self})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatalf("the JSON is not one object: %v\n%s", err, buf.String())
	}
	for _, key := range []string{"ingest_ratio", "ingest_ratio_4", "ingest_ratio_4x2", "trigger_p99_ratio", "read_speedup", "read_over_floor", "scaleout_8",
		"bytes_per_conversation", "new_conversations_per_sec", "new_conversations_per_sec_4", "new_conversations_per_sec_4x2",
		"cost_growth", "token_reduction_1000", "summarizer_share", "publish_ratio", "trigger_cpu_s_per_million",
		"server_cpu_s_per_million", "trigger_server_cpu_ratio", "sync_ingest_ratio"} {
		v, ok := obj[key].(float64)
		if !ok {
			t.Errorf("key %q: %v (%T); want a number", key, obj[key], obj[key])
			continue
		}
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v; want a positive finite number", key, v)
		}
	}
	// The resident set moves by whole pages: over the tiny run's few conversations its
	// share may be either sign, but it is read.
	if v, ok := obj["rss_bytes_per_conversation"].(float64); !ok || v == 0 || math.IsInf(v, 0) {
		t.Errorf("rss_bytes_per_conversation = %v; want a finite number, read", obj["rss_bytes_per_conversation"])
	}
	// Every trigger layout has its ingest and new-conversation rows, each with every figure.
	if len(rep.Ingest.Rows) != len(triggerLayouts) || len(rep.Heap.NewConversations) != len(triggerLayouts) {
		t.Fatalf("%d ingest rows and %d new-conversation rows; want one per layout %v", len(rep.Ingest.Rows), len(rep.Heap.NewConversations), triggerLayouts)
	}
	for i, l := range triggerLayouts {
		x, nc := rep.Ingest.Rows[i], rep.Heap.NewConversations[i]
		if (triggerLayout{x.Partitions, x.Processes}) != l || (triggerLayout{nc.Partitions, nc.Processes}) != l {
			t.Errorf("rows %d are %+v and %+v; want layout %v", i, x, nc, l)
		}
		for name, v := range map[string]float64{"msgs/s": x.MsgsPerSec, "ratio": x.Ratio, "publishing": x.PublishMsgsPerSec,
			"draining": x.TriggerDrainMsgsPerSec, "new conversations/s": nc.PerSec} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%v: %s = %v; want a positive finite number", l, name, v)
			}
		}
	}
	if rep.Ingest.CPU.TriggerProcess != triggerOwnProcess || !strings.Contains(rep.ScaleOutProcesses, "two worker processes") {
		t.Errorf("the trigger of the CPU figure ran in %q, the scale-out's workers as %q; want child processes",
			rep.Ingest.CPU.TriggerProcess, rep.ScaleOutProcesses)
	}
	if s := rep.SummarizerShare; s > 1 {
		t.Errorf("summarizer_share = %v; want at most 1", s)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"1. ingest", "4 trigger partition(s) in 2 trigger process(es), publish until trigger drained",
		"6. new conversations taken on by the trigger, 4 partition(s) in 2 trigger process(es)", "2. trigger latency", "3. context read", "4. compaction cost", "5. worker scale-out", "6. trigger heap", "7. cumulative input tokens", "9. the client's publishing"} {
		if !bytes.Contains(table.Bytes(), []byte(m)) {
			t.Errorf("the table has no row %q:\n%s", m, table.String())
		}
	}
	// The doc says what the partitioned layouts measured wherever a trigger target was missed.
	var doc bytes.Buffer
	if err := rep.WriteMarkdown(&doc); err != nil {
		t.Fatal(err)
	}
	if rep.IngestRatio < 0.8 || rep.NewConversationsPerSec < 10000 {
		for _, want := range []string{"Trigger partitions, measured in this run: with 4 partitions in one trigger process",
			"with 4 partitions in two trigger processes"} {
			if !bytes.Contains(doc.Bytes(), []byte(want)) {
				t.Errorf("the doc's targets do not say %q:\n%s", want, doc.String())
			}
		}
	}
	if !bytes.Contains(progress.Bytes(), []byte("server: ")) {
		t.Errorf("progress does not say which server was measured:\n%s", progress.String())
	}
	files, err := rep.WriteCharts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("charts %v; want tokens, workers and trigger", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if b := img.Bounds(); b.Dx() != chartW || b.Dy() != chartH {
			t.Errorf("%s is %v; want %dx%d", f, b, chartW, chartH)
		}
	}
}

// The token simulation is a function of its seed, and its totals hold together:
// compaction never costs more tokens than sending the whole history, the summarizer's
// share is a share, and the curves only grow.
func TestTokenSimulation(t *testing.T) {
	c, _ := corpus(t)
	cfg := TokenSimConfig{Seed: 3, Sessions: 2, Turns: 400, Window: 32000, SummarizerDelay: 2 * time.Second}
	a, b := simulateTokens(c, cfg), simulateTokens(c, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two simulations with the same seed differ")
	}
	cfg.Seed = 4
	if other := simulateTokens(c, cfg); other.Without == a.Without {
		t.Errorf("seeds 3 and 4 both give %v tokens without compaction; want different sessions", a.Without)
	}
	if a.Compactions == 0 {
		t.Fatalf("no compaction in %d turns at a 32k window", cfg.Turns)
	}
	for _, s := range append(a.Strategies, a.Ahead) {
		total := s.With + s.SummarizerIn + s.SummarizerOut
		if total > a.Without || s.With <= 0 {
			t.Errorf("%s: %v tokens with compaction (agent %v); want positive and at most %v without", s.Strategy, total, s.With, a.Without)
		}
		if s.SummarizerShare < 0 || s.SummarizerShare > 1 {
			t.Errorf("%s: summarizer share %v; want it in [0, 1]", s.Strategy, s.SummarizerShare)
		}
	}
	if len(a.Strategies) == 0 || a.Reduction <= 1 {
		t.Errorf("reduction %v over %d strategies; want > 1", a.Reduction, len(a.Strategies))
	}
	for i := 1; i < len(a.CurveWith); i++ {
		if a.CurveWith[i] < a.CurveWith[i-1] || a.CurveWithout[i] < a.CurveWithout[i-1] {
			t.Fatalf("a cumulative curve falls at turn %d", i+1)
		}
	}
	if a.InlineAddedP50Ms != 2000 {
		t.Errorf("inline compaction adds %v ms at p50; want the summarizer's 2000", a.InlineAddedP50Ms)
	}
	if a.AheadAddedP50Ms > a.InlineAddedP50Ms {
		t.Errorf("ahead of time adds %v ms at p50, more than inline's %v", a.AheadAddedP50Ms, a.InlineAddedP50Ms)
	}
}

// The summary model stays within the policy's cap and above its floor.
func TestSummaryLength(t *testing.T) {
	tests := []struct{ give, limit, want int }{
		{100, 2048, 400},
		{10000, 2048, 800},
		{100000, 2048, 2048},
		{100, 300, 300},
	}
	for _, tt := range tests {
		if got := summaryLength(tt.give, tt.limit); got != tt.want {
			t.Errorf("summaryLength(%d, %d) = %d; want %d", tt.give, tt.limit, got, tt.want)
		}
	}
}

// The worker process's entry (compactor bench-worker) runs a pool in the namespace it
// is given: a request queued there is compacted.
func TestRunWorker(t *testing.T) {
	c, _ := corpus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startServer(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	r, err := newRig(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	llm := newFakeLLM(0, 300)
	defer llm.close()
	wctx, stop := context.WithCancel(ctx)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(wctx, []string{"--nats-url", srv.URL, "--namespace", r.ns, "--slots", "2", "--llm-url", llm.srv.URL}, &out)
	}()
	last, err := r.publishHistory(ctx, "w1", c.historyFrom(3, 30))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.compact(ctx, "w1", last); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("RunWorker: %v", err)
	}
	if out.String() != "ready\n" {
		t.Errorf("RunWorker wrote %q; want \"ready\\n\"", out.String())
	}
	if err := RunWorker(ctx, []string{"--nats-url", srv.URL, "--namespace", "CHAT"}, &out); err == nil {
		t.Error("RunWorker outside a bench namespace: nil error; want a refusal")
	}
}

// procCPU reads this process's CPU time as getrusage does, to the kernel's tick.
func TestProcCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procCPU reads /proc")
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	self, own := procCPU(os.Getpid()), cpuTime()
	if self <= 0 || self > own+20*time.Millisecond || self < own-100*time.Millisecond {
		t.Errorf("procCPU(self) = %v; getrusage says %v", self, own)
	}
	if got := procCPU(-1); got != -1 {
		t.Errorf("procCPU(-1) = %v; want -1", got)
	}
}

// The verdict on partitions counts only changes past the machine's noise, and says
// which way they went.
func TestPartitionVerdict(t *testing.T) {
	tests := []struct {
		give []float64
		want string
	}{
		{[]float64{1.5, 2}, "raised it"},
		{[]float64{0.5, 0.7}, "lowered it"},
		{[]float64{0.9, 1.2}, "Within the machine's noise"},
		{[]float64{0.5, 1.6}, "The layouts disagree"},
		{[]float64{1.1, 1.6}, "The layouts disagree"},
	}
	for _, tt := range tests {
		if got := verdict(tt.give); !strings.Contains(got, tt.want) {
			t.Errorf("verdict(%v) = %q; want it to say %q", tt.give, got, tt.want)
		}
	}
}
