package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// The tests of deploy/nats/tenants.conf: tenants as NATS accounts (docs/tenants.md).
// Each starts an in-process nats-server from the file as it ships (or from a copy a test
// changes, said so), provisions the tenants' layouts as Compactor's admin, and has
// acme's users try globex's data through every path; each refusal is waited for as the
// event it is (the permissions violation the server reports, or its no-responders
// answer), never taken from a deadline.

// tenantFixture is a server from tenants.conf with the tenants' layouts provisioned.
type tenantFixture struct {
	r     *rolestest.Running
	admin *rolestest.Conn
	cfgs  map[string]jetstream.Config
}

// startTenants starts tenants.conf as it ships and provisions acme's and globex's
// layouts, with one message of globex's conversation c1 stored through its import.
func startTenants(t *testing.T) *tenantFixture {
	t.Helper()
	return provisionTenants(t, rolestest.TenantsServer(t))
}

// provisionTenants provisions the example tenants' layouts on r as its admin and
// stores globex's message.
func provisionTenants(t *testing.T, r *rolestest.Running) *tenantFixture {
	t.Helper()
	f := &tenantFixture{r: r, admin: r.Connect("admin"), cfgs: map[string]jetstream.Config{}}
	ctx := ctxFor(t, time.Minute)
	for _, tn := range rolestest.Tenants {
		f.provision(t, ctx, tn)
	}
	if _, err := tenantPublish(ctx, r.Connect("globex-producer"), "c1", "globex secret", "g1"); err != nil {
		t.Fatalf("globex-producer publishes: %v", err)
	}
	return f
}

// provision provisions tenant's layout as the admin.
func (f *tenantFixture) provision(t *testing.T, ctx context.Context, tenant string) jetstream.Config {
	t.Helper()
	cfg, err := jetstream.DefaultConfig().ForTenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.Provision(ctx, f.admin.NC, cfg); err != nil {
		t.Fatalf("provision %s's layout as admin: %v", tenant, err)
	}
	f.cfgs[tenant] = cfg
	return cfg
}

// tenantPublish publishes a user message with text to conv as c, a tenant's user, as
// its services do: a JetStream publish on chat.<conv>.msg in its own account, which the
// import delivers to the tenant's CHAT stream; the PubAck is the service's reply.
func tenantPublish(ctx context.Context, c *rolestest.Conn, conv, text, msgID string) (*natsjs.PubAck, error) {
	js, err := natsjs.New(c.NC)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)})
	if err != nil {
		return nil, err
	}
	return js.Publish(ctx, "chat."+conv+".msg", data, natsjs.WithMsgID(msgID))
}

// jsErrStreamNotMatch is the JetStream error of a publish whose Nats-Expected-Stream is
// not the stream that stored it ("expected stream does not match").
const jsErrStreamNotMatch natsjs.ErrorCode = 10060

// refusalDeadline bounds the wait for a refusal, which comes at once: it only keeps a
// broken test from hanging, and reaching it fails the test.
const refusalDeadline = 30 * time.Second

// refusalPrompt is how soon a refusal comes, at the latest, on a busy machine (it
// takes milliseconds): one that comes later fails the test as not immediate.
const refusalPrompt = 5 * time.Second

// checkPrompt fails t when a refusal of what came later than refusalPrompt after start.
func checkPrompt(t *testing.T, start time.Time, what string) {
	t.Helper()
	if d := time.Since(start); d > refusalPrompt {
		t.Errorf("%s was refused after %s; want it at once", what, d.Round(time.Millisecond))
	}
}

// refusedRequest sends data as c on subject, as a request, and checks that NATS refused
// it: the server reported a permissions violation naming subject, or answered that
// nothing responds. An answer, or only the deadline, fails the test.
func refusedRequest(t *testing.T, c *rolestest.Conn, subject string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), refusalDeadline)
	defer cancel()
	since, start := c.Mark(), time.Now()
	defer checkPrompt(t, start, c.User+"'s request on "+subject)
	answered := make(chan error, 1)
	go func() {
		m, err := c.NC.RequestWithContext(ctx, subject, data)
		if err == nil {
			err = fmt.Errorf("answered %q", m.Data)
		}
		answered <- err
	}()
	violated := make(chan error, 1)
	go func() {
		violated <- c.WaitFor(ctx, since, fmt.Sprintf("Permissions Violation for Publish to %q", subject))
	}()
	select {
	case err := <-violated:
		if err != nil {
			t.Errorf("%s, request on %s: no refusal: %v", c.User, subject, err)
		}
	case err := <-answered:
		if !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("%s, request on %s: %v; want a permissions violation or no responders", c.User, subject, err)
		}
	}
}

