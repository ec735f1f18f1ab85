package pipeline_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// tenantPermissions are exactly a tenant producer's: publish its chat subjects and the
// service's tenant endpoints, subscribe its own inbox prefix; nothing of $JS.API.
func tenantPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"chat.*.msg", "compactor.context", "compactor.compact",
			"compactor.status", "compactor.recall", "compactor.forget"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_tenant.>"}},
	}
}

// tenantServer starts a server with an admin user and a tenant user (tenantPermissions)
// and returns the admin's connection and the tenant's.
func tenantServer(t *testing.T, configure ...func(o *server.Options)) (admin, tenant *nats.Conn) {
	t.Helper()
	srv := jstest.ServerWith(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "tenant", Password: "tenant", Permissions: tenantPermissions()},
		}
		for _, c := range configure {
			c(o)
		}
	})
	url := "nats://" + jstest.HostPort(srv)
	connect := func(user string, opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(url, append(opts, nats.UserInfo(user, user))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	return connect("admin"), connect("tenant", nats.CustomInboxPrefix("_INBOX_tenant"))
}

// tenantStack is tenantServer with the pipeline provisioned and the compactor service
// running as admin: direct reads the streams, tenant goes through the service.
func tenantStack(t *testing.T, configure ...func(o *server.Options)) (st *jetstream.Store, direct, tenant *pipeline.Client) {
	t.Helper()
	admin, tnc := tenantServer(t, configure...)
	st = jstest.Provision(t, admin)
	startService(t, admin, st)
	tenant, err := pipeline.New(ctxT(t), tnc, pipeline.ViaService())
	if err != nil {
		t.Fatal(err)
	}
	return st, pipeline.NewWithStore(admin, st), tenant
}

// sameContext reads conv both ways and fails unless the contexts are equal.
func sameContext(t *testing.T, direct, tenant *pipeline.Client, conv string, opts ...pipeline.ContextOption) *pipeline.Context {
	t.Helper()
	ctx := ctxT(t)
	want, err := direct.Context(ctx, conv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tenant.Context(ctx, conv, opts...)
	if err != nil {
		t.Fatalf("context through the service: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("contexts differ:\nthrough the service %+v\nfrom the streams    %+v", got, want)
	}
	return got
}

// A conversation read through the service is the context read from the streams: before
// a compaction, after one (a summary, pinned messages, a pinned tool round, an
// override), with a budget, and after a forget (also one a late value outlived).
func TestViaServiceContextIsTheSame(t *testing.T) {
	st, direct, tenant := tenantStack(t)
	ctx := ctxT(t)
	const conv = "same-1"
	publish := func(ms ...schemas.Message) uint64 {
		t.Helper()
		var seq uint64
		for _, m := range ms {
			var err error
			if seq, err = tenant.Publish(ctx, conv, m); err != nil {
				t.Fatal(err)
			}
		}
		return seq
	}
	publish(say(schemas.RoleSystem, "You are a coding agent."), say(schemas.RoleUser, "fix the tests"),
		call("c1"), say(schemas.RoleUser, "meanwhile: hurry"), result("c1"), say(schemas.RoleAssistant, "pkg/a is fixed"))
	sameContext(t, direct, tenant, conv)

	tail := publish(say(schemas.RoleUser, strings.Repeat("now pkg/b ", 40)))
	publish(call("c2"), result("c2"), say(schemas.RoleAssistant, "done"))
	v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, TailStartSeq: tail, CoveredThroughSeq: tail - 1,
		PinnedSeqs: []uint64{1, 3, 5}, Summary: "The user asked to fix the tests.", FirstSeq: 1, CreatedAt: time.Now(),
		Overrides: []schemas.Override{{Seq: tail, KeepHead: 10, KeepTail: 10, Note: "cut"}}}
	rev, err := st.Results().Put(ctx, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	cx := sameContext(t, direct, tenant, conv)
	if !cx.HasSummary || cx.Seqs[0] != 1 || cx.Seqs[1] != 3 || cx.Seqs[2] != 5 {
		t.Fatalf("pinned messages and summary not read: seqs %v", cx.Seqs)
	}
	// An earlier value kept for the provider's cache is used while it is safe.
	next := *v
	next.Generation, next.Summary, next.PinnedSeqs = 2, "A newer summary.", []uint64{1}
	if _, err := st.Results().Put(ctx, &next, rev); err != nil {
		t.Fatal(err)
	}
	if cx := sameContext(t, direct, tenant, conv, pipeline.Value(v)); cx.Generation != 1 {
		t.Fatalf("read with the earlier value: generation %d", cx.Generation)
	}
	sameContext(t, direct, tenant, conv)
	sameContext(t, direct, tenant, conv, pipeline.MaxTokens(30))
	last := publish(say(schemas.RoleUser, "one more"))
	sameContext(t, direct, tenant, conv, pipeline.AtLeastSeq(last))

	if _, err := tenant.Forget(ctx, conv); err != nil {
		t.Fatal(err)
	}
	if cx := sameContext(t, direct, tenant, conv, pipeline.Value(v)); len(cx.Messages) != 0 {
		t.Fatalf("forgotten conversation still read: %+v", cx.Messages)
	}
	lateValue(ctx, t, st, conv, last)
	after := publish(say(schemas.RoleUser, "a new start"))
	cx = sameContext(t, direct, tenant, conv)
	if cx.HasSummary || len(cx.Seqs) != 1 || cx.Seqs[0] != after {
		t.Fatalf("after the forget: %+v", cx)
	}
}

// A tail longer than one answer of compactor.recall (its max payload) is read in
// pages, and is the same context.
func TestViaServiceReadsALongTailInPages(t *testing.T) {
	_, direct, tenant := tenantStack(t, jstest.MaxPayload(8<<10))
	ctx := ctxT(t)
	const conv = "long-1"
	msgs := make([]pipeline.BatchMsg, 60)
	for i := range msgs {
		msgs[i] = pipeline.BatchMsg{Conv: conv, Message: say(schemas.RoleUser, strings.Repeat("x", 1000))}
	}
	if _, err := tenant.PublishBatch(ctx, msgs, pipeline.BatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if cx := sameContext(t, direct, tenant, conv); len(cx.Messages) != len(msgs) {
		t.Fatalf("read %d messages, want %d", len(cx.Messages), len(msgs))
	}
}

// The documented difference: a tool round still waiting for its results is left out
// both ways, but only a read of the streams names it in Skipped.
func TestViaServiceLeavesAnOpenRoundOutUnnamed(t *testing.T) {
	_, direct, tenant := tenantStack(t)
	ctx := ctxT(t)
	for _, m := range []schemas.Message{say(schemas.RoleUser, "hi"), call("open")} {
		if _, err := tenant.Publish(ctx, "open-1", m); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := direct.Context(ctx, "open-1")
	got, err := tenant.Context(ctx, "open-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Messages, want.Messages) || len(want.Skipped) != 1 || len(got.Skipped) != 0 {
		t.Fatalf("through the service %+v; from the streams %+v", got, want)
	}
	// Another client of the tenant answers the call it did not see.
	other, err := pipeline.New(ctx, tenantConn(t, tenant), pipeline.ViaService())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Publish(ctx, "open-1", result("open")); err != nil {
		t.Fatalf("result of a call another client published: %v", err)
	}
	sameContext(t, direct, tenant, "open-1")
}

// tenantConn is the connection of a client in service mode.
func tenantConn(t *testing.T, c *pipeline.Client) *nats.Conn {
	t.Helper()
	return pipeline.ConnOf(c)
}

// Publishing through the service: one at a time, asynchronously and in batches, a
// retry with the same MsgID stored once; a message over the max payload or invalid is
// refused before anything is sent.
func TestViaServicePublishes(t *testing.T) {
	st, direct, tenant := tenantStack(t, jstest.MaxPayload(4<<10))
	ctx := ctxT(t)
	const conv = "pub-1"
	first, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "hello"), pipeline.MsgID("m-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "hello"), pipeline.MsgID("m-1"))
	if err != nil || again != first {
		t.Fatalf("retry: seq %d, %v; want %d", again, err, first)
	}
	// The service's answers escape <, > and & (\u003c...): a retry of a message holding
	// them is still the same message (the soak with two tenants found every such retry
	// refused as another message, for ever).
	html, err := schemas.DecodeMessage([]byte(`{"role":"user","content":"run chat_npc \"<npc_name>\" && echo 'a > b'"}`))
	if err != nil {
		t.Fatal(err)
	}
	hfirst, err := tenant.Publish(ctx, conv, html, pipeline.MsgID("m-html"))
	if err != nil {
		t.Fatal(err)
	}
	if hagain, err := tenant.Publish(ctx, conv, html, pipeline.MsgID("m-html")); err != nil || hagain != hfirst {
		t.Fatalf("retry of a message holding <, > and &: seq %d, %v; want %d", hagain, err, hfirst)
	}
	// A MsgID reused for another message, or for a message of another conversation,
	// is told from a retry by recalling the message the PubAck names.
	if _, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "other"), pipeline.MsgID("m-1")); !errors.Is(err, pipeline.ErrDuplicate) {
		t.Fatalf("reused id: %v; want ErrDuplicate", err)
	}
	if _, err := tenant.Publish(ctx, "pub-2", say(schemas.RoleUser, "hello"), pipeline.MsgID("m-1")); !errors.Is(err, pipeline.ErrDuplicate) {
		t.Fatalf("id of another conversation's message: %v; want ErrDuplicate", err)
	}
	ch, err := tenant.PublishAsync(ctx, conv, say(schemas.RoleUser, "other"), pipeline.MsgID("m-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ack := <-ch; !errors.Is(ack.Err, pipeline.ErrDuplicate) {
		t.Fatalf("reused id, async: %+v; want ErrDuplicate", ack)
	}
	// What the service cannot tell: a message of a tool round is recalled only with its
	// whole round, so a reuse of its id is taken as a retry.
	callSeq, err := tenant.Publish(ctx, conv, call("t"), pipeline.MsgID("m-call"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "not the call"), pipeline.MsgID("m-call")); err != nil || got != callSeq {
		t.Fatalf("reused id of a tool call: seq %d, %v; want %d, taken as a retry", got, err, callSeq)
	}
	if _, err := tenant.Publish(ctx, conv, result("t")); err != nil {
		t.Fatal(err)
	}
	ch, err = tenant.PublishAsync(ctx, conv, say(schemas.RoleAssistant, "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if ack := <-ch; ack.Err != nil || ack.Seq <= first {
		t.Fatalf("async: %+v", ack)
	}
	seqs, err := tenant.PublishBatch(ctx, []pipeline.BatchMsg{{Conv: conv, Message: call("b")}, {Conv: conv, Message: result("b")}}, pipeline.BatchOptions{})
	if err != nil || seqs[1] != seqs[0]+1 {
		t.Fatalf("batch: %v, %v", seqs, err)
	}
	_, err = tenant.Publish(ctx, conv, say(schemas.RoleUser, strings.Repeat("y", 5000)))
	if !errors.Is(err, pipeline.ErrTooLarge) || !errors.Is(err, pipeline.ErrServiceMode) || !strings.Contains(err.Error(), "object") {
		t.Fatalf("large message: %v; want ErrTooLarge and ErrServiceMode saying why", err)
	}
	if _, err := tenant.Publish(ctx, conv, schemas.Message{Role: "robot"}); !errors.Is(err, schemas.ErrInvalid) {
		t.Fatalf("invalid message: %v", err)
	}
	last, err := st.Chat().LastSeq(ctx, conv)
	if err != nil || last != seqs[1] {
		t.Fatalf("last seq %d, %v; want %d: something refused was stored", last, err, seqs[1])
	}
	if cx := sameContext(t, direct, tenant, conv); len(cx.Messages) != 7 {
		t.Fatalf("context: %+v", cx.Messages)
	}
}

// Status, Exists, Pending, Result, Recall, Compact and Forget go through the service;
// what needs the streams fails at once with ErrServiceMode.
func TestViaServiceOperations(t *testing.T) {
	_, direct, tenant := tenantStack(t)
	ctx := ctxT(t)
	const conv = "ops-1"
	if ok, err := tenant.Exists(ctx, conv); err != nil || ok {
		t.Fatalf("exists before: %v, %v", ok, err)
	}
	seq, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "find the needle"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tenant.Exists(ctx, conv); err != nil || !ok {
		t.Fatalf("exists after: %v, %v", ok, err)
	}
	r, err := tenant.Recall(ctx, conv, pipeline.Query("NEEDLE"))
	want, _ := direct.Recall(ctx, conv, pipeline.Query("NEEDLE"))
	if err != nil || !reflect.DeepEqual(r.Messages, want.Messages) || len(r.Messages) != 1 || r.Messages[0].Seq != seq {
		t.Fatalf("recall: %+v, %v; want %+v", r, err, want)
	}
	cr, err := tenant.Compact(ctx, conv, pipeline.RequestID("req-1"))
	if err != nil || cr.Status != pipeline.StatusQueued {
		t.Fatalf("compact: %+v, %v", cr, err)
	}
	if p, err := tenant.Pending(ctx, conv); err != nil || p == nil || p.RequestID != "req-1" {
		t.Fatalf("pending: %+v, %v", p, err)
	}
	if v, err := tenant.Result(ctx, conv); err != nil || v != nil {
		t.Fatalf("result: %+v, %v", v, err)
	}
	for name, err := range map[string]error{
		"WaitForOutcome": second(tenant.WaitForOutcome(ctx, conv, "req-1")),
		"Raw":            second(tenant.Context(ctx, conv, pipeline.Raw())),
		"WaitPending":    second(tenant.Context(ctx, conv, pipeline.WaitPending(time.Second))),
		"ScanLimit":      second(tenant.Recall(ctx, conv, pipeline.ScanLimit(5))),
		"WithProvision":  second(pipeline.New(ctx, tenantConn(t, tenant), pipeline.ViaService(), pipeline.WithProvision())),
	} {
		if !errors.Is(err, pipeline.ErrServiceMode) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v; want ErrServiceMode naming it", name, err)
		}
	}
	f, err := tenant.Forget(ctx, conv)
	if err != nil || f.ThroughSeq != seq {
		t.Fatalf("forget: %+v, %v", f, err)
	}
	if ok, err := tenant.Exists(ctx, conv); err != nil || ok {
		t.Fatalf("exists after the forget: %v, %v", ok, err)
	}
}

func second[T any](_ T, err error) error { return err }

// hostile answers every request on subject with body, on nc, until the test ends.
func hostile(t *testing.T, nc *nats.Conn, subject, body string) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(body)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A client in service mode refuses what breaks the contract instead of acting on it:
// a PubAck of another stream, an answer about another conversation, a value of
// another conversation, messages out of the range asked for or twice, a cut page that
// names nothing.
func TestViaServiceRefusesHostileAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers map[string]string
		do      func(ctx context.Context, c *pipeline.Client) error
	}{
		{"pub ack of another stream", map[string]string{"chat.*.msg": `{"stream":"EVIL","seq":4}`},
			func(ctx context.Context, c *pipeline.Client) error {
				return second(c.Publish(ctx, "h", say(schemas.RoleUser, "x")))
			}},
		{"pub ack without a sequence", map[string]string{"chat.*.msg": `{"stream":"CHAT_acme","seq":0}`},
			func(ctx context.Context, c *pipeline.Client) error {
				return second(c.Publish(ctx, "h", say(schemas.RoleUser, "x")))
			}},
		{"context of another conversation", map[string]string{"compactor.context": `{"conversation":"other","value":null,"tail_start_seq":1,"last_seq":0}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Context(ctx, "h")) }},
		{"value of another conversation", map[string]string{"compactor.context": `{"conversation":"h","value":{"schema_version":1,"conversation":"other","generation":1,"summary":"s","tail_start_seq":3,"covered_through_seq":2},"tail_start_seq":3,"last_seq":0}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Result(ctx, "h")) }},
		{"tail start below the value's", map[string]string{"compactor.context": `{"conversation":"h","value":{"schema_version":1,"conversation":"h","generation":1,"summary":"s","tail_start_seq":3,"covered_through_seq":2},"tail_start_seq":1,"last_seq":0}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Context(ctx, "h")) }},
		{"recalled message out of range", map[string]string{
			"compactor.context": `{"conversation":"h","value":null,"tail_start_seq":5,"last_seq":9}`,
			"compactor.recall":  `{"conversation":"h","messages":[{"seq":2,"role":"user","content":"forgotten"}],"scan_complete":true}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Context(ctx, "h")) }},
		{"recall of another conversation", map[string]string{
			"compactor.context": `{"conversation":"h","value":null,"tail_start_seq":1,"last_seq":9}`,
			"compactor.recall":  `{"conversation":"other","messages":[{"seq":2,"role":"user","content":"theirs"}],"scan_complete":true}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Context(ctx, "h")) }},
		{"recalled message twice", map[string]string{
			"compactor.recall": `{"conversation":"h","messages":[{"seq":2,"role":"user","content":"a"},{"seq":2,"role":"user","content":"b"}],"scan_complete":true}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Recall(ctx, "h")) }},
		{"cut page naming nothing", map[string]string{
			"compactor.context": `{"conversation":"h","value":null,"tail_start_seq":1,"last_seq":9}`,
			"compactor.recall":  `{"conversation":"h","messages":[],"cut_by_budget":true,"scan_complete":true}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Context(ctx, "h")) }},
		{"status of another conversation", map[string]string{"compactor.status": `{"conversation":"other","value":null,"last_seq":3,"pending":false}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Exists(ctx, "h")) }},
		{"forget of another conversation", map[string]string{"compactor.forget": `{"conversation":"other","through_seq":3,"forgotten_at":"2026-12-01T00:00:00Z","deleted":{}}`},
			func(ctx context.Context, c *pipeline.Client) error { return second(c.Forget(ctx, "h")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin, tnc := tenantServer(t)
			for subject, body := range tc.answers {
				hostile(t, admin, subject, body)
			}
			c, err := pipeline.New(ctxT(t), tnc, pipeline.ViaService())
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.do(ctxT(t), c); !errors.Is(err, pipeline.ErrBadAnswer) {
				t.Fatalf("got %v; want ErrBadAnswer", err)
			}
		})
	}
}

