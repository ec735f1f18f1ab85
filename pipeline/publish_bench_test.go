package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// The publish benchmarks compare, on one in-process server, the client's publish with a
// raw JetStream publish of the same encoded bytes to a plain stream shaped like CHAT
// (what `compactor bench --only ingest` calls its baseline). Their messages are the
// example transcripts (examples/transcripts: short and long texts, tool calls and the
// results answering them), copied into benchConversations conversations published
// interleaved, each in its order (a result after its call). One op is one message.
//
//	go test -run '^$' -bench 'Publish' -benchmem -count 5 ./pipeline/
//
// With COMPACTOR_PUBLISH_BENCH_URL=nats://127.0.0.1:PORT they publish to that server
// instead (a nats-server -js started for them alone).
//
// BenchmarkPublishRatio times the two in alternating windows of the same messages and
// reports client÷raw, which the machine's other load moves far less than either alone.
// allocs/op counts the in-process server's allocations too (the same for both).

// benchURLVar names a variable that points the benchmarks at a server of its own (a
// nats-server process started for them, with JetStream), as `compactor bench` measures:
// the in-process server shares this process's CPU and garbage collector with the client.
// Its streams are made or reused, never deleted.
const benchURLVar = "COMPACTOR_PUBLISH_BENCH_URL"

// benchConversations is how many conversations the benchmarks publish to at once.
const benchConversations = 16

// benchWindow is how many asynchronous publishes a benchmark keeps in flight before it
// waits for their acks (internal/bench keeps 2,000).
const benchWindow = 1000

// benchMsg is one message of the load: its conversation, the decoded message the
// client publishes and its encoding the raw publish sends.
type benchMsg struct {
	conv    string
	rawSubj string
	msg     schemas.Message
	payload []byte
}

// benchLoad reads the example transcripts into one round of the load.
func benchLoad(b *testing.B) []benchMsg {
	b.Helper()
	files, err := filepath.Glob(filepath.Join("..", "examples", "transcripts", "*.jsonl"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no example transcripts (%v)", err)
	}
	slices.Sort(files)
	var convs [][]schemas.Message
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		var ms []schemas.Message
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, len(data)+1)
		for sc.Scan() {
			m, err := schemas.DecodeMessage(sc.Bytes())
			if err != nil {
				b.Fatalf("%s: %v", f, err)
			}
			ms = append(ms, m)
		}
		convs = append(convs, ms)
	}
	var out []benchMsg
	for i := 0; ; i++ {
		added := false
		for k := range benchConversations {
			ms := convs[k%len(convs)]
			if i >= len(ms) {
				continue
			}
			p, err := ms[i].Encode()
			if err != nil {
				b.Fatal(err)
			}
			conv := fmt.Sprintf("bench-%d", k)
			out = append(out, benchMsg{conv: conv, rawSubj: "raw." + conv + ".msg", msg: ms[i], payload: p})
			added = true
		}
		if !added {
			return out
		}
	}
}

// publishBench is a server with the contract provisioned, a plain stream shaped like
// CHAT on raw.*.msg, a client and a raw JetStream context on the same connection.
type publishBench struct {
	ctx    context.Context
	client *pipeline.Client
	js     natsjs.JetStream
	load   []benchMsg
	batch  []pipeline.BatchMsg // load as PublishBatch takes it
	// next is where each kind of publish goes on in load.
	nextRaw, nextClient int
	buf                 []benchMsg
}

func newPublishBench(b *testing.B) *publishBench {
	b.Helper()
	var nc *nats.Conn
	if url := os.Getenv(benchURLVar); url != "" {
		nc = jstest.ConnTo(b, url)
	} else {
		nc = jstest.Conn(b, jstest.Server(b))
	}
	st := jstest.Provision(b, nc)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncTimeout(jetstream.PublishAsyncTimeout))
	if err != nil {
		b.Fatal(err)
	}
	chat, err := js.Stream(ctx, st.Config().ChatStream)
	if err != nil {
		b.Fatal(err)
	}
	sc := chat.CachedInfo().Config
	sc.Name, sc.Subjects, sc.SubjectTransform, sc.Description = "RAW", []string{"raw.*.msg"}, nil, ""
	if _, err := js.CreateStream(ctx, sc); err != nil {
		b.Fatal(err)
	}
	p := &publishBench{ctx: ctx, client: pipeline.NewWithStore(nc, st), js: js, load: benchLoad(b)}
	for _, m := range p.load {
		p.batch = append(p.batch, pipeline.BatchMsg{Conv: m.conv, Message: m.msg})
	}
	return p
}

// take returns the next n messages of the load from *next on, round after round: a
// part of the load itself, or a copy (into a buffer it reuses) where they wrap around.
func (p *publishBench) take(next *int, n int) []benchMsg {
	if *next+n <= len(p.load) {
		out := p.load[*next : *next+n]
		*next = (*next + n) % len(p.load)
		return out
	}
	out := p.buf[:0]
	defer func() { p.buf = out[:0] }()
	for len(out) < n {
		k := min(n-len(out), len(p.load)-*next)
		out = append(out, p.load[*next:*next+k]...)
		*next = (*next + k) % len(p.load)
	}
	return out
}

