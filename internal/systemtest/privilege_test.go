package systemtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// The producer of accounts.conf stores messages over the max payload, and an object
// again once it is older than half the duplicate window, without the purge API: a purge
// of the objects bucket (which would erase every conversation's large messages) is
// refused, and storing needs no purge.
func TestPrivilegeProducerStoresObjectsWithoutPurge(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	cfg.DuplicateWindow, cfg.ChatMaxAge = 2*time.Second, time.Hour // objects are stored again after 1s
	ctx := ctxFor(t, time.Minute)
	admin := connect("admin")
	if _, err := jetstream.Provision(ctx, admin.NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	producer := connect("producer")
	pst, err := jetstream.Open(ctx, producer.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc := pipeline.NewWithStore(producer.NC, pst)
	large := schemas.Message{Role: schemas.RoleUser,
		Content: schemas.Text("NEEDLE " + strings.Repeat("a large tool output line\n", 2*rolestest.MaxPayload/24))}
	if _, err := pc.Publish(ctx, "priv-large", large); err != nil {
		t.Fatalf("producer publishes a message over the max payload: %v", err)
	}
	es, err := pst.Chat().LoadEntries(ctx, "priv-large", 0, 0)
	if err != nil || len(es) != 1 || es[0].Message.ContentRef == nil {
		t.Fatalf("CHAT holds %d entries (%v); want one stub", len(es), err)
	}
	ref := es[0].Message.ContentRef
	body, err := pst.Objects().Read(ctx, "priv-large", ref)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := natsjs.New(admin.NC)
	if err != nil {
		t.Fatal(err)
	}
	store, err := obs.ObjectStore(ctx, cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	first, err := store.GetInfo(ctx, ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the object to be older than half the duplicate window", func() bool {
		return time.Since(first.ModTime) > cfg.DuplicateWindow/2
	})
	if err := pst.Objects().Put(ctx, "priv-large", ref.Name, body); err != nil {
		t.Fatalf("producer stores the object again: %v", err)
	}
	if later, err := store.GetInfo(ctx, ref.Name); err != nil || later.NUID == first.NUID {
		t.Fatalf("after storing again: %+v, %v; want a new copy", later, err)
	}
	if got, err := pst.Objects().Read(ctx, "priv-large", ref); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after storing again: %d bytes, %v", len(got), err)
	}
	if v := producer.Violations(); v != "" {
		t.Fatalf("the producer was refused subjects while storing objects:\n%s", v)
	}

	refused(t, producer, "purge the objects bucket", "$JS.API.STREAM.PURGE.OBJ_"+cfg.ObjectsBucket, func(ctx context.Context) error {
		_, err := producer.NC.RequestWithContext(ctx, "$JS.API.STREAM.PURGE.OBJ_"+cfg.ObjectsBucket, []byte(`{}`))
		return err
	})
	if _, err := pst.Objects().Read(ctx, "priv-large", ref); err != nil {
		t.Fatalf("the object after the producer's purge: %v", err)
	}
}

// runTrigger runs the trigger role as c's user with cfg's partitions and returns its
// log and its store.
func runTrigger(t *testing.T, ctx context.Context, c *rolestest.Conn, cfg jetstream.Config) (*proctest.LogBuffer, *jetstream.Store) {
	t.Helper()
	st, err := jetstream.Provision(ctx, c.NC, cfg)
	if err != nil {
		t.Fatalf("provision as %s after the admin: %v", c.User, err)
	}
	env := testEnv(t, 8000)
	env.Roles = "trigger"
	env.TriggerPartitions, env.TriggerHeartbeat = cfg.TriggerPartitions, cfg.TriggerHeartbeat
	log := &proctest.LogBuffer{}
	nd, err := build(env, c.NC, st, zerolog.New(log).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nd.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("trigger: %v", err)
		}
	})
	return log, st
}

