package systemtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/pipeline"
)

// The soak with two tenants (issue 21: nothing lost, nothing crossing). A standalone
// nats-server process runs deploy/nats/tenants.conf as it ships; the admin provisions
// the tenants acme and globex with `compactor provision`; six `compactor serve`
// processes of the real binary serve both tenants of one tenants file, two each as
// tenants.conf's trigger, worker and api users, each with its inbox prefix. acme's and
// globex's producers publish conversations of real transcripts through their imports,
// in service mode (pipeline.ViaService), with the same conversation ids in both
// tenants and facts planted in each that name their tenant, while the test injects the
// soak's faults (soak_test.go): serve processes SIGKILLed and started again, the
// nats-server SIGKILLed and started again on the same port and data, a worker
// SIGTERMed with summaries in flight, an LLM outage.
//
// Each tenant's checker (checker_test.go, reading the tenant's streams as the admin,
// publishing and reading as the tenant's producer) then finds every message stored
// once, every value in order, every conversation inside its bound with its facts, the
// outage's fallbacks repaired. And nothing crossed: the admin reads every message of
// every stream of Compactor's account, and none of a tenant's streams holds a fact or
// a conversation's marker of the other tenant (a stream of no tenant holds none of
// either); every context each producer reads through its service holds only its own
// tenant's; and no summarizer request of one tenant's conversation held the other's.
// (The producers read through the service: for the checks, after every serve process
// exited on SIGTERM, the api processes run again.) No process, nats-server included,
// logged a permissions violation: tenants.conf refused its roles nothing.
//
// The short form runs with every go test (two tenants of 25 conversations each, as
// many as the single-server soak); COMPACTOR_SOAK=10m runs the long one.

// TestSoakTwoTenants is the soak of two tenants on one nats-server process.
func TestSoakTwoTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server and the binary for a minute or more")
	}
	s := newTenantSoak(t, soakFormFor(t, 25))
	figs := s.drive()
	for i, fig := range figs {
		s.report(fig, s.tenants[i])
	}
	s.nothingCrossing()
	s.noRefusals()
}

// noRefusals fails the test when a process reported a refusal (a serve process logs a
// permissions violation, nats-server logs it as a "Publish Violation" or a
// "Subscription Violation"): tenants.conf denied a role something it needs. One kind
// is expected, and only when the nats-server was restarted: an api process's answer
// to a tenant's request that arrived before the SIGKILL, sent from the client's
// reconnect buffer once it reconnected, is a publish to the import's reply subject
// (_R_.…) that the new server never delivered to it, so allow_responses does not
// cover it. The tenant's client retries; those are counted, not failed.
func (s *soak) noRefusals() {
	s.mu.Lock()
	defer s.mu.Unlock()
	orphaned := 0
	for _, p := range s.procs {
		for _, l := range strings.Split(p.Logs.String(), "\n") {
			low := strings.ToLower(l)
			if !strings.Contains(low, "permission") && !strings.Contains(low, "violation") {
				continue
			}
			if s.fig.ServerKills > 0 && orphanedReply.MatchString(l) {
				orphaned++
				continue
			}
			s.t.Errorf("%s reported a refusal: %s", p.Name, l)
		}
	}
	s.t.Logf("no refusal of any role's but %d answers to requests the nats-server restart orphaned (both ends log each)", orphaned)
}

// orphanedReply matches a refused publish to a service import's reply subject, as
// nats-server and a serve process log it.
var orphanedReply = regexp.MustCompile(`Publish (Violation - Subject "|to \\")_R_\.`)

// soakRoles are the serve processes of the tenant soak: two of each role, each as the
// user of tenants.conf named after its role.
var soakRoles = []string{"trigger", "worker", "api"}

