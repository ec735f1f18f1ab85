package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// A process whose settings differ from the existing streams and buckets says so and
// changes nothing: raw history stays.
func TestProvisionKeepsExistingStreams(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	base := jetstream.DefaultConfig()
	st, err := jetstream.Provision(ctxT(t), nc, base)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := st.Chat().Publish(ctxT(t), "c", fmt.Appendf(nil, `{"role":"user","content":"m%d"}`, i), ""); err != nil {
			t.Fatal(err)
		}
	}
	other := base
	other.ChatMaxAge = 3 * time.Minute
	other.ResultHistory = 2
	_, conflict := jetstream.Provision(ctxT(t), nc, other)
	t.Logf("provision with other settings: %v", conflict)
	if !errors.Is(conflict, jetstream.ErrConflict) {
		t.Errorf("provision with another max age and history: %v; want ErrConflict with the differences", conflict)
	}
	if conflict != nil {
		for _, want := range []string{"stream CHAT", "max_age", "3m0s", "bucket compaction", "history"} {
			if !strings.Contains(conflict.Error(), want) {
				t.Errorf("error %q does not mention %q", conflict, want)
			}
		}
	}
	info, err := testJS(t, nc).Stream(ctxT(t), "CHAT")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo(); got.Config.MaxAge != 0 || got.State.Msgs != 5 {
		t.Fatalf("CHAT after the refused provision: max age %s, %d messages; want 0 and 5", got.Config.MaxAge, got.State.Msgs)
	}
	kv, err := testJS(t, nc).Stream(ctxT(t), "KV_compaction")
	if err != nil {
		t.Fatal(err)
	}
	if got := kv.CachedInfo().Config.MaxMsgsPerSubject; got != int64(base.ResultHistory) {
		t.Fatalf("bucket history after the refused provision: %d; want %d", got, base.ResultHistory)
	}
	var ce *jetstream.ConflictError
	if !errors.As(conflict, &ce) || len(ce.Differences) != 3 {
		t.Fatalf("differences: %v; want max_age of CHAT, history of compaction and the objects' ttl, which follows CHAT's max age", conflict)
	}
	for _, d := range ce.Differences {
		switch d.Setting {
		case "max_age":
			if d.Kind != "stream" || d.Name != "CHAT" || d.Existing != "0s (kept forever)" || d.Wanted != "3m0s" {
				t.Errorf("max age difference: %+v", d)
			}
		case "history":
			if d.Kind != "bucket" || d.Name != "compaction" || d.Existing != "5" || d.Wanted != "2" {
				t.Errorf("history difference: %+v", d)
			}
		case "ttl": // the max age plus the duplicate window, so objects outlive their stubs
			if d.Kind != "object store" || d.Name != base.ObjectsBucket || d.Existing != "0s (kept forever)" || d.Wanted != "5m0s" {
				t.Errorf("objects ttl difference: %+v", d)
			}
		default:
			t.Errorf("unexpected difference %+v", d)
		}
	}

	// The same settings again: no difference.
	if _, err := jetstream.Provision(ctxT(t), nc, base); err != nil {
		t.Fatalf("provision with the existing settings: %v", err)
	}

	// On purpose: the differing settings are applied, the messages stay.
	other.UpdateExisting = true
	if _, err := jetstream.Provision(ctxT(t), nc, other); err != nil {
		t.Fatalf("provision with UpdateExisting: %v", err)
	}
	info, err = testJS(t, nc).Stream(ctxT(t), "CHAT")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo(); got.Config.MaxAge != other.ChatMaxAge || got.State.Msgs != 5 || got.Config.Duplicates != base.DuplicateWindow {
		t.Fatalf("CHAT after the update: max age %s, duplicates %s, %d messages; want %s, %s and 5",
			got.Config.MaxAge, got.Config.Duplicates, got.State.Msgs, other.ChatMaxAge, base.DuplicateWindow)
	}
	kv, err = testJS(t, nc).Stream(ctxT(t), "KV_compaction")
	if err != nil {
		t.Fatal(err)
	}
	if got := kv.CachedInfo().Config.MaxMsgsPerSubject; got != int64(other.ResultHistory) {
		t.Fatalf("bucket history after the update: %d; want %d", got, other.ResultHistory)
	}
	obj, err := testJS(t, nc).Stream(ctxT(t), "OBJ_"+base.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.CachedInfo().Config.MaxAge; got != other.ObjectsTTL() {
		t.Fatalf("objects ttl after the update: %s; want %s", got, other.ObjectsTTL())
	}
	// And now a process with the old settings is the one that differs.
	if _, err := jetstream.Provision(ctxT(t), nc, base); !errors.Is(err, jetstream.ErrConflict) {
		t.Fatalf("provision with the old settings after the update: %v; want ErrConflict", err)
	}
}

