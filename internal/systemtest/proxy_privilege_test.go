package systemtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// otherAccountConf writes a copy of accounts.conf with a second tenant's account, OTHER
// (user other, password pw), and returns its path.
func otherAccountConf(t *testing.T, pw string) string {
	t.Helper()
	conf, err := os.ReadFile(rolestest.AccountsConf())
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "accounts {\n"
	if !strings.Contains(string(conf), anchor) {
		t.Fatalf("accounts.conf has no %q: change this test", anchor)
	}
	other := anchor + "  OTHER {\n    jetstream: enabled\n    users: [{ user: other, password: \"" + pw + "\" }]\n  }\n"
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, []byte(strings.Replace(string(conf), anchor, other, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The proxy user of accounts.conf does what the proxy role does with the Go client,
// without one permissions violation: it starts (provision, which only reads what the
// admin made), records its policy defaults, publishes a conversation (a message over
// the max payload too, through the objects bucket), reads its context back (tail,
// pinned message, result, objects), reads and watches its policy, finds its pending
// compaction and waits for the outcome, and asks the service for one. What belongs to
// the others is refused: writing results or policies (in the bucket or through the
// service), forgetting, taking or queueing compaction requests, forging events,
// purging, another user's replies; and another account's conversations are out of its
// reach.
func TestPrivilegeProxy(t *testing.T) {
	otherPW := "pw-other-" + t.Name()
	url, connect := rolestest.ServerFrom(t, otherAccountConf(t, otherPW))
	cfg := jetstream.DefaultConfig()
	ctx := ctxFor(t, 2*time.Minute)
	admin := connect("admin")
	if _, err := jetstream.Provision(ctx, admin.NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	env := testEnv(t, 8000)
	for _, role := range []string{"api", "trigger", "worker"} {
		c := connect(role)
		st, err := jetstream.Provision(ctx, c.NC, cfg)
		if err != nil {
			t.Fatalf("provision as %s: %v", role, err)
		}
		renv := env
		renv.Roles = role
		runStack(t, c.NC, st, renv, nil)
	}

	proxy := connect("proxy")
	st, err := jetstream.Provision(ctx, proxy.NC, cfg)
	if err != nil {
		t.Fatalf("provision as proxy after the admin: %v", err)
	}
	if _, err := st.RecordPolicy(ctx, []string{"proxy"}, map[string]string{"context_window": "8000"}); err != nil {
		t.Fatalf("record the proxy's policy defaults: %v", err)
	}
	r, err := env.resolver()
	if err != nil {
		t.Fatal(err)
	}
	policies := node.NewPolicySource(st, r)
	pctx, stopPolicies := context.WithCancel(ctx)
	policiesDone := make(chan error, 1)
	go func() { policiesDone <- policies.Run(pctx) }()
	t.Cleanup(func() { stopPolicies(); <-policiesDone })
	pc := pipeline.NewWithStore(proxy.NC, st)

	const conv = "proxy-perm"
	proxyDoes(t, ctx, admin, proxy, pc, policies, st, conv)
	proxyMayNot(t, ctx, proxy, pc, st, conv)
	otherAccountOutOfReach(t, ctx, url, otherPW, pc, cfg)
}

// proxyDoes runs what the proxy needs as the proxy user, and checks that the server
// refused none of it.
func proxyDoes(t *testing.T, ctx context.Context, admin, proxy *rolestest.Conn, pc *pipeline.Client, policies node.PolicySource, st *jetstream.Store, conv string) {
	t.Helper()
	sub, err := st.Events().Subscribe(conv, func(schemas.Event) {}, nil)
	if err != nil {
		t.Fatalf("subscribe to the events as proxy: %v", err)
	}
	defer sub.Stop()

	msgs, _ := fakellm.NeedleConversation(20)
	msgs[0].Meta = map[string]string{schemas.MetaPin: "true"}
	var last uint64
	for i, m := range msgs {
		if last, err = pc.Publish(ctx, conv, m); err != nil {
			t.Fatalf("publish %d as proxy: %v", i, err)
		}
	}
	if cx, err := pc.Context(ctx, conv, pipeline.AtLeastSeq(last)); err != nil || cx.Seqs[len(cx.Seqs)-1] != last {
		t.Fatalf("context as proxy: %v; want it to end at its last write %d", err, last)
	}
	// Over its budget: the trigger queues a compaction. Whether the proxy finds it
	// pending or not, it reads the pending request and waits for its outcome.
	if _, err := pc.Pending(ctx, conv); err != nil {
		t.Fatalf("pending as proxy: %v", err)
	}
	eventually(t, time.Minute, "a compacted context with the pinned message, read as proxy", func() bool {
		cx, err := pc.Context(ctx, conv, pipeline.WaitPending(5*time.Second), pipeline.Raw())
		if err != nil {
			t.Fatalf("context as proxy: %v", err)
		}
		return cx.HasSummary && cx.Generation >= 1 && cx.Messages[0].Pinned()
	})
	resp, err := pc.Compact(ctx, conv, pipeline.Instructions("keep the codes"))
	if err != nil || resp.RequestID == "" {
		t.Fatalf("compactor.compact as proxy: %+v, %v", resp, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	ev, err := pc.WaitForOutcome(wctx, conv, resp.RequestID)
	cancel()
	if err != nil || !jetstream.IsOutcome(ev) {
		t.Fatalf("wait for the outcome of %s as proxy: %+v, %v", resp.RequestID, ev, err)
	}

	// The proxy's own paths: a turn stored as a batch with message ids (stored again:
	// nothing twice), the conversation's messages from the leader, the live value and tombstone from the leader, a compaction waited for by
	// the service.
	turn := []pipeline.BatchMsg{
		{Conv: conv, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("next question")}, MsgID: conv + "-turn-1"},
		{Conv: conv, Message: schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("next answer")}, MsgID: conv + "-turn-2"},
	}
	seqs, err := pc.PublishBatch(ctx, turn, pipeline.BatchOptions{})
	if err != nil {
		t.Fatalf("publish a batch as proxy: %v", err)
	}
	if again, err := pc.PublishBatch(ctx, turn, pipeline.BatchOptions{}); err != nil || again[1] != seqs[1] {
		t.Fatalf("the batch again as proxy: %v, %v; want the same sequences %v", again, err, seqs)
	}
	if ms, err := st.Chat().LoadLeader(ctx, conv, seqs[0], 0); err != nil || len(ms) != 2 {
		t.Fatalf("the turn from the leader as proxy: %d messages, %v", len(ms), err)
	}
	if v, _, _, err := st.Results().Live(ctx, conv, true); err != nil || v == nil {
		t.Fatalf("the live value from the leader as proxy: %+v, %v", v, err)
	}
	if r, err := pc.Compact(ctx, conv, pipeline.Wait(30*time.Second)); err != nil || r.Status == pipeline.StatusQueued {
		t.Fatalf("a compaction waited for as proxy: %+v, %v", r, err)
	}

	// A message over the max payload: its object stored, and read back.
	big := conv + "-large"
	large := schemas.Message{Role: schemas.RoleUser,
		Content: schemas.Text("NEEDLE " + strings.Repeat("a large tool output line\n", 2*rolestest.MaxPayload/24))}
	if _, err := pc.Publish(ctx, big, large); err != nil {
		t.Fatalf("publish a message over the max payload as proxy: %v", err)
	}
	es, err := st.Chat().LoadEntries(ctx, big, 0, 0)
	if err != nil || len(es) != 1 || es[0].Message.ContentRef == nil {
		t.Fatalf("CHAT holds %d entries (%v); want one stub", len(es), err)
	}
	if body, err := st.Objects().Read(ctx, big, es[0].Message.ContentRef); err != nil || !strings.Contains(string(body), "NEEDLE") {
		t.Fatalf("read the object back as proxy: %d bytes, %v", len(body), err)
	}

	// The policy: read, and a change (made by the admin through the service) heard.
	if _, err := policies.Settings(ctx, conv); err != nil {
		t.Fatalf("the policy as proxy: %v", err)
	}
	if _, err := pipeline.NewWithStore(admin.NC, st).Policy(ctx, schemas.PolicyRequest{Conversation: conv,
		Set: map[string]any{"context_window": 9000}}); err != nil {
		t.Fatalf("set a policy as admin: %v", err)
	}
	eventually(t, 30*time.Second, "the proxy's policy cache to hear the change", func() bool {
		s, err := policies.Settings(ctx, conv)
		return err == nil && s.Budget().ContextWindow == 9000
	})
	if !policies.CacheStats().Live {
		t.Errorf("the proxy's policy watch is not live")
	}
	if v := proxy.Violations(); v != "" {
		t.Fatalf("the proxy was refused what it needs:\n%s", v)
	}
}

// proxyMayNot checks that the server refuses the proxy what belongs to the other roles.
func proxyMayNot(t *testing.T, ctx context.Context, proxy *rolestest.Conn, pc *pipeline.Client, st *jetstream.Store, conv string) {
	t.Helper()
	request := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := proxy.NC.RequestWithContext(ctx, subject, []byte(`{}`))
			return err
		}
	}
	cfg := st.Config()
	for _, tc := range []struct {
		what, subject string
		op            func(context.Context) error
	}{
		{"write a result", "$KV." + cfg.ResultsBucket + "." + conv, request("$KV." + cfg.ResultsBucket + "." + conv)},
		{"write a policy", "$KV." + cfg.PolicyBucket + "." + conv, func(ctx context.Context) error {
			return st.Policies().Put(ctx, conv, []byte(`{"context_window":"1000"}`), 0)
		}},
		{"write a tombstone", "$KV." + cfg.ForgetBucket + "." + conv, request("$KV." + cfg.ForgetBucket + "." + conv)},
		{"take a compaction request", "$JS.API.CONSUMER.MSG.NEXT." + cfg.RequestsStream + "." + cfg.WorkerConsumer,
			request("$JS.API.CONSUMER.MSG.NEXT." + cfg.RequestsStream + "." + cfg.WorkerConsumer)},
		{"queue a request itself", "compact.request." + conv, request("compact.request." + conv)},
		{"forge an event", "compact.event." + conv, request("compact.event." + conv)},
		{"purge CHAT", "$JS.API.STREAM.PURGE." + cfg.ChatStream, request("$JS.API.STREAM.PURGE." + cfg.ChatStream)},
		{"purge the objects", "$JS.API.STREAM.PURGE.OBJ_" + cfg.ObjectsBucket, request("$JS.API.STREAM.PURGE.OBJ_" + cfg.ObjectsBucket)},
		{"delete a message", "$JS.API.STREAM.MSG.DELETE." + cfg.ChatStream, request("$JS.API.STREAM.MSG.DELETE." + cfg.ChatStream)},
	} {
		refused(t, proxy, tc.what, tc.subject, tc.op)
	}
	for _, tc := range []struct {
		what, subject string
		op            func(context.Context) error
	}{
		{"forget", schemas.ForgetSubject, func(ctx context.Context) error { _, err := pc.Forget(ctx, conv); return err }},
		{"set a policy through the service", schemas.PolicySubject, func(ctx context.Context) error {
			_, err := pc.Policy(ctx, schemas.PolicyRequest{Conversation: conv, Set: map[string]any{"context_window": 1000}})
			return err
		}},
	} {
		opCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := tc.op(opCtx)
		deadline := opCtx.Err()
		cancel()
		if !errors.Is(err, jetstream.ErrPermission) || !strings.Contains(err.Error(), tc.subject) || deadline != nil {
			t.Errorf("%s as proxy: %v (context: %v); want a permission error naming %s", tc.what, err, deadline, tc.subject)
		}
	}
	// Another user's replies.
	if _, err := proxy.NC.SubscribeSync("_INBOX_api.>"); err != nil {
		t.Fatal(err)
	}
	want := `Permissions Violation for Subscription to "_INBOX_api.>"`
	eventually(t, 5*time.Second, "the refusal of another user's inbox", func() bool {
		return strings.Contains(proxy.Violations(), want)
	})
}

// otherAccountOutOfReach stores a conversation in the account OTHER and checks that the
// proxy's reads of the same id see nothing of it.
func otherAccountOutOfReach(t *testing.T, ctx context.Context, url, pw string, pc *pipeline.Client, cfg jetstream.Config) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo("other", pw))
	if err != nil {
		t.Fatalf("connect as other: %v", err)
	}
	defer nc.Close()
	ost, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatalf("provision in OTHER: %v", err)
	}
	const conv = "tenant-secret"
	seq, err := pipeline.NewWithStore(nc, ost).Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("the other tenant's secret")})
	if err != nil {
		t.Fatalf("publish in OTHER: %v", err)
	}
	if cx, err := pipeline.NewWithStore(nc, ost).Context(ctx, conv, pipeline.AtLeastSeq(seq)); err != nil || len(cx.Messages) != 1 {
		t.Fatalf("the tenant's own read: %+v, %v", cx, err)
	}
	cx, err := pc.Context(ctx, conv)
	if err != nil || len(cx.Messages) != 0 {
		t.Fatalf("the proxy read %s of another account: %+v, %v; want nothing", conv, cx, err)
	}
}