// refusedSubscribe subscribes as c to subject and checks that the server refused the
// subscription.
func refusedSubscribe(t *testing.T, c *rolestest.Conn, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), refusalDeadline)
	defer cancel()
	since, start := c.Mark(), time.Now()
	defer checkPrompt(t, start, c.User+"'s subscription to "+subject)
	sub, err := c.NC.SubscribeSync(subject)
	if err != nil {
		t.Errorf("%s subscribing to %s: %v", c.User, subject, err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.WaitFor(ctx, since, fmt.Sprintf("Permissions Violation for Subscription to %q", subject)); err != nil {
		t.Errorf("%s subscribed to %s: %v", c.User, subject, err)
	}
}

// refusedToTenantUsers checks that every user of tenant is refused each request.
func refusedToTenantUsers(t *testing.T, f *tenantFixture, tenant string, requests map[string]string) {
	t.Helper()
	for _, u := range rolestest.TenantUsers(tenant) {
		c := f.r.Connect(u)
		for subject, body := range requests {
			refusedRequest(t, c, subject, []byte(body))
		}
	}
}

// acme's producer publishes through its import and gets the PubAck of CHAT_acme; the
// message is acme's conversation c1 on chat.acme.c1.msg. globex's producer publishing
// the same conversation id, with the same message id, stores globex's c1 in
// CHAT_globex: the same id is two conversations. A tenant cannot aim its publish at
// another's stream either.
func TestTenantPublishThroughImport(t *testing.T) {
	f := startTenants(t)
	ctx := ctxFor(t, time.Minute)
	acme := f.r.Connect("acme-producer")
	ack, err := tenantPublish(ctx, acme, "c1", "acme's words", "g1")
	if err != nil || ack.Stream != "CHAT_acme" || ack.Sequence != 1 || ack.Duplicate {
		t.Fatalf("acme-producer's publish: %+v, %v; want the PubAck of CHAT_acme, seq 1", ack, err)
	}
	if dup, err := tenantPublish(ctx, acme, "c1", "acme's words", "g1"); err != nil || !dup.Duplicate || dup.Sequence != 1 {
		t.Fatalf("acme-producer's publish again with its message id: %+v, %v; want a duplicate", dup, err)
	}
	m, err := lastOn(ctx, f.admin, "CHAT_acme", "chat.acme.c1.msg")
	if err != nil || !strings.Contains(string(m.Data), "acme's words") || m.Header.Get(natsjs.MsgIDHeader) != "g1" {
		t.Fatalf("CHAT_acme on chat.acme.c1.msg: %+v, %v", m, err)
	}
	for tenant, want := range map[string]string{"acme": "acme's words", "globex": "globex secret"} {
		st, err := jetstream.Open(ctx, f.admin.NC, f.cfgs[tenant])
		if err != nil {
			t.Fatal(err)
		}
		es, err := st.Chat().LoadEntries(ctx, "c1", 0, 0)
		if err != nil || len(es) != 1 || es[0].Message.Content.String() != want {
			t.Fatalf("%s's conversation c1: %+v, %v; want one message %q", tenant, es, err, want)
		}
	}
	js, err := natsjs.New(acme.NC)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.Publish(ctx, "chat.c2.msg", []byte(`{}`), natsjs.WithExpectStream("CHAT_globex"))
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrStreamNotMatch {
		t.Fatalf("acme's publish expecting CHAT_globex: %v; want the stream's refusal (10060)", err)
	}
	if v := acme.Violations(); v != "" {
		t.Fatalf("acme-producer was refused:\n%s", v)
	}
}

// acme's users are refused globex's streams through the JetStream API: reads, listings,
// consumers, purges, deletes.
func TestTenantRefusedJetStreamAPI(t *testing.T) {
	f := startTenants(t)
	refusedToTenantUsers(t, f, "acme", map[string]string{
		"$JS.API.INFO":                                                        ``,
		"$JS.API.STREAM.NAMES":                                                `{}`,
		"$JS.API.STREAM.LIST":                                                 `{}`,
		"$JS.API.STREAM.INFO.CHAT_globex":                                     ``,
		"$JS.API.DIRECT.GET.CHAT_globex":                                      `{"last_by_subj":"chat.globex.c1.msg"}`,
		"$JS.API.DIRECT.GET.CHAT_globex.chat.globex.c1.msg":                   ``,
		"$JS.API.STREAM.MSG.GET.CHAT_globex":                                  `{"last_by_subj":"chat.globex.c1.msg"}`,
		"$JS.API.CONSUMER.CREATE.CHAT_globex":                                 `{"stream_name":"CHAT_globex","config":{}}`,
		"$JS.API.CONSUMER.CREATE.CHAT_globex.spy.chat.globex.>":               `{"stream_name":"CHAT_globex","config":{"name":"spy"}}`,
		"$JS.API.CONSUMER.MSG.NEXT.CHAT_globex.compactor-trigger":             `{"batch":1}`,
		"$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS_globex.compactor-workers": `{"batch":1}`,
		"$JS.API.CONSUMER.NAMES.CHAT_globex":                                  `{}`,
		"$JS.API.STREAM.PURGE.CHAT_globex":                                    `{}`,
		"$JS.API.STREAM.MSG.DELETE.CHAT_globex":                               `{"seq":1}`,
		"$JS.API.STREAM.DELETE.CHAT_globex":                                   ``,
		"$JS.API.STREAM.UPDATE.CHAT_globex":                                   `{"name":"CHAT_globex"}`,
		"$JS.API.STREAM.PURGE.COMPACT_EVENTS_globex":                          `{}`,
		// acme's own streams are Compactor's too: no tenant reaches them directly.
		"$JS.API.STREAM.INFO.CHAT_acme":    ``,
		"$JS.API.STREAM.PURGE.CHAT_acme":   `{}`,
		"$JS.API.DIRECT.GET.CHAT_acme":     `{"last_by_subj":"chat.acme.c1.msg"}`,
		"$JS.API.STREAM.MSG.GET.CHAT_acme": `{"last_by_subj":"chat.acme.c1.msg"}`,
	})
}

// acme's users are refused globex's KV buckets: results, policies, tombstones, read and
// written.
func TestTenantRefusedKV(t *testing.T) {
	f := startTenants(t)
	refusedToTenantUsers(t, f, "acme", map[string]string{
		"$KV.compaction_globex.c1":                                         `{}`,
		"$KV.compaction-policy_globex.c1":                                  `{}`,
		"$KV.compaction-forgotten_globex.c1":                               `{}`,
		"$KV.compaction-deployment_globex.policy.api":                      `{}`,
		"$JS.API.DIRECT.GET.KV_compaction_globex.$KV.compaction_globex.c1": ``,
		"$JS.API.DIRECT.GET.KV_compaction_globex":                          `{"last_by_subj":"$KV.compaction_globex.c1"}`,
		"$JS.API.STREAM.MSG.GET.KV_compaction-policy_globex":               `{"last_by_subj":"$KV.compaction-policy_globex.c1"}`,
		"$JS.API.STREAM.INFO.KV_compaction_globex":                         ``,
		"$JS.API.STREAM.PURGE.KV_compaction_globex":                        `{}`,
	})
}

// acme's users are refused globex's object store: chunks and descriptions, read,
// written and purged.
func TestTenantRefusedObjectStore(t *testing.T) {
	f := startTenants(t)
	refusedToTenantUsers(t, f, "acme", map[string]string{
		"$O.compaction-objects_globex.C.x":                      `chunk`,
		"$O.compaction-objects_globex.M.x":                      `{}`,
		"$JS.API.DIRECT.GET.OBJ_compaction-objects_globex":      `{"last_by_subj":"$O.compaction-objects_globex.M.x"}`,
		"$JS.API.STREAM.MSG.GET.OBJ_compaction-objects_globex":  `{"seq":1}`,
		"$JS.API.STREAM.INFO.OBJ_compaction-objects_globex":     ``,
		"$JS.API.STREAM.PURGE.OBJ_compaction-objects_globex":    `{}`,
		"$JS.API.CONSUMER.CREATE.OBJ_compaction-objects_globex": `{}`,
	})
}

// acme's users cannot publish into globex's conversations: not on globex's subject, not
// on any four-token chat subject (only the import's chat.<conv>.msg), and acme's reader
// not even on its own.
func TestTenantRefusedChatPublish(t *testing.T) {
	f := startTenants(t)
	data, _ := json.Marshal(schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("forged")})
	refusedToTenantUsers(t, f, "acme", map[string]string{
		"chat.globex.c1.msg": string(data),
		"chat.acme.c1.msg":   string(data),
		"chat.globex.c1":     string(data),
	})
	reader := f.r.Connect("acme-reader")
	refusedRequest(t, reader, "chat.c1.msg", data)
	es, err := openTenant(t, f, "globex").Chat().LoadEntries(ctxFor(t, 10*time.Second), "c1", 0, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("globex's c1 after acme's attempts: %d entries, %v; want its one message", len(es), err)
	}
}

