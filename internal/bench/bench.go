package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/compactor/compactor/schemas"
)

// Config says what to measure and where.
type Config struct {
	// Quick runs smaller sizes (under a minute on two cores).
	Quick bool
	// NATSURL is an existing server to measure against; empty starts one.
	NATSURL string
	// NATSServer is the nats-server binary to start; empty looks for nats-server on
	// PATH, and falls back to an embedded server (said in the report) when there is none.
	NATSServer string
	// Corpus is the directory of *.jsonl transcripts the payloads and turn sizes come from.
	Corpus string
	// Seed makes the token simulation (and the payload order) reproducible.
	Seed uint64
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// Self is the compactor binary, started as the worker processes of the scale-out
	// measurement (its hidden bench-worker command); empty runs those workers as pools
	// in this process, which the report says.
	Self string
	// HeapProfile, when set, is where the heap measurement writes a heap profile once
	// the trigger tracks every conversation.
	HeapProfile string
	// Only, when set, runs only the named measurements (ingest, latency, read, cost,
	// scaleout, heap, tokens, proxy, durability); for tests and profiling.
	Only []string

	// sizes, when set, replace the sizes of Quick (the tests' tiny runs).
	sizes *sizes
}

// sizes are the workloads of a run.
type sizes struct {
	ingestMessages, ingestConversations int
	cpuMessages                         int
	latencyProbes                       int
	readMessages, readRepeats           int
	costHistories                       []int
	scaleSlots                          []int
	scaleJobsPerSlot                    int
	heapConversations                   int
	sessions, turns                     int
	proxyTurns                          int
	durabilityMessages                  int
}

func sizesFor(quick bool) sizes {
	if quick {
		// The CPU figures are checked with bands of 15%: 50,000 messages keep the server's
		// 10 ms clock ticks under 3% of what each side spends.
		return sizes{ingestMessages: 10000, ingestConversations: 200, cpuMessages: 50000, latencyProbes: 100,
			readMessages: 2000, readRepeats: 10, costHistories: []int{100, 1000},
			scaleSlots: []int{1, 2, 4, 8}, scaleJobsPerSlot: 3, heapConversations: 5000,
			sessions: 3, turns: 1000, proxyTurns: 100, durabilityMessages: 3000}
	}
	return sizes{ingestMessages: 40000, ingestConversations: 1000, cpuMessages: 100000, latencyProbes: 400,
		readMessages: 10000, readRepeats: 30, costHistories: []int{100, 1000, 10000},
		scaleSlots: []int{1, 2, 4, 8, 16}, scaleJobsPerSlot: 8, heapConversations: 100000,
		sessions: 20, turns: 1000, proxyTurns: 200, durabilityMessages: 20000}
}

