package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the compactor binary as the bench's child
// processes: started with bench-trigger or bench-worker first, it runs RunTrigger or
// RunWorker.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == TriggerCommand || os.Args[1] == WorkerCommand) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		var err error
		if os.Args[1] == TriggerCommand {
			err = RunTrigger(ctx, os.Args[2:], os.Stdin, os.Stdout)
		} else {
			err = RunWorker(ctx, os.Args[2:], os.Stdout)
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The CPU measurement runs the trigger in a process of its own and reads its CPU and
// the nats-server process's: both per million messages are positive and their ratio is
// theirs.
func TestCPUOfTriggerProcessAndServer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procCPU reads /proc")
	}
	c, _ := corpus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startServer(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	if srv.Kind != "process" {
		t.Fatalf("server %s (%s); want a nats-server process (nats-server on PATH)", srv.Kind, srv.Note)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cr, err := measureCPU(ctx, srv.URL, self, srv.cpu, c.interleaved(10000, 50))
	if err != nil {
		t.Fatal(err)
	}
	if cr.TriggerProcess != triggerOwnProcess || cr.Messages != 10000 || cr.Note != "" {
		t.Errorf("report %+v; want the trigger in its own process, 10000 messages, no note", cr)
	}
	if !(cr.TriggerPerMillion > 0 && cr.ServerPerMillion > 0 && cr.ServerStoreCPUSeconds > 0) {
		t.Fatalf("report %+v; want positive CPU for the trigger and for the server's storing", cr)
	}
	if got := cr.TriggerPerMillion / cr.ServerPerMillion; got != cr.Ratio {
		t.Errorf("ratio %v; want trigger ÷ server = %v", cr.Ratio, got)
	}
}

// With the server embedded (its CPU is the bench's own), the report gives no ratio and
// says why, rather than a wrong one.
func TestCPURatioNotAvailableWithoutServerProcess(t *testing.T) {
	cr := CPUReport{Messages: 1000}
	cr.fill(0, 40*time.Millisecond, -1, -1, -1, -1)
	if cr.Ratio != 0 || cr.ServerPerMillion != 0 || !strings.Contains(cr.Note, "ratio is not available") {
		t.Errorf("report %+v; want no ratio, no server figure and a note saying so", cr)
	}
	if cr.TriggerPerMillion != 40 {
		t.Errorf("trigger %v s per million; want 40 (0.04 s over 1,000 messages)", cr.TriggerPerMillion)
	}
	cr = CPUReport{Messages: 1000}
	cr.fill(0, 40*time.Millisecond, 0, 10*time.Millisecond, 10*time.Millisecond, 30*time.Millisecond)
	if math.Abs(cr.ServerPerMillion-30) > 1e-9 || math.Abs(cr.Ratio-4.0/3) > 1e-9 || cr.Note != "" {
		t.Errorf("report %+v; want the server 30 s per million (10 storing, 20 serving) and the ratio 4/3", cr)
	}
}

// The trigger process refuses a namespace outside the bench's.
func TestRunTriggerArguments(t *testing.T) {
	var out strings.Builder
	if err := RunTrigger(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--namespace", "CHAT"}, strings.NewReader(""), &out); err == nil {
		t.Error("RunTrigger outside a bench namespace: nil error; want a refusal")
	}
}

// vmRSS reads the resident set of a /proc status, in bytes, and this process's is
// positive on Linux.
func TestVmRSS(t *testing.T) {
	status := []byte("Name:\tcompactor\nVmPeak:\t  123 kB\nVmRSS:\t   2048 kB\nThreads:\t7\n")
	if got := vmRSS(status); got != 2048*1024 {
		t.Errorf("vmRSS = %d; want %d", got, 2048*1024)
	}
	if got := vmRSS([]byte("Name:\tx\n")); got != -1 {
		t.Errorf("vmRSS without the line = %d; want -1", got)
	}
	if runtime.GOOS == "linux" {
		if got := residentSet(); got <= 0 {
			t.Errorf("residentSet() = %d; want positive", got)
		}
	}
}

// The projection turns CPU per message into cores and processes: at 25 s of trigger
// CPU per million messages, 100,000 msgs/s is 2.5 cores busy, 4.2 planned at 60%,
// three 2-core processes, 4 partitions.
func TestProjection(t *testing.T) {
	rows := Projection(CPUReport{TriggerPerMillion: 25, ServerPerMillion: 10})
	if len(rows) != len(projectionRates) {
		t.Fatalf("%d rows; want one per rate", len(rows))
	}
	p := rows[1]
	if p.Rate != 100_000 || math.Abs(p.TriggerCores-2.5) > 1e-9 || math.Abs(p.PlannedCores-2.5/0.6) > 1e-9 ||
		p.Processes != 3 || p.Partitions != 4 || math.Abs(p.ServerCores-1) > 1e-9 {
		t.Errorf("at 100,000 msgs/s: %+v; want 2.5 cores, 4.17 planned, 3 processes, 4 partitions, the server 1 core", p)
	}
	if rows[0].Processes != 1 || rows[0].Partitions != 1 {
		t.Errorf("at 10,000 msgs/s: %+v; want one process, one partition", rows[0])
	}
	if Projection(CPUReport{}) != nil {
		t.Error("a projection without a measured CPU figure")
	}
}

// A measurement too short for the server's CPU to move a tick gives no ratio, and says
// so.
func TestCPURatioNotAvailableBelowATick(t *testing.T) {
	cr := CPUReport{Messages: 100}
	cr.fill(0, 10*time.Millisecond, 0, 0, 0, 0)
	if cr.Ratio != 0 || !strings.Contains(cr.Note, "clock tick") {
		t.Errorf("report %+v; want no ratio and a note on the clock tick", cr)
	}
}

// A trigger in its own process grows its resident set (read after a GC it is told to
// do) as it takes on conversations.
func TestTriggerProcessRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procRSS reads /proc")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startServer(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	perConv, err := triggerProcessRSS(ctx, srv.URL, self, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if !(perConv > 0 && perConv < 64<<10) {
		t.Errorf("%.0f bytes resident per conversation; want more than none and less than 64 KiB", perConv)
	}
}