// twoAccounts is a server configuration of a compactor account, which has JetStream
// and exports the chat subjects and the tenant endpoints as services, and a tenant
// account without JetStream that imports them under the same names.
const twoAccounts = `
jetstream: enabled
accounts: {
  COMPACTOR: {
    jetstream: enabled
    users: [{user: admin, password: admin}]
    exports: [
      {service: "chat.*.msg"}, {service: "compactor.context"}, {service: "compactor.compact"},
      {service: "compactor.status"}, {service: "compactor.recall"}, {service: "compactor.forget"}
    ]
  }
  ACME: {
    users: [{user: tenant, password: tenant, permissions: {
      publish: ["chat.*.msg", "compactor.context", "compactor.compact", "compactor.status", "compactor.recall", "compactor.forget"],
      subscribe: ["_INBOX_tenant.>"]}}]
    imports: [
      {service: {account: COMPACTOR, subject: "chat.*.msg"}}, {service: {account: COMPACTOR, subject: "compactor.context"}},
      {service: {account: COMPACTOR, subject: "compactor.compact"}}, {service: {account: COMPACTOR, subject: "compactor.status"}},
      {service: {account: COMPACTOR, subject: "compactor.recall"}}, {service: {account: COMPACTOR, subject: "compactor.forget"}}
    ]
  }
}
`

