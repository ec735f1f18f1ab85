package rolestest

import (
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
