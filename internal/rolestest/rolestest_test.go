package rolestest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Every user connects with its own password; a producer may publish chat but not an
// event, and the server's refusal reaches Violations.
func TestServerRoles(t *testing.T) {
	_, connect := Server(t)
	for _, u := range Users {
		if c := connect(u); c.User != u || !c.NC.IsConnected() {
			t.Fatalf("connect(%q): user %q, connected %v", u, c.User, c.NC.IsConnected())
		}
	}
	p := connect("producer")
	if err := p.NC.Publish("compact.event.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := p.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	want := `Permissions Violation for Publish to "compact.event.x"`
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Violations(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("violations %q; want %q", p.Violations(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every user of tenants.conf connects with its own password, read from the variable
// PasswordVar names; a tenant's producer may publish its chat but not subscribe to
// another user's inbox, and the refusal is waited for as an event.
func TestTenantsServer(t *testing.T) {
	if got := PasswordVar("acme-producer"); got != "NATS_ACME_PRODUCER_PASSWORD" {
		t.Fatalf("PasswordVar(acme-producer) = %q", got)
	}
	r := TenantsServer(t)
	for _, u := range TenantsConfUsers() {
		if c := r.Connect(u); c.User != u || !c.NC.IsConnected() {
			t.Fatalf("Connect(%q): user %q, connected %v", u, c.User, c.NC.IsConnected())
		}
	}
	if _, err := r.Dial("nobody"); err == nil {
		t.Fatal("a user tenants.conf does not have connected")
	}
	p := r.Connect("acme-producer")
	since := p.Mark()
	if _, err := p.NC.SubscribeSync("_INBOX_globex-producer.>"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitFor(ctx, since, `Permissions Violation for Subscription to "_INBOX_globex-producer.>"`); err != nil {
		t.Fatal(err)
	}
	if p.Disconnects() != 0 {
		t.Fatalf("acme-producer was disconnected %d times", p.Disconnects())
	}
}