// In an account of its own without JetStream, reaching the compactor's account only
// through service imports, a client in service mode publishes (the PubAck comes back
// through the import) and reads the same context as the compactor's own reads; the
// normal mode cannot open the streams there.
func TestViaServiceAcrossAccounts(t *testing.T) {
	srv := jstest.ServerFromFile(t, jstest.WriteFile(t, "accounts.conf", []byte(twoAccounts)))
	connect := func(user string, opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.UserInfo(user, user))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin, tnc := connect("admin"), connect("tenant", nats.CustomInboxPrefix("_INBOX_tenant"))
	st := jstest.Provision(t, admin)
	startService(t, admin, st)
	ctx := ctxT(t)
	octx, cancel := jetstream.RefusedContext(ctx, tnc, nil)
	_, err := pipeline.New(octx, tnc)
	err = jetstream.PermissionCause(octx, err)
	cancel()
	if !errors.Is(err, jetstream.ErrPermission) {
		t.Fatalf("the normal mode as the tenant: %v; want the lookup of the streams refused", err)
	}
	tenant, err := pipeline.New(ctx, tnc, pipeline.ViaService())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []schemas.Message{say(schemas.RoleUser, "hi"), call("x"), result("x"), say(schemas.RoleAssistant, "done")} {
		if _, err := tenant.Publish(ctx, "acme-1", m); err != nil {
			t.Fatal(err)
		}
	}
	if cx := sameContext(t, pipeline.NewWithStore(admin, st), tenant, "acme-1"); len(cx.Messages) != 4 {
		t.Fatalf("context: %+v", cx)
	}
}

