package bpe_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas/tokens/bpe"
)

// startupEnv names the encoding TestStartupChild builds; TestStartupCost sets it.
const startupEnv = "COMPACTOR_BPE_STARTUP"

// TestStartupCost logs what the first New of each encoding costs a fresh process: the
// time, and the live heap it adds. It runs TestStartupChild in a new process per
// encoding, since the vocabulary is built once per process. It fails only if that
// process does; wall-clock time is reported, not checked.
func TestStartupCost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per encoding")
	}
	if os.Getenv(startupEnv) != "" {
		return // in the child process, which runs TestStartupChild only
	}
	for _, enc := range bpe.Encodings() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStartupChild$", "-test.v")
		cmd.Env = append(os.Environ(), startupEnv+"="+enc)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: child process: %v\n%s", enc, err, out)
		}
		line := ""
		for s := bufio.NewScanner(strings.NewReader(string(out))); s.Scan(); {
			if after, ok := strings.CutPrefix(s.Text(), "startup: "); ok {
				line = after
			}
		}
		if line == "" {
			t.Fatalf("%s: child process printed no result:\n%s", enc, out)
		}
		t.Logf("first New(%q): %s", enc, line)
	}
}

// TestStartupChild measures the first New in this process; only TestStartupCost runs it
// (in a child process). Elsewhere it does nothing: a helper process, not a skipped test.
func TestStartupChild(t *testing.T) {
	enc := os.Getenv(startupEnv)
	if enc == "" {
		return
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	c, err := bpe.New(enc)
	if err != nil {
		t.Fatal(err)
	}
	if c.Count("hello world") != 2 {
		t.Fatal("hello world is not 2 tokens")
	}
	took := time.Since(start)
	start = time.Now()
	if _, err := bpe.New(enc); err != nil {
		t.Fatal(err)
	}
	again := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	fmt.Printf("startup: %v, live heap +%.1f MiB (a second New: %v)\n",
		took.Round(time.Millisecond), float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), again.Round(time.Microsecond))
}
