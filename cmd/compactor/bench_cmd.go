package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/compactor/compactor/cmd/compactor/bench"
)

// benchCmd measures Compactor against plain JetStream (package bench): progress on
// stderr, the table (or with --json one JSON object) on stdout.
func benchCmd(ctx context.Context, args []string, std stdio) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	quick := fs.Bool("quick", false, "")
	asJSON := fs.Bool("json", false, "")
	url := fs.String("nats-url", "", "")
	server := fs.String("nats-server", "", "")
	corpus := fs.String("corpus", "", "")
	charts := fs.String("charts", "", "")
	doc := fs.String("doc", "", "")
	seed := fs.Uint64("seed", 1, "")
	only := fs.String("only", "", "")
	cpuProfile := fs.String("cpuprofile", "", "")
	heapProfile := fs.String("heapprofile", "", "")
	if err := fs.Parse(args); err != nil {
		return usagef("bench: %v", err)
	}
	if fs.NArg() > 0 {
		return usagef("bench takes no arguments, only flags")
	}
	cfg := bench.Config{Quick: *quick, NATSURL: *url, NATSServer: *server, Corpus: *corpus, Seed: *seed, Progress: std.err, HeapProfile: *heapProfile}
	if self, err := os.Executable(); err == nil {
		cfg.Self = self
	}
	if cfg.Corpus == "" {
		cfg.Corpus = bench.DefaultCorpus()
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
		for _, m := range cfg.Only {
			if !bench.Known(m) {
				return usagef("bench: --only: unknown measurement %q (known: %s)", m, strings.Join(bench.Measurements, ", "))
			}
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Command = "go run ./cmd/compactor bench " + strings.Join(args, " ")
	if *charts != "" {
		files, err := rep.WriteCharts(*charts)
		if err != nil {
			return fmt.Errorf("charts: %w", err)
		}
		for _, f := range files {
			fmt.Fprintf(std.err, "chart: %s\n", f)
		}
	}
	if *doc != "" {
		if err := os.MkdirAll(filepath.Dir(*doc), 0o755); err != nil {
			return err
		}
		f, err := os.Create(*doc)
		if err != nil {
			return err
		}
		err = rep.WriteMarkdown(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("doc: %w", err)
		}
		fmt.Fprintf(std.err, "doc: %s\n", *doc)
	}
	if *asJSON {
		return rep.WriteJSON(std.out)
	}
	return rep.WriteTable(std.out)
}
