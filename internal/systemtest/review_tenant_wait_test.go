package systemtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/rolestest"
)

// Review of issue 21: tenants.conf's exports keep nats-server's default response
// threshold (2 minutes), while the compactor service waits up to 5 minutes for a
// compaction's outcome (compactor.compact with wait_ms; `compactor compact --wait`
// says "the service caps it at 5m"). Through the import, an answer the service sends
// after 2 minutes is dropped by the server: the tenant never gets it, not even the
// "queued" a wait that ends first promises, and its request times out. The api user
// here answers acme's compactor.compact as the service would after 2m10s.
func TestReviewTenantAnswerAfterTwoMinutesIsDelivered(t *testing.T) {
	if testing.Short() {
		t.Skip("waits over two minutes")
	}
	r := rolestest.TenantsServer(t)
	api := r.Connect("api")
	const late = 2*time.Minute + 10*time.Second
	sub, err := api.NC.QueueSubscribe("compactor.acme.compact", "q", func(m *nats.Msg) {
		go func() {
			time.Sleep(late) // the service's wait for the outcome (wait_ms 150000, under its 5m cap)
			_ = m.Respond([]byte(`{"status":"completed"}`))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := api.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	acme := r.Connect("acme-producer")
	ctx, cancel := context.WithTimeout(context.Background(), late+30*time.Second)
	defer cancel()
	start := time.Now()
	m, err := acme.NC.RequestWithContext(ctx, "compactor.compact", []byte(`{"conversation":"c1","wait_ms":150000}`))
	if err != nil {
		t.Fatalf("acme's compactor.compact with wait_ms 150000, answered by the service after %s: %v after %s; "+
			"the export's response threshold (default 2m) dropped the answer", late, err, time.Since(start).Round(time.Second))
	}
	t.Logf("answered %s after %s", m.Data, time.Since(start).Round(time.Second))
}