// The trigger user of accounts.conf runs a trigger of 3 partitions (the file names no
// count): a producer's conversations are compacted, with no permissions violation.
func TestPrivilegeTriggerPartitionCounts(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 3
	cfg.TriggerHeartbeat = 200 * time.Millisecond
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	trigger := connect("trigger")
	runTrigger(t, ctx, trigger, cfg)
	worker := connect("worker")
	wst, err := jetstream.Provision(ctx, worker.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, 8000)
	env.Roles, env.TriggerPartitions = "worker", cfg.TriggerPartitions
	runStack(t, worker.NC, wst, env, nil)

	producer := connect("producer")
	pst, err := jetstream.Open(ctx, producer.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc := pipeline.NewWithStore(producer.NC, pst)
	convs := []string{"priv-p0", "priv-p1", "priv-p2", "priv-p3"}
	publishUntilCompacted(t, ctx, pc, convs)
	if v := trigger.Violations(); v != "" {
		t.Errorf("trigger: permissions violations:\n%s", v)
	}
}

// A trigger whose pulls the server refuses (here a copy of accounts.conf that names
// only the unpartitioned consumer, run with 2 partitions) fails visibly: an error in
// its log naming the refused subject, the refusal counted, and readiness not ready
// with the refusal as its reason.
func TestPrivilegeRefusedPullMakesTheTriggerNotReady(t *testing.T) {
	_, connect := rolestest.ServerFrom(t, narrowedConf(t, `"$JS.API.CONSUMER.MSG.NEXT.CHAT.*"`, `"$JS.API.CONSUMER.MSG.NEXT.CHAT.compactor-trigger"`))
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 2
	cfg.TriggerHeartbeat = 200 * time.Millisecond
	ctx := ctxFor(t, time.Minute)
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	trigger := connect("trigger")
	log, st := runTrigger(t, ctx, trigger, cfg)
	// The operators' listener, as serve runs it.
	ready := telemetry.NewReadiness()
	ready.Running(st)
	metrics := telemetry.NewMetrics("test")
	metrics.Connection(trigger.NC)
	ops, err := telemetry.NewOpsServer("127.0.0.1:0", zerolog.Nop(), ready, metrics)
	if err != nil {
		t.Fatal(err)
	}
	octx, stopOps := context.WithCancel(context.Background())
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Run(octx) }()
	t.Cleanup(func() { stopOps(); <-opsDone })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ops.Addr() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	subject := "$JS.API.CONSUMER.MSG.NEXT.CHAT.compactor-trigger-2-"
	var body string
	eventually(t, 30*time.Second, "/readyz to report the refused pull", func() bool {
		var code int
		code, body = get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, subject)
	})
	if !strings.Contains(body, "permission denied") {
		t.Errorf("/readyz answered %q; want a permission error", body)
	}
	eventually(t, 10*time.Second, "the refusals counted in /metrics", func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, "compactor_nats_permission_refusals_total ") && !strings.Contains(m, "compactor_nats_permission_refusals_total 0\n")
	})
	eventually(t, 10*time.Second, "an error in the trigger's log naming the refused subject", func() bool {
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, `"level":"error"`) && strings.Contains(line, `"subject":"`+subject) {
				return true
			}
		}
		return false
	})
}

// The Go client reports a refusal at once, naming the subject: a reader's publish gets
// no acknowledgement and its requests to the service no answer, yet each fails with
// jetstream.ErrPermission well before the deadline.
func TestPrivilegeClientReportsRefusals(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	ctx := ctxFor(t, time.Minute)
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	rc, err := pipeline.New(ctx, connect("reader").NC)
	if err != nil {
		t.Fatal(err)
	}
	const conv = "priv-refused"
	for _, tc := range []struct {
		what, subject string
		op            func(context.Context) error
	}{
		{"publish", "chat." + conv + ".msg", func(ctx context.Context) error {
			_, err := rc.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")})
			return err
		}},
		{"compact", schemas.CompactSubject, func(ctx context.Context) error {
			_, err := rc.Compact(ctx, conv)
			return err
		}},
		{"forget", schemas.ForgetSubject, func(ctx context.Context) error {
			_, err := rc.Forget(ctx, conv)
			return err
		}},
	} {
		opCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := tc.op(opCtx)
		deadline := opCtx.Err()
		cancel()
		if !errors.Is(err, jetstream.ErrPermission) || !strings.Contains(err.Error(), tc.subject) || deadline != nil {
			t.Errorf("%s as reader: %v (context: %v); want a permission error naming %s before the deadline", tc.what, err, deadline, tc.subject)
		}
	}
}

// narrowedConf writes a copy of accounts.conf with grant replaced by narrower and
// returns its path.
func narrowedConf(t *testing.T, grant, narrower string) string {
	t.Helper()
	conf, err := os.ReadFile(rolestest.AccountsConf())
	if err != nil {
		t.Fatal(err)
	}
	narrowed := strings.Replace(string(conf), grant, narrower, 1)
	if narrowed == string(conf) {
		t.Fatalf("accounts.conf no longer grants %s: change this test", grant)
	}
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, []byte(narrowed), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A worker whose pulls from the work queue the server refuses is not ready either,
// with the refusal as the reason.
func TestPrivilegeRefusedPullMakesTheWorkerNotReady(t *testing.T) {
	_, connect := rolestest.ServerFrom(t, narrowedConf(t, `"$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS.compactor-workers"`,
		`"$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS.other"`))
	cfg := jetstream.DefaultConfig()
	ctx := ctxFor(t, time.Minute)
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	worker := connect("worker")
	st, err := jetstream.Provision(ctx, worker.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, 8000)
	env.Roles = "worker"
	runStack(t, worker.NC, st, env, nil)
	ready := telemetry.NewReadiness()
	ready.Running(st)
	eventually(t, 30*time.Second, "readiness to report the refused pull", func() bool {
		err := ready.Check(ctx)
		return errors.Is(err, jetstream.ErrPermission) && strings.Contains(err.Error(), "$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS.compactor-workers")
	})
}
