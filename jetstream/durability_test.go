package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// syncServer starts a server from a configuration with a system account (user sys) and
// an ordinary JetStream account (user app), its jetstream block holding jsBlock, and
// its monitoring port on a free port of 127.0.0.1.
func syncServer(t *testing.T, jsBlock string) *server.Server {
	t.Helper()
	conf := fmt.Sprintf(`
system_account: SYS
accounts {
  SYS { users: [ { user: sys, password: sys-pass } ] }
  APP { jetstream: enabled, users: [ { user: app, password: app-pass } ] }
}
jetstream { %s }
`, jsBlock)
	return jstest.ServerFromFile(t, jstest.WriteFile(t, "server.conf", []byte(conf)), func(o *server.Options) {
		o.HTTPHost, o.HTTPPort = "127.0.0.1", -1
	})
}

func connectAs(t *testing.T, ns *server.Server, user, pass string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, pass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func monitorURL(ns *server.Server) string { return "http://" + ns.MonitorAddr().String() }

// What each way of asking reports of a server that syncs every write and of one that
// flushes every 2 minutes (nats-server's default): the system account's user and the
// monitoring URL read it; an ordinary account's user cannot, and is told so.
func TestReadDurabilityReportsTheServersSetting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	always := syncServer(t, "sync_interval: always")
	lazy := syncServer(t, "")

	for _, tt := range []struct {
		name     string
		ns       *server.Server
		wantSync bool
	}{{"sync always", always, true}, {"default interval", lazy, false}} {
		t.Run(tt.name, func(t *testing.T) {
			check := func(how string, d jetstream.Durability) {
				t.Helper()
				t.Logf("%s: %s", how, d)
				if !d.Known() {
					t.Fatalf("%s: not read: %s", how, d)
				}
				if d.SyncsEveryWrite() != tt.wantSync || len(d.Servers) != 1 || d.Servers[0].Server != tt.ns.Name() {
					t.Fatalf("%s: %+v; want one server %s, sync every write %v", how, d, tt.ns.Name(), tt.wantSync)
				}
				want := "syncs every write"
				if !tt.wantSync {
					want = tt.ns.Name() + " flushes every 2m0s: an OS crash or power loss loses what was acknowledged since"
				}
				if !strings.Contains(d.String(), want) {
					t.Fatalf("%s: %q; want it to say %q", how, d, want)
				}
			}
			check("system account", jetstream.ReadDurability(ctx, connectAs(t, tt.ns, "sys", "sys-pass"), nil))
			// The monitoring URL, whatever the connection's user.
			check("monitoring", jetstream.ReadDurability(ctx, connectAs(t, tt.ns, "app", "app-pass"), []string{monitorURL(tt.ns) + "/"}))

			d := jetstream.ReadDurability(ctx, connectAs(t, tt.ns, "app", "app-pass"), nil)
			t.Logf("ordinary user: %s", d)
			if d.Known() || d.SyncsEveryWrite() || !strings.HasPrefix(d.String(), "unknown: this user cannot read the server's settings") ||
				!strings.Contains(d.String(), "COMPACTOR_NATS_MONITOR_URL") {
				t.Fatalf("an ordinary account's user: %+v; want unknown, with what to set", d)
			}
		})
	}

	// A monitoring URL that answers nothing is unknown, with the URL and the cause.
	d := jetstream.ReadDurability(ctx, connectAs(t, lazy, "app", "app-pass"), []string{"http://127.0.0.1:1"})
	if d.Known() || !strings.Contains(d.Unknown, "127.0.0.1:1/varz") {
		t.Fatalf("an unreachable monitoring URL: %+v", d)
	}
	if err := jetstream.ValidateMonitorURL("htp:/nats-1:8222"); err == nil {
		t.Fatal("a malformed monitoring URL was accepted")
	}
	// One server of two that flushes lazily makes the whole lazy, and is named.
	both := jetstream.ReadDurability(ctx, connectAs(t, always, "app", "app-pass"), []string{monitorURL(always), monitorURL(lazy)})
	if both.SyncsEveryWrite() || !strings.Contains(both.String(), lazy.Name()+" flushes every") || strings.Contains(both.String(), always.Name()+" flushes") {
		t.Fatalf("one lazy server of two: %s", both)
	}
}

