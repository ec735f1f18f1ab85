package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// The users of deploy/nats/accounts.conf refuse what their role does not do: the
// client's PublishAsync and its reads report the refusal as a *jetstream.PermissionError
// naming the subject, not as a timeout once their wait is over.
func TestAsyncPublishAndReadsReportARefusal(t *testing.T) {
	_, connect := rolestest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := connect("admin").NC
	st, err := jetstream.Provision(ctx, admin, jetstream.DefaultConfig())
	if err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	// A conversation with a message over the server's max payload (1 MiB): an object.
	const conv = "refused-reads"
	ac := pipeline.NewWithStore(admin, st)
	if _, err := ac.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("NEEDLE " + strings.Repeat("x", 1200<<10))}); err != nil {
		t.Fatal(err)
	}
	permission := func(t *testing.T, what string, err error, subject string) {
		t.Helper()
		var pe *jetstream.PermissionError
		if !errors.Is(err, jetstream.ErrPermission) || !errors.As(err, &pe) || !strings.HasPrefix(pe.Subject, subject) {
			t.Errorf("%s: %v; want a permission error naming %s", what, err, subject)
		}
	}

	t.Run("PublishAsync as reader", func(t *testing.T) {
		rc, err := pipeline.New(ctx, connect("reader").NC)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := rc.PublishAsync(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")})
		if err == nil {
			err = (<-ch).Err
		}
		permission(t, "PublishAsync", err, "chat."+conv+".msg")
	})
	// The trigger reads CHAT and the results bucket, not the objects bucket.
	t.Run("Context as trigger", func(t *testing.T) {
		tc, err := pipeline.New(ctx, connect("trigger").NC)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tc.Context(ctx, conv)
		permission(t, "Context", err, "$JS.API.")
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err = tc.Recall(rctx, conv, pipeline.Query("NEEDLE")) // its object is read to match it
		permission(t, "Recall", err, "$JS.API.")
	})
}