// clientBatch publishes the messages of the load from *next on with PublishBatch, n
// at a time in windows of benchWindow.
func (p *publishBench) clientBatch(b *testing.B, next *int, n int) {
	for n > 0 {
		k := min(n, len(p.batch)-*next)
		if _, err := p.client.PublishBatch(p.ctx, p.batch[*next:*next+k], pipeline.BatchOptions{Window: benchWindow}); err != nil {
			b.Fatal(err)
		}
		*next, n = (*next+k)%len(p.batch), n-k
	}
}

// rawAsync publishes ms raw, asynchronously, and waits for every ack.
func (p *publishBench) rawAsync(b *testing.B, ms []benchMsg) {
	fs := make([]natsjs.PubAckFuture, len(ms))
	for i, m := range ms {
		f, err := p.js.PublishAsync(m.rawSubj, m.payload)
		if err != nil {
			b.Fatal(err)
		}
		fs[i] = f
	}
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
}

// clientAsync publishes ms with the client's PublishAsync and waits for every outcome.
func (p *publishBench) clientAsync(b *testing.B, ms []benchMsg) {
	acks := make([]<-chan pipeline.PubAck, len(ms))
	for i, m := range ms {
		a, err := p.client.PublishAsync(p.ctx, m.conv, m.msg)
		if err != nil {
			b.Fatalf("publish to %s: %v", m.conv, err)
		}
		acks[i] = a
	}
	for _, a := range acks {
		if r := <-a; r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

// windows runs publish over b.N messages of the load, benchWindow at a time.
func (p *publishBench) windows(b *testing.B, next *int, publish func(*testing.B, []benchMsg)) {
	for done := 0; done < b.N; {
		n := min(benchWindow, b.N-done)
		publish(b, p.take(next, n))
		done += n
	}
}

func BenchmarkPublish(b *testing.B) {
	p := newPublishBench(b)
	b.Run("raw_async", func(b *testing.B) {
		b.ReportAllocs()
		p.windows(b, &p.nextRaw, p.rawAsync)
	})
	b.Run("client_async", func(b *testing.B) {
		b.ReportAllocs()
		p.windows(b, &p.nextClient, p.clientAsync)
	})
	b.Run("client_batch", func(b *testing.B) {
		b.ReportAllocs()
		p.clientBatch(b, &p.nextClient, b.N)
	})
	b.Run("raw_sync", func(b *testing.B) {
		b.ReportAllocs()
		for _, m := range p.take(&p.nextRaw, b.N) {
			if _, err := p.js.Publish(p.ctx, m.rawSubj, m.payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client_sync", func(b *testing.B) {
		b.ReportAllocs()
		for _, m := range p.take(&p.nextClient, b.N) {
			if _, err := p.client.Publish(p.ctx, m.conv, m.msg); err != nil {
				b.Fatalf("publish to %s: %v", m.conv, err)
			}
		}
	})
}

// BenchmarkPublishRatio alternates a window of raw asynchronous publishes with a
// window of the client's (PublishAsync, or PublishBatch), and reports each one's time per message and the client's
// rate as a fraction of the raw rate (raw-ns/msg ÷ client-ns/msg).
func BenchmarkPublishRatio(b *testing.B) {
	b.Run("async", func(b *testing.B) {
		p := newPublishBench(b)
		ratio(b, p, func(b *testing.B, n int) { p.clientAsync(b, p.take(&p.nextClient, n)) })
	})
	b.Run("batch", func(b *testing.B) {
		p := newPublishBench(b)
		ratio(b, p, func(b *testing.B, n int) { p.clientBatch(b, &p.nextClient, n) })
	})
}

// ratio times raw windows against windows of client, on the clock and in this
// process's CPU time (every ack of a window is in before the next starts, so the work
// of each falls in its own time). With COMPACTOR_PUBLISH_BENCH_URL the CPU time is the
// publishers' alone; with the in-process server it includes the server's.
func ratio(b *testing.B, p *publishBench, client func(b *testing.B, n int)) {
	var raw, cl, rawCPU, clCPU time.Duration
	for done := 0; done < b.N; {
		n := min(benchWindow, b.N-done)
		t0, c0 := time.Now(), cpuTime(b)
		p.rawAsync(b, p.take(&p.nextRaw, n))
		t1, c1 := time.Now(), cpuTime(b)
		client(b, n)
		raw, cl = raw+t1.Sub(t0), cl+time.Since(t1)
		rawCPU, clCPU = rawCPU+c1-c0, clCPU+cpuTime(b)-c1
		done += n
	}
	perMsg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(perMsg(raw), "raw-ns/msg")
	b.ReportMetric(perMsg(cl), "client-ns/msg")
	b.ReportMetric(float64(raw)/float64(cl), "client/raw")
	b.ReportMetric(perMsg(rawCPU), "raw-cpu-ns/msg")
	b.ReportMetric(perMsg(clCPU), "client-cpu-ns/msg")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