// Missing streams, buckets and consumers are created even when existing ones differ,
// and a consumer's changed setting is a difference too.
func TestProvisionCreatesWhatIsMissing(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	base := jetstream.DefaultConfig()
	if _, err := jetstream.Provision(ctxT(t), nc, base); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctxT(t), base.DeadStream); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteObjectStore(ctxT(t), base.ObjectsBucket); err != nil {
		t.Fatal(err)
	}
	other := base
	other.WorkerAckWait = 2 * time.Minute
	_, err = jetstream.Provision(ctxT(t), nc, other)
	var ce *jetstream.ConflictError
	if !errors.As(err, &ce) || len(ce.Differences) != 1 || ce.Differences[0].Setting != "ack_wait" ||
		ce.Differences[0].Name != base.RequestsStream+"/"+base.WorkerConsumer {
		t.Fatalf("provision with another ack wait: %v; want one ack_wait difference of the worker consumer", err)
	}
	if _, err := js.Stream(ctxT(t), base.DeadStream); err != nil {
		t.Fatalf("the missing stream was not created: %v", err)
	}
	if _, err := js.ObjectStore(ctxT(t), base.ObjectsBucket); err != nil {
		t.Fatalf("the missing object store was not created: %v", err)
	}
	c, err := js.Consumer(ctxT(t), base.RequestsStream, base.WorkerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != base.WorkerAckWait {
		t.Fatalf("worker ack wait after the refused provision: %s; want %s", got, base.WorkerAckWait)
	}
}

// lines is a zerolog writer that hands each log line to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// ProvisionRetrying waits for JetStream (here: a server whose JetStream is enabled only
// after the first retries were logged) and returns a permanent error at once.
func TestProvisionRetrying(t *testing.T) {
	ns := jstest.ServerWith(t, func(o *server.Options) { o.JetStream = false })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	fast := jetstream.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}

	t.Run("permanent error at once", func(t *testing.T) {
		logged := make(lines, 100)
		bad := jetstream.DefaultConfig()
		bad.Replicas = 0
		_, err := jetstream.ProvisionRetrying(ctxT(t), nc, bad, fast, zerolog.New(logged))
		if !errors.Is(err, jetstream.ErrConfig) {
			t.Fatalf("invalid config: %v; want ErrConfig", err)
		}
		if len(logged) > 0 {
			t.Fatalf("an invalid config was retried: %s", <-logged)
		}
	})

	t.Run("jetstream ready later", func(t *testing.T) {
		logged := make(lines, 1000)
		done := make(chan error, 1)
		go func() {
			_, err := jetstream.ProvisionRetrying(ctxT(t), nc, jetstream.DefaultConfig(), fast, zerolog.New(logged))
			done <- err
		}()
		for range 3 {
			select {
			case line := <-logged:
				if !strings.Contains(line, "retrying provisioning") {
					t.Fatalf("log line %s; want a retry", line)
				}
			case err := <-done:
				t.Fatalf("provision returned before JetStream was enabled: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("no retry logged within 10s")
			}
		}
		if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("provision after JetStream was enabled: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("provision did not finish within 20s of JetStream being enabled")
		}
		js, _ := natsjs.New(nc)
		if _, err := js.Stream(ctxT(t), "CHAT"); err != nil {
			t.Fatalf("CHAT after provisioning: %v", err)
		}
	})
}

// A request that gets no answer at all (lost while a server starts, a cluster still
// electing) costs one attempt, not the caller's whole deadline: the next attempt asks
// again. (CI once failed when creating CHAT at 3 replicas outlasted its one request.)
func TestProvisionRetryingAsksAgainAfterASilentAttempt(t *testing.T) {
	ns := jstest.ServerWith(t, func(o *server.Options) { o.JetStream = false })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// Something that takes JetStream API requests and never answers, until JetStream is up.
	swallowed := make(chan struct{}, 1)
	silent, err := nc.Subscribe("$JS.API.>", func(*nats.Msg) {
		select {
		case swallowed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		b := jetstream.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond, Attempt: 500 * time.Millisecond}
		_, err := jetstream.ProvisionRetrying(ctx, nc, jetstream.DefaultConfig(), b, zerolog.Nop())
		done <- err
	}()
	select {
	case <-swallowed:
	case <-time.After(10 * time.Second):
		t.Fatal("no JetStream API request within 10s")
	}
	if err := silent.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("provision after a silent attempt: %v", err)
	}
}

// At 3 replicas on a cluster, provisioning again with the same settings finds no
// difference (the server's normalised configs compare equal), and a process asking for
// fewer replicas is refused.
func TestProvisionOnAClusterIsIdempotent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := jstest.StartCluster(t, 3)
	nc := c.Conn(t)
	cfg := jetstream.DefaultConfig()
	cfg.Replicas = 3
	// The first creation at 3 replicas waits for each new stream's leader election, which
	// on a loaded machine can outlast one request: retry as serve does.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fast := jetstream.Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	if _, err := jetstream.ProvisionRetrying(ctx, nc, cfg, fast, zerolog.Nop()); err != nil {
		t.Fatalf("provision at 3 replicas: %v", err)
	}
	if _, err := jetstream.Provision(ctxT(t), nc, cfg); err != nil {
		t.Fatalf("provision again at 3 replicas: %v", err)
	}
	one := jetstream.DefaultConfig()
	_, err := jetstream.Provision(ctxT(t), nc, one)
	var ce *jetstream.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("provision at 1 replica over 3: %v; want a conflict", err)
	}
	for _, d := range ce.Differences {
		if d.Setting != "replicas" || d.Existing != "3" || d.Wanted != "1" {
			t.Errorf("difference %s; want only replicas 3 → 1", d)
		}
	}
}

// testJS is a JetStream context of the test's own, to look at what Provision did.
func testJS(t *testing.T, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