// On a server without users (every client in one account, as with the embedded
// server), the system account cannot be asked; a compactor serve running the server
// answers for it, and without one the setting is unknown.
func TestReadDurabilityAsksTheServeRunningTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := jstest.ServerWith(t, nil)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if d := jetstream.ReadDurability(ctx, nc, nil); d.Known() {
		t.Fatalf("nobody answers, yet: %s", d)
	}
	serving, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer serving.Close()
	if _, err := jetstream.AnswerDurability(serving, jetstream.EmbeddedDurability("compactor-embedded", false, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := serving.Flush(); err != nil {
		t.Fatal(err)
	}
	d := jetstream.ReadDurability(ctx, nc, nil)
	if !d.Known() || d.SyncsEveryWrite() || !strings.Contains(d.String(), "compactor-embedded flushes every 1m0s") ||
		!strings.Contains(d.String(), "as the compactor serve running it says") {
		t.Fatalf("with a serve answering: %s", d)
	}
}

// violations is a nats-server logger that keeps the permission violations it logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) Errorf(format string, a ...any) {
	if line := fmt.Sprintf(format, a...); strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}
func (v *violations) Noticef(string, ...any) {}
func (v *violations) Warnf(string, ...any)   {}
func (v *violations) Fatalf(string, ...any)  {}
func (v *violations) Debugf(string, ...any)  {}
func (v *violations) Tracef(string, ...any)  {}

func (v *violations) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.lines)
}

// Compactor's users need JetStream, which the system account never has: on a server
// that has users, such a user asking the system account is refused, and the server
// logs a violation at every process's start (soak tests and the tenants walk-through
// saw them). ReadDurabilityAsJetStreamUser does not ask there: unknown, saying to set
// the monitoring URL, with no violation in the server's log; the monitoring URL still
// answers.
func TestAJetStreamUserDoesNotAskTheSystemAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conf := `
system_account: SYS
accounts {
  SYS { users: [ { user: sys, password: sys-pass } ] }
  APP { jetstream: enabled, users: [ { user: role, password: role-pass, permissions: { publish: ["$JS.API.>", "chat.>"], subscribe: ["_INBOX.>"] } } ] }
}
jetstream { sync_interval: always }
`
	ns := jstest.ServerFromFile(t, jstest.WriteFile(t, "server.conf", []byte(conf)), func(o *server.Options) {
		o.HTTPHost, o.HTTPPort = "127.0.0.1", -1
	})
	logged := &violations{}
	ns.SetLogger(logged, false, false)
	nc := connectAs(t, ns, "role", "role-pass")

	// What the plain read does, as a check that the server logs such a refusal.
	if d := jetstream.ReadDurability(ctx, nc, nil); d.Known() {
		t.Fatalf("a role's user read the setting: %s", d)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if logged.count() == 0 {
		t.Fatal("the server logged no violation for a role's user asking the system account: this test would not see one")
	}
	before := logged.count()
	d := jetstream.ReadDurabilityAsJetStreamUser(ctx, nc, nil)
	if err := nc.Flush(); err != nil { // a refusal is logged before the server's PONG
		t.Fatal(err)
	}
	if n := logged.count() - before; n != 0 {
		t.Fatalf("asking as a JetStream user made %d violations: %v", n, logged.lines[before:])
	}
	if d.Known() || !strings.Contains(d.String(), "COMPACTOR_NATS_MONITOR_URL") || !strings.Contains(d.String(), "has users") {
		t.Fatalf("a JetStream user on a server with users: %s; want unknown, saying why and what to set", d)
	}
	if d := jetstream.ReadDurabilityAsJetStreamUser(ctx, nc, []string{monitorURL(ns)}); !d.SyncsEveryWrite() {
		t.Fatalf("with the monitoring URL: %s; want it read", d)
	}
}