// Run measures everything Config asks for and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	corpus, err := LoadCorpus(cfg.Corpus)
	if err != nil {
		return nil, err
	}
	sz := sizesFor(cfg.Quick)
	if cfg.sizes != nil {
		sz = *cfg.sizes
	}
	rep := &Report{Quick: cfg.Quick, Seed: cfg.Seed, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Started: time.Now().UTC(), CorpusMessages: corpus.Messages(),
		LoadStart: loadAverage()}
	want := func(name string) bool { return len(cfg.Only) == 0 || slices.Contains(cfg.Only, name) }
	progress := func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "[%6.1fs] %s\n", time.Since(rep.Started).Seconds(), fmt.Sprintf(format, args...))
	}
	if want("tokens") {
		progress("token economics: %d sessions of %d turns at a 32k window", sz.sessions, sz.turns)
		rep.Tokens = simulateTokens(corpus, TokenSimConfig{Seed: cfg.Seed, Sessions: sz.sessions, Turns: sz.turns, Window: 32000,
			SummarizerDelay: 2 * time.Second})
		progress("token economics: reduction %.1fx, summarizer share %.1f%%", rep.Tokens.Reduction, 100*rep.Tokens.SummarizerShare)
	}
	needServer := false
	for _, m := range []string{"ingest", "latency", "read", "cost", "scaleout", "heap", "proxy", "durability"} {
		needServer = needServer || want(m)
	}
	if needServer {
		srv, err := startServer(cfg)
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		rep.Server, rep.ServerNote = srv.Kind, srv.Note
		progress("server: %s", srv.Note)
		steps := []struct {
			name string
			run  func() error
		}{
			{"ingest", func() error { return measureIngest(ctx, srv.URL, cfg.Self, srv.cpu, corpus, sz, rep, progress) }},
			{"latency", func() error { return measureLatency(ctx, srv.URL, corpus, sz, rep, progress) }},
			{"read", func() error { return measureRead(ctx, srv.URL, corpus, sz, rep, progress) }},
			{"cost", func() error { return measureCost(ctx, srv.URL, corpus, sz, rep, progress) }},
			{"scaleout", func() error { return measureScaleOut(ctx, srv.URL, cfg.Self, corpus, sz, rep, progress) }},
			{"heap", func() error { return measureHeap(ctx, srv.URL, cfg.Self, sz, cfg.HeapProfile, rep, progress) }},
			{"proxy", func() error { return measureProxy(ctx, srv.URL, corpus, sz.proxyTurns, rep, progress) }},
			{"durability", func() error { return measureDurability(ctx, srv, corpus, sz, rep, progress) }},
		}
		for _, s := range steps {
			if !want(s.name) {
				continue
			}
			if err := s.run(); err != nil {
				return rep, fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	rep.Finish()
	rep.LoadEnd = loadAverage()
	rep.Elapsed = time.Since(rep.Started).Round(time.Millisecond).String()
	return rep, nil
}

// Corpus is the transcripts the workloads are made of.
type Corpus struct {
	// Files are the conversations, each a list of messages with their wire payloads.
	Files [][]CorpusMessage
}

// CorpusMessage is one message and its payload as a producer publishes it.
type CorpusMessage struct {
	Message schemas.Message
	Payload []byte
}

// Messages counts the corpus's messages.
func (c *Corpus) Messages() int {
	n := 0
	for _, f := range c.Files {
		n += len(f)
	}
	return n
}

// ErrNoCorpus is returned when the corpus directory holds no transcript.
var ErrNoCorpus = errors.New("no corpus")

// LoadCorpus decodes every *.jsonl file of dir (sorted by name); a line that does not
// decode is skipped, as a producer's refused line would be.
func LoadCorpus(dir string) (*Corpus, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	if dir == "" || len(files) == 0 {
		return nil, fmt.Errorf("%w: no *.jsonl in %q (--corpus DIR)", ErrNoCorpus, dir)
	}
	slices.Sort(files)
	c := &Corpus{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var conv []CorpusMessage
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, len(data)+1)
		for sc.Scan() {
			m, err := schemas.DecodeMessage(sc.Bytes())
			if err != nil {
				continue
			}
			p, err := m.Encode()
			if err != nil {
				continue
			}
			conv = append(conv, CorpusMessage{Message: m, Payload: p})
		}
		if len(conv) > 0 {
			c.Files = append(c.Files, conv)
		}
	}
	return c, nil
}

// history is n messages of one long conversation: the corpus files one after another.
func (c *Corpus) history(n int) []CorpusMessage { return c.historyFrom(0, n) }

// historyFrom is history starting with file first (mod the files).
func (c *Corpus) historyFrom(first, n int) []CorpusMessage {
	out := make([]CorpusMessage, 0, n)
	for i := first; len(out) < n; i++ {
		f := c.Files[i%len(c.Files)]
		out = append(out, f[:min(len(f), n-len(out))]...)
	}
	return out
}

// interleaved is n payloads over convs conversations, conversation k replaying corpus
// file k (mod the files) from its start, round-robin: what many agents publishing at
// once look like.
func (c *Corpus) interleaved(n, convs int) []published {
	out := make([]published, 0, n)
	pos := make([]int, convs)
	for len(out) < n {
		for k := 0; k < convs && len(out) < n; k++ {
			f := c.Files[k%len(c.Files)]
			out = append(out, published{conv: k, msg: f[pos[k]%len(f)]})
			pos[k]++
		}
	}
	return out
}

type published struct {
	conv int
	msg  CorpusMessage
}

// Measurements names what Config.Only may list.
var Measurements = []string{"ingest", "latency", "read", "cost", "scaleout", "heap", "tokens", "proxy", "durability"}

// Known reports whether name is a measurement.
func Known(name string) bool { return slices.Contains(Measurements, name) }

// DefaultCorpus is the example transcripts the repository ships, examples/transcripts
// of the module root found from the working directory (the first folder up with a
// go.mod), or "" when there is none.
func DefaultCorpus() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "examples", "transcripts")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
