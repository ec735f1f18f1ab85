package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// A conversation exists once it has a message or a value, and not after it was
// forgotten.
func TestExists(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		exists := func(conv string) bool {
			t.Helper()
			ok, err := c.Exists(ctx, conv)
			if err != nil {
				t.Fatalf("Exists(%s): %v", conv, err)
			}
			return ok
		}
		if exists("never") {
			t.Error("a conversation never published to exists")
		}
		if _, err := c.Publish(ctx, "published", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")}); err != nil {
			t.Fatal(err)
		}
		if !exists("published") {
			t.Error("a conversation with a message does not exist")
		}
		// A value alone (say, its messages aged out of CHAT) is enough.
		v := &schemas.Result{SchemaVersion: 1, Conversation: "valued", TailStartSeq: 1, DeclinedAtSeq: 7, CreatedAt: time.Now().UTC()}
		if _, err := st.Results().Put(ctx, v, 0); err != nil {
			t.Fatal(err)
		}
		if !exists("valued") {
			t.Error("a conversation with a value does not exist")
		}
		startService(t, nc, st)
		if _, err := c.Forget(ctx, "published"); err != nil {
			t.Fatal(err)
		}
		if exists("published") {
			t.Error("a forgotten conversation exists")
		}
		if _, err := c.Exists(ctx, "a.b"); !errors.Is(err, schemas.ErrInvalid) {
			t.Errorf("Exists(a.b): %v; want schemas.ErrInvalid", err)
		}
	})
}

// A 503 of the service (no wait slot free) matches ErrBusy: nothing was queued, retry.
func TestServiceBusyMatchesErrBusy(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		r, err := policy.NewResolver(nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := service.New(service.Config{MaxConcurrentWaits: 1}, nc, st, basePolicies{r}, r.Resolve, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(sctx) }()
		defer func() { stop(); <-done }()
		requested := make(chan *nats.Msg, 1)
		sub, err := nc.ChanSubscribe("compact.event.first", requested)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		c := pipeline.NewWithStore(nc, st)
		for _, conv := range []string{"first", "second"} {
			if _, err := c.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}); err != nil {
				t.Fatal(err)
			}
		}
		first := make(chan error, 1)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			for {
				_, err := c.Compact(wctx, "first", pipeline.Wait(time.Minute))
				if !errors.Is(err, pipeline.ErrNoService) { // until the service runs
					first <- err
					return
				}
			}
		}()
		select { // the first request holds the only wait slot once it is queued
		case <-requested:
		case err := <-first:
			t.Fatalf("first Compact returned %v before its request was queued", err)
		case <-ctx.Done():
			t.Fatal("the first request was never queued")
		}
		_, err = c.Compact(ctx, "second", pipeline.Wait(time.Second))
		var se *pipeline.ServiceError
		if !errors.Is(err, pipeline.ErrBusy) || !errors.As(err, &se) || se.Code != 503 {
			t.Fatalf("Compact while the only wait slot is taken: %v; want a 503 matching ErrBusy", err)
		}
		if errors.Is(&pipeline.ServiceError{Code: 400}, pipeline.ErrBusy) || !errors.Is(&pipeline.ServiceError{Code: 400}, schemas.ErrInvalid) {
			t.Error("a 400 must match schemas.ErrInvalid and not ErrBusy")
		}
		cancel()
		<-first
	})
}
