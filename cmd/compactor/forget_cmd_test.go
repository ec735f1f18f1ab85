package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// compactor forget: through the service, idempotent, and a clear error for an invalid
// id (nothing is sent).
func TestForgetCommand(t *testing.T) {
	env := testEnv(t, 8000)
	s := startStack(t, env, nil)
	t.Setenv("COMPACTOR_NATS_URL", s.nc.ConnectedUrl())
	if _, _, err := cli(t, `{"role":"user","content":"NEEDLE-cli"}`+"\n", "publish", "cli-gone"); err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, "", "forget", "cli-gone", "--json")
	if err != nil {
		t.Fatalf("forget: %v", err)
	}
	var r schemas.ForgetResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Conversation != "cli-gone" || r.Deleted.ChatMessages != 1 {
		t.Fatalf("forget printed %s (%v); want one message deleted", out, err)
	}
	if found, _ := jstest.Scan(t, s.nc, "cli-gone", "NEEDLE-cli"); len(found) > 0 {
		t.Fatalf("after compactor forget: %v", found)
	}
	for _, conv := range []string{"cli-gone", "never-there"} {
		out, _, err := cli(t, "", "forget", conv, "--json")
		if err != nil || !strings.Contains(out, `"chat_messages": 0`) {
			t.Fatalf("forget %s again: %s, %v; want nothing deleted and no error", conv, out, err)
		}
	}
	for _, args := range [][]string{{"forget"}, {"forget", "a.b"}, {"forget", "*"}, {"forget", "a", "b"}} {
		_, _, err := cli(t, "", args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v; want a usage error", args, err)
		}
	}
	if _, _, err := cli(t, "", "forget", "a.b"); err == nil || !strings.Contains(err.Error(), "character '.' at position 1") {
		t.Errorf("forget a.b: %v; want the id rule", err)
	}
	// The Go client refuses an invalid id before sending anything.
	if _, err := s.client.Forget(ctxFor(t, 5*time.Second), "a b"); !errors.Is(err, schemas.ErrInvalid) {
		t.Errorf("Forget(%q): %v; want schemas.ErrInvalid", "a b", err)
	}
	help, _, _ := cli(t, "", "help")
	if !strings.Contains(help, "compactor forget <conv>") || !strings.Contains(help, "COMPACTOR_FORGET_TTL") {
		t.Error("help does not show compactor forget and COMPACTOR_FORGET_TTL")
	}
}
