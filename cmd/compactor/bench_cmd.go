package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/compactor/compactor/internal/bench"
)

// benchCommand measures Compactor against plain JetStream (package bench): progress on
// stderr, the table (or with --json one JSON object) on stdout. The bench runs its own
// servers and pipeline: the environment's are not its.
var benchCommand = &command{
	name: "bench", interruptible: true,
	summary: "measure Compactor against plain JetStream on the same server (docs/benchmarks.md)",
	about: `Progress goes to stderr (on a terminal, with a bar of the measurements done), a
Markdown table (or --json, one object) to stdout, PNG charts into --charts, the whole
docs/benchmarks.md into --doc. Without --nats-url it starts --nats-server (default
nats-server on PATH, else one go build makes of the version go.mod pins), else an
embedded server, which the output notes. Measurements: ` + strings.Join(bench.Measurements, ", ") + `.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		f := &benchFlags{
			quick:       fs.Bool("quick", "", "under a minute: smaller workloads, the table only"),
			asJSON:      fs.JSON(),
			url:         fs.String("nats-url", "", "URL", "measure against this NATS server instead of starting one"),
			server:      fs.String("nats-server", "", "PATH", "the nats-server binary to start"),
			corpus:      fs.String("corpus", "", "DIR", "the corpus of *.jsonl transcripts (default examples/transcripts of the repository)"),
			charts:      fs.String("charts", "", "DIR", "write PNG charts into DIR"),
			doc:         fs.String("doc", "", "FILE", "write the whole benchmarks document to FILE"),
			seed:        fs.Uint64("seed", "N", "seed of the simulations (default 1)"),
			only:        fs.String("only", "", "M1,M2", "run only these measurements"),
			cpuProfile:  fs.String("cpuprofile", "", "FILE", "write a CPU profile of this process (client, trigger, workers) for go tool pprof"),
			heapProfile: fs.String("heapprofile", "", "FILE", "write the heap once the trigger tracks every conversation"),
			calibrate:   fs.Int("calibrate", "N", "after the run, N quick runs: the median and noise band of each ratio, which --doc states for --check"),
			check:       fs.String("check", "", "FILE", "compare this --quick run's ratios with those the benchmarks document FILE states; exit 1 when one is outside its band"),
		}
		return func(ctx context.Context, c *call) error { return runBench(ctx, c, f) }
	},
}

// benchFlags are the bench command's flags, once parsed.
type benchFlags struct {
	quick, asJSON                    *bool
	url, server, corpus, charts, doc *string
	seed                             *uint64
	only, cpuProfile, heapProfile    *string
	calibrate                        *int
	check                            *string
}

// runBench configures the bench from the flags, runs it (under a progress bar and,
// with --cpuprofile, the CPU profiler) and writes its charts, document and table.
func runBench(ctx context.Context, c *call, f *benchFlags) error {
	cfg, steps, err := benchConfig(c, f)
	if err != nil {
		return err
	}
	if bar := newProgress(c.std.err, c.lookup, "bench", "measurements", int64(len(steps))); bar != nil {
		defer bar.finish()
		cfg.Progress = &benchProgress{bar: bar, steps: steps}
	}
	if *f.cpuProfile != "" {
		prof, err := os.Create(*f.cpuProfile)
		if err != nil {
			return err
		}
		defer prof.Close()
		if err := pprof.StartCPUProfile(prof); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Command = "go run ./cmd/compactor bench " + strings.Join(genericArgs(c.raw), " ")
	if *f.calibrate > 0 {
		if err := calibrate(ctx, cfg, rep, *f.calibrate); err != nil {
			return err
		}
	}
	if err := writeBenchFiles(c, rep, *f.charts, *f.doc); err != nil {
		return err
	}
	if *f.check != "" {
		return checkBench(ctx, c, cfg, rep, *f.check, *f.asJSON)
	}
	if *f.asJSON {
		return rep.WriteJSON(c.std.out)
	}
	return rep.WriteTable(c.std.out)
}

// calibrate makes the check figures of rep from n quick runs of cfg (rep itself
// among them when it is quick).
func calibrate(ctx context.Context, cfg bench.Config, rep *bench.Report, n int) error {
	var runs []*bench.Report
	if rep.Quick {
		runs = append(runs, rep)
	}
	cfg.Quick = true
	for i := len(runs); i < n; i++ {
		fmt.Fprintf(cfg.Progress, "calibration: quick run %d of %d\n", i+1, n)
		r, err := bench.Run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("calibration run %d: %w", i+1, err)
		}
		runs = append(runs, r)
	}
	cf := bench.Calibrate(rep.Command, runs)
	rep.Check = &cf
	return nil
}

// checkBench compares rep with the check figures of the document doc, with one more
// quick run of cfg when a figure disagrees: the comparison table on stdout (on stderr
// with --json, which prints the first report), an error when a figure disagrees in
// both.
func checkBench(ctx context.Context, c *call, cfg bench.Config, rep *bench.Report, doc string, asJSON bool) error {
	data, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	cf, err := bench.ParseCheck(data)
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	out := c.std.out
	if asJSON {
		if err := rep.WriteJSON(c.std.out); err != nil {
			return err
		}
		out = c.std.err
	}
	runs := []*bench.Report{rep}
	res, again, checkErr := bench.CheckRuns(cf, runs)
	for again {
		fmt.Fprintf(cfg.Progress, "check: %v; one more quick run\n", checkErr)
		r, err := bench.Run(ctx, cfg)
		if err != nil {
			return err
		}
		runs = append(runs, r)
		res, again, checkErr = bench.CheckRuns(cf, runs)
	}
	if err := bench.WriteCheck(out, res); err != nil {
		return err
	}
	if checkErr != nil {
		return fmt.Errorf("%s: %w", doc, checkErr)
	}
	return nil
}

// benchConfig checks the arguments and flags and makes the bench's configuration,
// with the measurements it runs in the order bench.Run measures them.
func benchConfig(c *call, f *benchFlags) (bench.Config, []string, error) {
	if len(c.args) > 0 {
		return bench.Config{}, nil, usagef("bench takes no arguments, only flags")
	}
	if *f.seed == 0 {
		*f.seed = 1
	}
	if *f.check != "" && !*f.quick {
		return bench.Config{}, nil, usagef("--check compares a quick run with the document's quick figures: add --quick")
	}
	if *f.calibrate < 0 {
		return bench.Config{}, nil, usagef("--calibrate takes a number of runs, 0 or more")
	}
	cfg := bench.Config{Quick: *f.quick, NATSURL: *f.url, NATSServer: *f.server, Corpus: *f.corpus, Seed: *f.seed, Progress: c.std.err, HeapProfile: *f.heapProfile}
	if self, err := os.Executable(); err == nil {
		cfg.Self = self
	}
	if cfg.Corpus == "" {
		cfg.Corpus = bench.DefaultCorpus()
	}
	// In the order bench.Run measures them.
	steps := []string{"tokens", "ingest", "latency", "read", "cost", "scaleout", "heap", "proxy"}
	if *f.only != "" {
		cfg.Only = strings.Split(*f.only, ",")
		for _, m := range cfg.Only {
			if !bench.Known(m) {
				return bench.Config{}, nil, usagef("--only: unknown measurement %q (known: %s)", m, strings.Join(bench.Measurements, ", "))
			}
		}
		steps = slices.DeleteFunc(steps, func(m string) bool { return !slices.Contains(cfg.Only, m) })
	}
	return cfg, steps, nil
}

// writeBenchFiles writes the report's PNG charts into the directory charts and the
// whole benchmarks document to the file doc (each when named), naming each file on
// stderr.
func writeBenchFiles(c *call, rep *bench.Report, charts, doc string) error {
	if charts != "" {
		files, err := rep.WriteCharts(charts)
		if err != nil {
			return fmt.Errorf("charts: %w", err)
		}
		for _, f := range files {
			fmt.Fprintf(c.std.err, "chart: %s\n", f)
		}
	}
	if doc != "" {
		if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
			return err
		}
		var gen bytes.Buffer
		if err := rep.WriteMarkdown(&gen); err != nil {
			return fmt.Errorf("doc: %w", err)
		}
		// The hand-kept sections of the document replaced stay (keepHandSections).
		old, err := os.ReadFile(doc)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.WriteFile(doc, keepHandSections(old, gen.Bytes()), 0o644); err != nil {
			return fmt.Errorf("doc: %w", err)
		}
		fmt.Fprintf(c.std.err, "doc: %s\n", doc)
	}
	return nil
}

// benchProgress shows the bench's progress lines above a bar of the measurements done:
// a line naming a measurement moves the bar to it.
type benchProgress struct {
	bar     *progress
	steps   []string
	current int
	pending []byte
}

// benchStepOf names the measurement a progress line is about, by its prefix.
var benchStepOf = map[string]string{
	"token economics:": "tokens", "ingest:": "ingest", "latency:": "latency", "read:": "read", "cost:": "cost",
	"scale-out:": "scaleout", "heap:": "heap", "new conversations:": "heap", "proxy:": "proxy",
}

func (p *benchProgress) Write(b []byte) (int, error) {
	p.pending = append(p.pending, b...)
	for {
		i := bytes.IndexByte(p.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(p.pending[:i])
		p.pending = p.pending[i+1:]
		// "[  12.3s] ingest: ..." names its measurement after the elapsed time.
		text := line
		if _, after, ok := strings.Cut(line, "] "); ok {
			text = after
		}
		for prefix, step := range benchStepOf {
			if strings.HasPrefix(text, prefix) {
				if i := slices.Index(p.steps, step); i >= 0 {
					p.current = i
				}
			}
		}
		p.bar.println(line)
		p.bar.set(int64(p.current), fmt.Sprintf("%s (%d of %d)", p.steps[p.current], p.current+1, len(p.steps)))
	}
}

// benchTriggerCommand is the trigger process of the bench's CPU measurement (hidden).
var benchTriggerCommand = &command{
	name: bench.TriggerCommand, hidden: true, summary: "a trigger process of the bench's CPU measurement",
	define: func(*flagSet) func(context.Context, *call) error {
		return nil // run hands its arguments to the bench as they are
	},
}

// genericArgs is args with the values of the flags that name this machine's files and
// servers replaced by their placeholders, for the command a document states.
func genericArgs(args []string) []string {
	placeholders := map[string]string{"corpus": "DIR", "nats-server": "PATH", "nats-url": "URL", "cpuprofile": "FILE", "heapprofile": "FILE"}
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(out[i], "-"), "=")
		ph, ok := placeholders[name]
		switch {
		case !ok || !strings.HasPrefix(out[i], "-"):
		case hasValue:
			out[i] = "--" + name + "=" + ph
		case i+1 < len(out):
			out[i+1] = ph
			i++
		}
	}
	return out
}
