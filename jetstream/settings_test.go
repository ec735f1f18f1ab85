package jetstream_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Recording the policy defaults writes one key per role in the deployment bucket and
// leaves CHAT's config as it was: a max age an operator changed after this process
// provisioned (its copy of the config is older) stays, and no metadata is added.
func TestRecordPolicyLeavesChatsConfigAlone(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Another process's provision --update-streams, after this one provisioned.
	chat, err := js.Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	changed := chat.CachedInfo().Config
	changed.MaxAge = 90 * time.Minute
	if _, err := js.UpdateStream(ctx, changed); err != nil {
		t.Fatal(err)
	}
	chat, err = js.Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	want := chat.CachedInfo().Config

	if _, err := st.RecordPolicy(ctx, []string{"trigger"}, map[string]string{"context_window": "8000"}); err != nil {
		t.Fatalf("record as trigger: %v", err)
	}
	before, err := st.RecordPolicy(ctx, []string{"api", "worker"}, map[string]string{"context_window": "128000"})
	if err != nil {
		t.Fatalf("record as api and worker: %v", err)
	}
	if !reflect.DeepEqual(before, jetstream.RolePolicies{"trigger": {"context_window": "8000"}}) {
		t.Fatalf("before the api and worker recorded: %v; want the trigger's record", before)
	}
	got, err := st.RolePolicies(ctx)
	wantRecords := jetstream.RolePolicies{"trigger": {"context_window": "8000"}, "api": {"context_window": "128000"}, "worker": {"context_window": "128000"}}
	if err != nil || !reflect.DeepEqual(got, wantRecords) {
		t.Fatalf("records = %v, %v; want %v", got, err, wantRecords)
	}
	kv, err := js.KeyValue(ctx, st.Config().DeploymentBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "policy.worker"); err != nil || string(e.Value()) != `{"context_window":"128000"}` {
		t.Fatalf("key policy.worker: %v; want the worker's defaults", err)
	}

	chat, err = js.Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	after := chat.CachedInfo().Config
	if !reflect.DeepEqual(after, want) {
		t.Fatalf("CHAT's config changed by recording:\n was %+v\n now %+v", want, after)
	}
	for k := range after.Metadata {
		if strings.Contains(k, "policy") {
			t.Fatalf("CHAT's metadata holds %q", k)
		}
	}
	s := st.Status(ctx)
	if got := strings.Join(s.PolicyDisagreements, "; "); got != "context_window: api 128000, trigger 8000, worker 128000" || s.PolicyRecordsError != "" {
		t.Fatalf("status lists %q (%s); want the trigger's window against the others'", got, s.PolicyRecordsError)
	}
}

// A deployment without the deployment bucket (provisioned by an earlier version) records
// and compares nothing, and that is no error in status.
func TestRecordPolicyWithoutTheBucket(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, st.Config().DeploymentBucket); err != nil {
		t.Fatal(err)
	}
	before, err := st.RecordPolicy(ctx, []string{"worker"}, map[string]string{"context_window": "8000"})
	if !errors.Is(err, jetstream.ErrNoDeploymentBucket) || len(before) != 0 {
		t.Fatalf("record without the bucket: %v, %v; want ErrNoDeploymentBucket and nothing", before, err)
	}
	if _, err := js.KeyValue(ctx, st.Config().DeploymentBucket); !errors.Is(err, natsjs.ErrBucketNotFound) {
		t.Fatalf("the bucket after recording: %v; want it still missing", err)
	}
	if s := st.Status(ctx); s.PolicyRecordsError != "" || len(s.PolicyDisagreements) != 0 {
		t.Fatalf("status without the bucket: %q, %q; want neither an error nor disagreements", s.PolicyRecordsError, s.PolicyDisagreements)
	}
}
