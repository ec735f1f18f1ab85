package jetstream_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

func TestValidateTenant(t *testing.T) {
	for _, ok := range []string{"acme", "globex", "a", "team-7", "0ps", strings.Repeat("x", jetstream.MaxTenantLength)} {
		if err := jetstream.ValidateTenant(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-acme", "Acme", "a_b", "a.b", "a*", ">", "a b", "é", strings.Repeat("x", jetstream.MaxTenantLength+1)} {
		if err := jetstream.ValidateTenant(bad); !errors.Is(err, jetstream.ErrTenant) {
			t.Errorf("%q: accepted (%v)", bad, err)
		}
	}
}

// A tenant's names share nothing with the deployment's or another tenant's: no stream,
// no bucket, no subject one of them publishes on is the other's.
func TestTenantNamesAreApart(t *testing.T) {
	base := jetstream.DefaultNames()
	acme, err := jetstream.TenantNames(base, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if acme.ChatStream != "CHAT_acme" || acme.ChatPrefix != "chat.acme" || acme.ResultsBucket != "compaction_acme" ||
		acme.WorkerConsumer != base.WorkerConsumer {
		t.Fatalf("names %+v", acme)
	}
	subj, err := acme.ChatSubject("c1")
	if err != nil || subj != "chat.acme.c1.msg" {
		t.Fatalf("chat subject %q %v", subj, err)
	}
	if _, ok := base.ConversationOf(subj); ok {
		t.Fatalf("the deployment's layout reads %s as one of its conversations", subj)
	}
	if conv, ok := acme.ConversationOf(subj); !ok || conv != "c1" {
		t.Fatalf("acme reads %s as %q %v", subj, conv, ok)
	}
	own, _ := base.ChatSubject("acme")
	if _, ok := acme.ConversationOf(own); ok {
		t.Fatalf("acme reads the deployment's %s as its own", own)
	}
	ab, _ := jetstream.TenantNames(base, "a-b")
	a, _ := jetstream.TenantNames(base, "a")
	for _, s := range ab.Streams() {
		if slices.Contains(a.Streams(), s) || slices.Contains(base.Streams(), s) {
			t.Errorf("stream %s is two layouts'", s)
		}
	}
	if _, err := jetstream.TenantNames(base, "a.b"); !errors.Is(err, jetstream.ErrTenant) {
		t.Fatalf("a.b: %v", err)
	}
}

// Two tenants and the deployment's own layout are provisioned side by side on one server,
// and the same conversation id in each is a conversation of its own.
func TestTenantsProvisionSideBySide(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	base := jetstream.DefaultConfig()
	own, err := jetstream.Provision(ctxT(t), nc, base)
	if err != nil {
		t.Fatal(err)
	}
	stores := []*jetstream.Store{own}
	for _, tenant := range []string{"acme", "globex"} {
		cfg, err := base.ForTenant(tenant)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.ForTenant("x"); !errors.Is(err, jetstream.ErrConfig) {
			t.Fatalf("a tenant's config made another tenant's: %v", err)
		}
		st, err := jetstream.Provision(ctxT(t), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
	}
	for i, st := range stores {
		for range i + 1 {
			if _, err := st.Chat().Publish(ctxT(t), "c1", []byte(`{"role":"user","content":"hi"}`), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, st := range stores {
		last, err := st.Chat().LastSeq(ctxT(t), "c1")
		if err != nil {
			t.Fatal(err)
		}
		if last != uint64(i+1) {
			t.Errorf("store %d (tenant %q): c1 ends at %d, want %d", i, st.Config().Tenant, last, i+1)
		}
	}
}