// openTenant opens tenant's store as the admin.
func openTenant(t *testing.T, f *tenantFixture, tenant string) *jetstream.Store {
	t.Helper()
	st, err := jetstream.Open(ctxFor(t, 10*time.Second), f.admin.NC, f.cfgs[tenant])
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// acme's users cannot call globex's service endpoints, the operators' policy endpoint,
// or the service subjects of the deployment itself.
func TestTenantRefusedServiceSubjects(t *testing.T) {
	f := startTenants(t)
	req := `{"conversation":"c1"}`
	requests := map[string]string{schemas.PolicySubject: req}
	for _, op := range []string{"context", "compact", "status", "recall", "forget", "policy"} {
		requests["compactor.globex."+op] = req
		requests["compactor.acme."+op] = req // its own name spelled out: only the import names it
	}
	refusedToTenantUsers(t, f, "acme", requests)
}

// acme's users cannot discover the micro services: $SRV is not exported.
func TestTenantRefusedDiscovery(t *testing.T) {
	f := startTenants(t)
	refusedToTenantUsers(t, f, "acme", map[string]string{
		"$SRV.PING": ``, "$SRV.INFO": ``, "$SRV.STATS": ``,
		"$SRV.PING.compactor": ``, "$SRV.INFO.compactor": ``,
	})
	for _, u := range rolestest.TenantUsers("acme") {
		refusedSubscribe(t, f.r.Connect(u), "$SRV.>")
	}
}

// acme's users can neither read nor forge globex's (or any) events and dead letters.
func TestTenantRefusedEventsAndDeadLetters(t *testing.T) {
	f := startTenants(t)
	refusedToTenantUsers(t, f, "acme", map[string]string{
		"compact.event.globex.c1":                      `{}`,
		"compact.dead.globex.c1":                       `{}`,
		"compact.request.globex.c1":                    `{}`,
		"activity.globex.c1":                           `{}`,
		"$JS.API.STREAM.MSG.GET.COMPACT_EVENTS_globex": `{"seq":1}`,
		"$JS.API.STREAM.MSG.GET.COMPACT_DEAD_globex":   `{"seq":1}`,
		"$JS.API.CONSUMER.CREATE.COMPACT_DEAD_globex":  `{}`,
	})
	for _, u := range rolestest.TenantUsers("acme") {
		c := f.r.Connect(u)
		for _, s := range []string{"compact.event.>", "compact.event.globex.*", "compact.dead.>", "compact.>"} {
			refusedSubscribe(t, c, s)
		}
	}
}

// acme's users may subscribe to their own inbox only: not to chat subjects, other
// users' inboxes, KV updates, or everything.
func TestTenantRefusedSubscriptions(t *testing.T) {
	f := startTenants(t)
	for _, u := range rolestest.TenantUsers("acme") {
		c := f.r.Connect(u)
		for _, s := range []string{"chat.>", "chat.*.msg", ">", "_INBOX.>", "_INBOX_globex-producer.>",
			"_INBOX_acme-reader.>", "$KV.>", "_R_.>", "$JS.>"} {
			if s == "_INBOX_"+u+".>" {
				continue
			}
			refusedSubscribe(t, c, s)
		}
	}
}

// acme's reader only reads: it cannot publish, ask for a compaction, or forget.
func TestTenantReaderCannotWrite(t *testing.T) {
	f := startTenants(t)
	reader := f.r.Connect("acme-reader")
	for subject, body := range map[string]string{
		"chat.c1.msg": `{"role":"user","content":"hi"}`, "compactor.forget": `{"conversation":"c1"}`,
		"compactor.compact": `{"conversation":"c1"}`, "compactor.policy": `{"conversation":"c1"}`,
	} {
		refusedRequest(t, reader, subject, []byte(body))
	}
}

// tenantsConfCopy writes tenants.conf with each of the edits (old, new) applied and
// returns its path; an edit that no longer applies fails the test.
func tenantsConfCopy(t *testing.T, edits ...string) string {
	t.Helper()
	conf, err := os.ReadFile(rolestest.TenantsConf())
	if err != nil {
		t.Fatal(err)
	}
	s := string(conf)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("tenants.conf no longer has %q: change this test", edits[i])
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	path := filepath.Join(t.TempDir(), "tenants.conf")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// An account that imports another's subjects of an export with an account token
// position is refused by the server when it loads the configuration: acme importing
// globex's chat subjects, or every tenant's with a wildcard, does not start.
func TestTenantImportOfAnotherRefused(t *testing.T) {
	for _, u := range rolestest.TenantsConfUsers() {
		t.Setenv(rolestest.PasswordVar(u), "x")
	}
	for what, edit := range map[string][2]string{
		"globex's chat": {`subject: "chat.acme.*.msg" },        to: "chat.*.msg"`,
			`subject: "chat.globex.*.msg" },      to: "chat.*.msg"`},
		"every tenant's chat": {`subject: "chat.acme.*.msg" },        to: "chat.*.msg"`,
			`subject: "chat.*.*.msg" },      to: "chat.*.*.msg"`},
		"globex's context": {`subject: "compactor.acme.context" }`, `subject: "compactor.globex.context" }`},
	} {
		_, err := server.ProcessConfigFile(tenantsConfCopy(t, edit[0], edit[1]))
		if err == nil || !strings.Contains(err.Error(), "service import not authorized") {
			t.Errorf("acme importing %s: %v; want the server's refusal (service import not authorized)", what, err)
		}
	}
}

// Compactor's roles in tenants.conf keep to their own: each is refused the durable
// consumers of the others in every tenant (denied by name, whatever the stream), and
// what accounts.conf already kept from it (a trigger or worker writing a tenant's chat,
// a worker answering a tenant's service, the proxy forgetting).
func TestTenantCompactorRolesKeepToTheirOwn(t *testing.T) {
	f := startTenants(t)
	for role, requests := range map[string]map[string]string{
		"trigger": {
			"$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS_acme.compactor-workers": `{"batch":1}`,
			"chat.acme.c1.msg":               `{}`,
			"compactor.acme.context":         `{}`,
			"$O.compaction-objects_acme.M.x": `{}`,
		},
		"worker": {
			"$JS.API.CONSUMER.MSG.NEXT.CHAT_acme.compactor-trigger": `{"batch":1}`,
			"$JS.API.CONSUMER.DELETE.CHAT_acme.compactor-trigger":   ``,
			"chat.acme.c1.msg":          `{}`,
			"$KV.compaction_acme.a.b.c": `{}`,
		},
		"api": {
			"$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS_globex.compactor-workers": `{"batch":1}`,
			"$JS.API.CONSUMER.DELETE.CHAT_globex.compactor-trigger":               ``,
			"$JS.API.CONSUMER.DELETE.ACTIVITY_acme.compactor-idle":                ``,
			"$JS.API.CONSUMER.CREATE.COMPACT_REQUESTS_acme.compactor-workers":     `{}`,
			"$JS.API.STREAM.DELETE.CHAT_acme":                                     ``,
			"chat.acme.c1.msg":                                                    `{}`,
		},
		"proxy": {
			"$JS.API.CONSUMER.DELETE.COMPACT_REQUESTS_acme.compactor-workers": ``,
			"$JS.API.CONSUMER.MSG.NEXT.CHAT_acme.compactor-trigger":           `{"batch":1}`,
			"$JS.API.STREAM.PURGE.CHAT_acme":                                  `{}`,
			"$KV.compaction-policy_acme.c1":                                   `{}`,
			"compactor.acme.forget":                                           `{}`,
		},
	} {
		c := f.r.Connect(role)
		for subject, body := range requests {
			refusedRequest(t, c, subject, []byte(body))
		}
	}
}
