package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/jetstream/jstest"
)

// natsWithoutJetStream starts a nats-server whose JetStream is off until the test
// enables it, as a cluster's is until it has a meta leader.
func natsWithoutJetStream(t *testing.T) *server.Server {
	t.Helper()
	return jstest.ServerWith(t, func(o *server.Options) { o.JetStream = false })
}

// startServe runs `compactor serve` with args until the test ends; its result arrives
// on the channel.
func startServe(t *testing.T, logs *proctest.LogBuffer, args ...string) <-chan error {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, append([]string{"serve"}, args...), stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: logs}, os.LookupEnv)
	}()
	t.Cleanup(stop)
	return served
}

// serve keeps retrying while JetStream is not ready, logging each retry, and runs once it
// is: an orchestrator's start order or a cluster still electing its leader is no reason
// to exit.
func TestServeWaitsForJetStream(t *testing.T) {
	testEnv(t, 128000)
	ns := natsWithoutJetStream(t)
	t.Setenv("COMPACTOR_NATS_URL", ns.ClientURL())
	t.Setenv("COMPACTOR_LOG_LEVEL", "warn")
	logs := &proctest.LogBuffer{}
	served := startServe(t, logs)
	eventually(t, 20*time.Second, "serve to log a retry", func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve returned before JetStream was ready: %v\n%s", err, logs)
		default:
		}
		return strings.Count(logs.String(), "retrying provisioning") >= 2
	})
	first, _, _ := strings.Cut(logs.String(), "\n")
	t.Logf("serve logged: %s", first)
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	waitForService(t, ns.ClientURL(), served, logs, "JetStream is ready")
}

// A permanent error is returned at once, without retries: here, existing streams whose
// retention differs from this process's COMPACTOR_CHAT_MAX_AGE. With
// COMPACTOR_UPDATE_STREAMS the change is applied on purpose.
func TestServeRefusesToChangeExistingStreams(t *testing.T) {
	testEnv(t, 128000)
	ns := natsWithoutJetStream(t)
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := jetstream.Provision(ctxFor(t, 10*time.Second), nc, jetstream.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_NATS_URL", ns.ClientURL())
	t.Setenv("COMPACTOR_LOG_LEVEL", "warn")
	t.Setenv("COMPACTOR_CHAT_MAX_AGE", "3m")
	logs := &proctest.LogBuffer{}
	var err2 error
	select {
	case err2 = <-startServe(t, logs):
	case <-time.After(30 * time.Second):
		t.Fatalf("serve with a conflicting COMPACTOR_CHAT_MAX_AGE kept running; want it to stop\n%s", logs)
	}
	if !errors.Is(err2, jetstream.ErrConflict) {
		t.Fatalf("serve: %v; want ErrConflict", err2)
	}
	for _, want := range []string{"stream CHAT", "max_age", "3m0s", "COMPACTOR_UPDATE_STREAMS"} {
		if !strings.Contains(err2.Error(), want) {
			t.Errorf("serve error %q does not mention %q", err2, want)
		}
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("a permanent error was retried:\n%s", logs)
	}
	js, _ := nc.JetStream()
	if si, err := js.StreamInfo("CHAT"); err != nil || si.Config.MaxAge != 0 {
		t.Fatalf("CHAT after the refused start: %v, %v; want max age 0", si, err)
	}

	// On purpose: serve --update-streams applies it and runs.
	served := startServe(t, logs, "--update-streams")
	eventually(t, 30*time.Second, "CHAT's max age to be updated", func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve --update-streams returned: %v\n%s", err, logs)
		default:
		}
		si, err := js.StreamInfo("CHAT")
		return err == nil && si.Config.MaxAge == 3*time.Minute
	})
}

// serve started before its NATS server waits for it too.
func TestServeWaitsForNATS(t *testing.T) {
	testEnv(t, 128000)
	addr := freeAddr(t)
	t.Setenv("COMPACTOR_NATS_URL", "nats://"+addr)
	t.Setenv("COMPACTOR_LOG_LEVEL", "warn")
	logs := &proctest.LogBuffer{}
	served := startServe(t, logs)
	eventually(t, 30*time.Second, "serve to log a retry", func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve returned before NATS was up: %v\n%s", err, logs)
		default:
		}
		return strings.Contains(logs.String(), "retrying provisioning")
	})
	first, _, _ := strings.Cut(logs.String(), "\n")
	t.Logf("serve logged: %s", first)
	srv, err := embedded.Start(embedded.Config{Listen: addr, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	waitForService(t, srv.ClientURL(), served, logs, "NATS is up")
}

// waitForService waits until the compactor service started by startServe answers on
// url, failing the test at once if serve returns meanwhile.
func waitForService(t *testing.T, url string, served <-chan error, logs *proctest.LogBuffer, when string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	eventually(t, 60*time.Second, "the compactor service to answer once "+when, func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve returned: %v\n%s", err, logs)
		default:
		}
		m, err := nc.Request("compactor.status", []byte(`{}`), time.Second)
		return err == nil && m.Header.Get("Nats-Service-Error") == ""
	})
}
