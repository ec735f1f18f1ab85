// Package jstest starts a real in-process nats-server with JetStream for tests: a fresh
// store directory and a free port per test, shut down by t.Cleanup.
package jstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
)

// Server starts a server and returns it. Its store is a throwaway directory, flushed to
// disk in the background (nats-server's own default) rather than on every write as the
// shipped embedded server does: what the tests built on it check does not depend on
// the disk, and the tests that do (power loss, the shipped settings) start their
// servers with the shipped configuration.
func Server(t testing.TB) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), SyncInterval: 2 * time.Minute})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Conn connects to srv and closes the connection at cleanup.
func Conn(t testing.TB, srv *embedded.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// WithJetStream starts a server, connects, provisions the contract with cfg (nil: the
// defaults) and runs fn.
func WithJetStream(t *testing.T, fn func(t *testing.T, nc *nats.Conn, st *jetstream.Store)) {
	t.Helper()
	srv := Server(t)
	nc := Conn(t, srv)
	st := Provision(t, nc)
	fn(t, nc, st)
}

// Provision provisions the default contract on nc.
func Provision(t testing.TB, nc *nats.Conn) *jetstream.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	return st
}

// MaxPayload is a ServerWith option: the server takes messages of at most n bytes (its
// max_payload, 1 MiB by default), so tests of messages over it stay small and fast.
func MaxPayload(n int32) func(o *server.Options) {
	return func(o *server.Options) { o.MaxPayload = n }
}

// ConnTo connects to the server at url and closes the connection at cleanup.
func ConnTo(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// AllowRollUps makes the objects bucket named bucket allow roll-ups,
// as every version before roll-ups were refused made it: for tests whose objects are
// written or deleted with nats.go's ObjectStore (Put and Delete roll up the
// description's subject), as older clients and deployments did.
func AllowRollUps(t testing.TB, nc *nats.Conn, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatalf("objects bucket %s: %v", bucket, err)
	}
	c := s.CachedInfo().Config
	c.AllowRollup = true
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatalf("allow roll-ups on %s: %v", bucket, err)
	}
}