// newTenantSoak builds the binaries and each tenant's conversations, starts a
// nats-server from tenants.conf, provisions the tenants as the admin and starts the
// serve processes, and a checker per tenant whose producer publishes and reads.
func newTenantSoak(t *testing.T, form soakForm) *soak {
	t.Helper()
	convs := map[string][]soakConv{}
	for _, tn := range rolestest.Tenants {
		convs[tn] = soakConversationsOf(t, tn, form.convs, form.minTokens, form.needles)
	}
	env := soakEnv(t, 1)
	auth := tenantsConfPasswords(t)
	s := startSoak(t, form, 1, auth("admin"), "-c", rolestest.TenantsConf())
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsFile(t, file, rolestest.Tenants...)
	s.env = append(s.env, "COMPACTOR_TENANTS_FILE="+file)
	s.provisionAsAdmin()
	for _, role := range soakRoles {
		for i := range 2 {
			s.addSlot(fmt.Sprintf("%s-%d", role, i+1), append(userEnv(auth(role)), "COMPACTOR_ROLES="+role)...)
		}
	}
	// The producers read their contexts through the service: once the soak stopped
	// every process, the api processes run again for the checks (nothing else does,
	// so nothing is written meanwhile).
	s.afterStop = func() {
		for _, sl := range s.slots {
			if strings.HasPrefix(sl.name, "api-") {
				s.run(sl)
			}
		}
	}
	admin := s.connect("soak-checker", s.admin)
	for _, tn := range rolestest.Tenants {
		cfg, err := env.jetstream().ForTenant(tn)
		if err != nil {
			t.Fatal(err)
		}
		client, err := pipeline.New(ctxFor(t, 10*time.Second), s.connect(tn+"-producer", auth(tn+"-producer")), pipeline.ViaService())
		if err != nil {
			t.Fatal(err)
		}
		chk := newCheckerOf(t, admin, env, cfg, client, s.llm, s.slotProcs()...)
		for _, cv := range convs[tn] {
			chk.add(t, cv.id, cv.msgs, cv.needles, cv.marker)
		}
		s.chks, s.tenants = append(s.chks, chk), append(s.tenants, tn)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range s.chks {
				s.logsOf(c.stuck)
			}
		}
	})
	return s
}

// tenantsConfPasswords sets a fresh password for every user of tenants.conf in the
// variable the file reads it from (the nats-server processes inherit them) and
// returns each user's credentials and inbox prefix.
func tenantsConfPasswords(t *testing.T) func(user string) natsconn.Auth {
	t.Helper()
	passwords := map[string]string{}
	for _, u := range rolestest.TenantsConfUsers() {
		passwords[u] = "pw-" + u + "-" + rand.Text()
		t.Setenv(rolestest.PasswordVar(u), passwords[u])
	}
	return func(user string) natsconn.Auth {
		if passwords[user] == "" {
			t.Fatalf("no user %s in tenants.conf", user)
		}
		return natsconn.Auth{User: user, Password: passwords[user], InboxPrefix: "_INBOX_" + user}
	}
}

// userEnv is the variables that make a compactor process connect with a.
func userEnv(a natsconn.Auth) []string {
	return []string{"COMPACTOR_NATS_USER=" + a.User, "COMPACTOR_NATS_PASSWORD=" + a.Password,
		"COMPACTOR_NATS_INBOX_PREFIX=" + a.InboxPrefix}
}

// provisionAsAdmin runs `compactor provision` with the soak's settings and tenants file
// as the admin, the only user of tenants.conf that may create streams: every tenant's
// streams, buckets and consumers, as the serve processes will look them up.
func (s *soak) provisionAsAdmin() {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "provision")
	cmd.Env = append(append(append(os.Environ(), s.env...), userEnv(s.admin)...), "COMPACTOR_NATS_URL="+s.urls())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compactor provision as admin: %v\n%s", err, out)
	}
}

var (
	// soakNeedleRE matches a planted fact: NEEDLE-<tenant>s<conv>k<n>.
	soakNeedleRE = regexp.MustCompile(`NEEDLE-[0-9a-z]+`)
	// soakMarkerRE matches a tenant conversation's marker, capturing the tenant.
	soakMarkerRE = regexp.MustCompile(`\[([a-z0-9-]+) conversation soak-[0-9]+\]`)
)

// foreign returns what of text is another tenant's than tenant ("": of no tenant, so
// that every tenant's is foreign): its facts and its conversations' markers.
func foreign(text, tenant string) []string {
	var out []string
	for _, n := range soakNeedleRE.FindAllString(text, -1) {
		for _, other := range rolestest.Tenants {
			if other != tenant && strings.HasPrefix(n, "NEEDLE-"+other+"s") {
				out = append(out, n)
			}
		}
	}
	for _, m := range soakMarkerRE.FindAllStringSubmatch(text, -1) {
		if m[1] != tenant && slices.Contains(rolestest.Tenants, m[1]) {
			out = append(out, m[0])
		}
	}
	return out
}

