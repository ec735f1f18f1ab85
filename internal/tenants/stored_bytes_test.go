package tenants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A tenant's stored_bytes bounds its objects bucket as well as its CHAT: a large
// message's object over the bound is refused, and what the tenant stores (the gauge
// and compactor tenants read ChatState) counts its objects.
func TestStoredBytesBoundsTheTenantsObjects(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const bound = 64 << 10
	cfg, err := tenants.Tenant{Quotas: tenants.Quotas{StoredBytes: bound}}.JetStream(jetstream.DefaultConfig(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	object := func(fill string) (string, []byte) {
		m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat(fill, (40<<10)/len(fill)))}
		stub, body, err := m.Offload("big", cfg.ObjectsBucket, 1)
		if err != nil {
			t.Fatal(err)
		}
		return stub.ContentRef.Name, body
	}
	name, body := object("first large output ")
	if err := st.Objects().Put(ctx, "big", name, body); err != nil {
		t.Fatalf("an object under the bound: %v", err)
	}
	state, err := st.ChatState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if state.Bytes < int64(len(body)) || state.ObjectBytes < int64(len(body)) || state.Bytes != state.ChatBytes+state.ObjectBytes {
		t.Errorf("stored %+v; want the object's %d bytes counted", state, len(body))
	}
	name, body = object("second large output ")
	if err := st.Objects().Put(ctx, "big", name, body); err == nil || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Errorf("an object past the tenant's stored_bytes: %v; want it refused", err)
	}
	if after, err := st.ChatState(ctx); err != nil || after.Bytes > bound {
		t.Errorf("stored %+v (%v); want at most the bound of %d bytes", after, err, bound)
	}
}

// A large message whose object does not fit in the tenant's stored_bytes leaves
// nothing behind: no chunk without a description (which no forget finds and a producer
// may not purge), however often it is tried again, and a smaller object still fits.
func TestAnObjectOverTheBoundLeavesNoChunks(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const bound = 300 << 10
	cfg, err := tenants.Tenant{Quotas: tenants.Quotas{StoredBytes: bound}}.JetStream(jetstream.DefaultConfig(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	object := func(size int) (string, []byte) {
		m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat("large output ", size/13))}
		stub, body, err := m.Offload("big", cfg.ObjectsBucket, 1)
		if err != nil {
			t.Fatal(err)
		}
		return stub.ContentRef.Name, body
	}
	name, body := object(600 << 10)
	for range 3 {
		if err := st.Objects().Put(ctx, "big", name, body); err == nil || !strings.Contains(err.Error(), "maximum bytes exceeded") {
			t.Fatalf("an object of %d bytes past a bound of %d: %v; want it refused", len(body), bound, err)
		}
	}
	if state, err := st.ChatState(ctx); err != nil || state.ObjectBytes != 0 {
		t.Fatalf("after three refused objects the bucket holds %+v (%v); want nothing left behind", state, err)
	}
	name, body = object(100 << 10)
	if err := st.Objects().Put(ctx, "big", name, body); err != nil {
		t.Fatalf("an object that fits: %v", err)
	}
}
