package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/jstest"
)

// durableServer starts a server whose clients are in the global account (as the
// embedded one's are), with its monitoring port on a free port, syncing every write or
// flushing every 2 minutes (nats-server's default).
func durableServer(t *testing.T, syncAlways bool) (*server.Server, string) {
	t.Helper()
	ns := jstest.ServerWith(t, func(o *server.Options) {
		o.HTTPHost, o.HTTPPort = "127.0.0.1", -1
		if syncAlways {
			o.SyncAlways, o.SyncInterval = true, 2*time.Minute
		}
	})
	return ns, "http://" + ns.MonitorAddr().String()
}

// serve, its roles and the proxy say at start whether the servers sync every write, and
// /readyz keeps saying it: a server flushing every 2 minutes is a warning naming what an
// OS crash or power loss costs; one syncing every write is said so.
func TestServeReportsWhetherTheServersSyncEveryWrite(t *testing.T) {
	for _, tt := range []struct {
		name       string
		syncAlways bool
		level      string
		want       string
	}{
		{"server flushing every 2 minutes", false, "warn", "flushes every 2m0s: an OS crash or power loss loses what was acknowledged since"},
		{"server syncing every write", true, "info", "syncs every write"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testEnv(t, 128000)
			ns, monitor := durableServer(t, tt.syncAlways)
			t.Setenv("COMPACTOR_NATS_URL", ns.ClientURL())
			t.Setenv("COMPACTOR_NATS_MONITOR_URL", monitor)
			addr, served, logs, stop := opsServe(t)
			waitForService(t, ns.ClientURL(), served, logs, "started")
			var line struct{ Level, Message, Durability string }
			eventually(t, 30*time.Second, "the start-up line on durability", func() bool {
				for _, l := range strings.Split(logs.String(), "\n") {
					if json.Unmarshal([]byte(l), &line) == nil && line.Durability != "" {
						return true
					}
				}
				return false
			})
			if line.Level != tt.level || !strings.Contains(line.Durability, tt.want) || !strings.Contains(line.Durability, ns.Name()) {
				t.Errorf("start-up: %s %q (%s); want %s saying %q of %s", line.Level, line.Message, line.Durability, tt.level, tt.want, ns.Name())
			}
			eventually(t, 30*time.Second, "/readyz to say it", func() bool {
				code, body := get(t, addr, "/readyz")
				return code == http.StatusOK && strings.Contains(body, "durability: ") && strings.Contains(body, tt.want)
			})
			want := 0.0
			if tt.syncAlways {
				want = 1
			}
			if v, ok := scrapeMetrics(t, addr).value("compactor_nats_syncs_every_write"); !ok || v != want {
				t.Errorf("compactor_nats_syncs_every_write = %v (%v); want %v", v, ok, want)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The embedded server syncs every write, and serve says so.
func TestServeSaysTheEmbeddedServerSyncsEveryWrite(t *testing.T) {
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_LISTEN", freeAddr(t))
	t.Setenv("COMPACTOR_DATA_DIR", t.TempDir())
	addr, _, logs, _ := opsServe(t)
	eventually(t, 60*time.Second, "/readyz to say the embedded server syncs every write", func() bool {
		code, body := get(t, addr, "/readyz")
		return code == http.StatusOK && strings.Contains(body, "durability: syncs every write (compactor-embedded; embedded server)")
	})
	if strings.Contains(logs.String(), "does not sync every write") || strings.Contains(logs.String(), "is unknown") {
		t.Errorf("a warning on the embedded server's durability:\n%s", logs)
	}
	// compactor status beside it: its user has no system account to ask; serve says.
	serveAnswers(t)
	out, stderr, err := cli(t, "", "status")
	if err != nil || !strings.Contains(out, "\ndurability: syncs every write (compactor-embedded; embedded server, as the compactor serve running it says)") {
		t.Fatalf("status beside serve: %v\n%s\n%s", err, out, stderr)
	}
}

// compactor status says whether the servers sync every write: read from the monitoring
// URL when given; without it an ordinary user cannot read it, and status says so and
// what to set, never guessing.
func TestStatusReportsWhetherTheServersSyncEveryWrite(t *testing.T) {
	testEnv(t, 128000)
	lazy, lazyMonitor := durableServer(t, false)
	always, alwaysMonitor := durableServer(t, true)
	for _, ns := range []*server.Server{lazy, always} {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		jstest.Provision(t, nc)
		nc.Close()
	}
	for _, tt := range []struct {
		name    string
		ns      *server.Server
		monitor string
		want    string
	}{
		{"flushing every 2 minutes", lazy, lazyMonitor, "durability: " + lazy.Name() + " flushes every 2m0s: an OS crash or power loss loses what was acknowledged since"},
		{"syncing every write", always, alwaysMonitor, "durability: syncs every write (" + always.Name()},
		{"not readable by this user", lazy, "", "durability: unknown: this user cannot read the server's settings (set COMPACTOR_NATS_MONITOR_URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("COMPACTOR_NATS_URL", tt.ns.ClientURL())
			t.Setenv("COMPACTOR_NATS_MONITOR_URL", tt.monitor)
			out, stderr, err := cli(t, "", "status")
			if err != nil || !strings.Contains(out, "\n"+tt.want) || !strings.HasPrefix(out, "STREAM") {
				t.Fatalf("status: %v\n%s\n%s; want the tables, then %q", err, out, stderr, tt.want)
			}
			out, _, err = cli(t, "", "status", "--json")
			var s struct {
				Durability struct {
					Servers []struct {
						SyncAlways bool `json:"sync_always"`
					} `json:"servers"`
					Unknown string `json:"unknown"`
				} `json:"durability"`
			}
			if err != nil || json.Unmarshal([]byte(out), &s) != nil {
				t.Fatalf("status --json: %v\n%s", err, out)
			}
			known := tt.monitor != ""
			if known != (s.Durability.Unknown == "") || known && (len(s.Durability.Servers) != 1 || s.Durability.Servers[0].SyncAlways != (tt.ns == always)) {
				t.Fatalf("status --json: %s", out)
			}
		})
	}
	t.Setenv("COMPACTOR_NATS_MONITOR_URL", "htp:/nats-1:8222")
	if _, _, err := cli(t, "", "status"); err == nil || !strings.Contains(err.Error(), "COMPACTOR_NATS_MONITOR_URL") {
		t.Fatalf("status with a malformed monitoring URL: %v; want a configuration error naming it", err)
	}
}