// ownFacts counts the facts of tenant in text.
func ownFacts(text, tenant string) int {
	n := 0
	for _, m := range soakNeedleRE.FindAllString(text, -1) {
		if strings.HasPrefix(m, "NEEDLE-"+tenant+"s") {
			n++
		}
	}
	return n
}

// nothingCrossing checks that nothing of one tenant's reached the other: in the
// streams of Compactor's account (read as the admin), in the contexts each producer
// reads through its service, and in the summarizer requests of each conversation.
func (s *soak) nothingCrossing() {
	t := s.t
	t.Helper()
	got := s.streamsHoldOnlyTheirTenants()
	contexts := 0
	for i, c := range s.chks {
		tn := s.tenants[i]
		for _, cv := range c.convs {
			var cx *pipeline.Context
			read(t, tn+"'s context of "+cv.id, func(ctx context.Context) (err error) {
				cx, err = c.client.Context(ctx, cv.id)
				return err
			})
			var text strings.Builder
			for _, m := range cx.Messages {
				text.WriteString(m.Content.String())
				text.WriteString("\n")
			}
			if f := foreign(text.String(), tn); len(f) > 0 {
				t.Fatalf("%s's context of %s, read by %s-producer through its service, holds another tenant's %v", tn, cv.id, tn, f)
			}
			if f := foreign(s.llm.InputsWith(cv.marker), tn); len(f) > 0 {
				t.Fatalf("a summarizer request of %s's %s held another tenant's %v", tn, cv.id, f)
			}
			contexts++
		}
	}
	t.Logf("nothing crossing: %d messages of %d streams read as the admin, %d contexts read by the producers and the summarizer requests of each: "+
		"no fact or marker of one tenant's in the other's", got.msgs, got.streams, contexts)
}

// streamsRead is what streamsHoldOnlyTheirTenants read.
type streamsRead struct{ streams, msgs int }

// streamsHoldOnlyTheirTenants reads every message of every stream of Compactor's
// account as the admin and fails the test when a tenant's stream (its name ends in
// _<tenant>) holds another tenant's fact or marker, or a stream of no tenant holds
// any; and when a tenant's chat stream or results bucket holds none of its own (the
// read read nothing).
func (s *soak) streamsHoldOnlyTheirTenants() streamsRead {
	t := s.t
	t.Helper()
	nc := s.chks[0].nc
	var names []string
	read(t, "the streams of Compactor's account", func(ctx context.Context) error {
		names = names[:0]
		l := jsFor(t, nc).StreamNames(ctx)
		for n := range l.Name() {
			names = append(names, n)
		}
		return l.Err()
	})
	sort.Strings(names)
	var got streamsRead
	own := map[string]int{}
	for _, name := range names {
		tn := ""
		if i := strings.LastIndex(name, "_"); i >= 0 && slices.Contains(rolestest.Tenants, name[i+1:]) {
			tn = name[i+1:]
		}
		for _, m := range storedMessages(t, nc, name) {
			text := m.Subject() + "\n" + string(m.Data())
			if f := foreign(text, tn); len(f) > 0 {
				t.Fatalf("stream %s (of tenant %q) holds on %s another tenant's %v", name, tn, m.Subject(), f)
			}
			own[name] += ownFacts(text, tn)
			got.msgs++
		}
		got.streams++
	}
	for i, c := range s.chks {
		for _, name := range []string{c.cfg.ChatStream, "KV_" + c.cfg.ResultsBucket} {
			if own[name] == 0 {
				t.Fatalf("stream %s holds none of %s's facts: the check read nothing", name, s.tenants[i])
			}
		}
	}
	return got
}

// storedMessages is every message of the stream name, none for an empty one (the
// drained work queue, which takes no second consumer).
func storedMessages(t *testing.T, nc *nats.Conn, name string) []natsjs.Msg {
	t.Helper()
	var n uint64
	read(t, "the stream "+name, func(ctx context.Context) error {
		st, err := jsFor(t, nc).Stream(ctx, name)
		if err == nil {
			n = st.CachedInfo().State.Msgs
		}
		return err
	})
	if n == 0 {
		return nil
	}
	return streamMessages(t, nc, name)
}