// Many pinned messages (as the user-messages strategy keeps) are read with one range
// read, and give the same context as the normal mode's reads of each.
func TestViaServiceReadsManyPinnedMessages(t *testing.T) {
	st, direct, tenant := tenantStack(t)
	ctx := ctxT(t)
	const conv = "pinned-1"
	var pinned []uint64
	for i := range 20 {
		seq, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "ask "+strings.Repeat("a", i)))
		if err != nil {
			t.Fatal(err)
		}
		pinned = append(pinned, seq)
		if _, err := tenant.Publish(ctx, conv, say(schemas.RoleAssistant, "answer")); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []schemas.Message{call("p"), result("p")} {
		seq, err := tenant.Publish(ctx, conv, m)
		if err != nil {
			t.Fatal(err)
		}
		pinned = append(pinned, seq)
	}
	tail, err := tenant.Publish(ctx, conv, say(schemas.RoleUser, "now"))
	if err != nil {
		t.Fatal(err)
	}
	v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, TailStartSeq: tail, CoveredThroughSeq: tail - 1,
		PinnedSeqs: pinned, Summary: "Twenty questions.", FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	if cx := sameContext(t, direct, tenant, conv); len(cx.Messages) != len(pinned)+2 {
		t.Fatalf("read %d messages, want %d pinned, the summary and the tail", len(cx.Messages), len(pinned))
	}
}

// tenantImport is the tenants' layout of the chat subjects: the compactor's account
// exports chat.<account>.<conv>.msg with the importing account's name at token 2, a
// tenant account imports its own as chat.<conv>.msg, and the tenant's stream
// CHAT_<tenant> stores them.
const tenantImport = `
jetstream: enabled
accounts: {
  COMPACTOR: {
    jetstream: enabled
    users: [{user: admin, password: admin}]
    exports: [{service: "chat.*.*.msg", account_token_position: 2}]
  }
  acme: {
    users: [{user: tenant, password: tenant, permissions: {publish: ["chat.*.msg"], subscribe: ["_INBOX_tenant.>"]}}]
    imports: [{service: {account: COMPACTOR, subject: "chat.acme.*.msg"}, to: "chat.*.msg"}]
  }
}
`

// A publish through the tenants' import is stored in the tenant's stream, and its
// PubAck, naming CHAT_acme, comes back through the import and is taken.
func TestViaServicePublishesToATenantsStream(t *testing.T) {
	srv := jstest.ServerFromFile(t, jstest.WriteFile(t, "accounts.conf", []byte(tenantImport)))
	connect := func(user string, opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.UserInfo(user, user))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin, tnc := connect("admin"), connect("tenant", nats.CustomInboxPrefix("_INBOX_tenant"))
	ctx := ctxT(t)
	js, err := natsjs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "CHAT_acme", Subjects: []string{"chat.acme.*.msg"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pipeline.New(ctx, tnc, pipeline.ViaService())
	if err != nil {
		t.Fatal(err)
	}
	seq, err := c.Publish(ctx, "c1", say(schemas.RoleUser, "hello"))
	if err != nil || seq != 1 {
		t.Fatalf("publish: seq %d, %v", seq, err)
	}
	m, err := stream.GetMsg(ctx, seq)
	if err != nil || m.Subject != "chat.acme.c1.msg" {
		t.Fatalf("stored: %+v, %v; want it on chat.acme.c1.msg", m, err)
	}
}
