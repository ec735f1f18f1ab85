package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// lastOn is the last message of stream on subject, read as c's user.
func lastOn(ctx context.Context, c *rolestest.Conn, stream, subject string) (*natsjs.RawStreamMsg, error) {
	str, err := natsjs.New(c.NC)
	if err != nil {
		return nil, err
	}
	s, err := str.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.GetLastMsgForSubject(ctx, subject)
}

// refused runs op with a short deadline and checks that it fails and that the server
// reported a permissions violation naming subject (a refused publish gets no answer, so
// the operation itself only times out).
func refused(t *testing.T, c *rolestest.Conn, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 750*time.Millisecond)
	defer cancel()
	if err := op(ctx); err == nil {
		t.Errorf("%s could %s", c.User, what)
		return
	}
	want := fmt.Sprintf("Permissions Violation for Publish to %q", subject)
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(c.Violations(), want) {
		if time.Now().After(deadline) {
			t.Errorf("%s %s: no %q among the async errors:\n%s", c.User, what, want, c.Violations())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The roles of deploy/nats/accounts.conf against a server started from that file: the
// admin provisions, then trigger, worker and api run their serve roles as their own
// users, a producer publishes a conversation past its budget, and it is compacted and
// read back by a reader; each role is refused what belongs to the others.
func TestRolesOfAccountsConf(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	conv := "roles-1"

	admin := connect("admin")
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := jetstream.Provision(ctx, admin.NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}

	// Every serve role provisions at start: with everything in place that only reads.
	stores := map[string]*jetstream.Store{}
	conns := map[string]*rolestest.Conn{}
	llm := fakellm.New(t) // the worker's: what it was given to summarize
	for _, role := range []string{"api", "trigger", "worker"} {
		c := connect(role)
		st, err := jetstream.Provision(ctx, c.NC, cfg)
		if err != nil {
			t.Fatalf("provision as %s after the admin: %v", role, err)
		}
		env := testEnv(t, 8000)
		env.Roles = role
		env.MaxAttempts = 2
		var summarizer *fakellm.LLM // nil: the extractive summarizer
		if role == "worker" {
			summarizer = llm
		}
		runStack(t, c.NC, st, env, summarizer)
		stores[role], conns[role] = st, c
	}

	producer := connect("producer")
	pc, err := pipeline.New(ctx, producer.NC)
	if err != nil {
		t.Fatalf("producer client: %v", err)
	}
	reader := connect("reader")
	rc, err := pipeline.New(ctx, reader.NC)
	if err != nil {
		t.Fatalf("reader client: %v", err)
	}

	t.Run("producer publishes and reads its context", func(t *testing.T) {
		msgs, _ := fakellm.NeedleConversation(20)
		var last uint64
		for i, m := range msgs {
			if last, err = pc.Publish(ctx, conv, m); err != nil {
				t.Fatalf("publish %d as producer: %v", i, err)
			}
		}
		cx, err := pc.Context(ctx, conv, pipeline.AtLeastSeq(last))
		if err != nil {
			t.Fatalf("context as producer: %v", err)
		}
		if cx.Seqs[len(cx.Seqs)-1] != last {
			t.Fatalf("producer's context ends at %d; want its last write %d", cx.Seqs[len(cx.Seqs)-1], last)
		}
	})

	t.Run("trigger queues and worker compacts; reader reads the summary", func(t *testing.T) {
		eventually(t, time.Minute, "a compaction written by the worker", func() bool {
			cx, err := rc.Context(ctx, conv)
			return err == nil && cx.HasSummary && cx.Generation >= 1
		})
		v, err := rc.Result(ctx, conv)
		if err != nil || v == nil || v.Trigger != "budget" { // queued by the trigger, not the api
			t.Fatalf("result as reader: %+v, %v", v, err)
		}
	})

	t.Run("api answers status and policy", func(t *testing.T) {
		ac := pipeline.NewWithStore(admin.NC, stores["api"]) // the admin calls the service
		var status schemas.ConversationStatus
		m, err := admin.NC.Request(schemas.StatusSubject, fmt.Appendf(nil, `{"conversation":%q}`, conv), 10*time.Second)
		if err != nil {
			t.Fatalf("compactor.status: %v", err)
		}
		if err := json.Unmarshal(m.Data, &status); err != nil || status.LastSeq == 0 || status.Value == nil {
			t.Fatalf("compactor.status answered %s (%v)", m.Data, err)
		}
		p, err := ac.Policy(ctx, schemas.PolicyRequest{Conversation: conv, Set: map[string]any{"threshold": 0.8}})
		if err != nil || p.Policy["threshold"] != "0.8" {
			t.Fatalf("compactor.policy set as api: %+v, %v", p, err)
		}
		// A manual compaction: the api queues it, a worker does it, and the api finds
		// its outcome on COMPACT_EVENTS (ordered consumers).
		var last pipeline.CompactResponse
		eventually(t, time.Minute, "a manual compaction's outcome", func() bool {
			last, err = ac.Compact(ctx, conv, pipeline.Instructions("keep the codes"), pipeline.Wait(10*time.Second))
			return err == nil && (last.Status == "completed" || last.Status == "declined")
		})
		data, _, err := stores["worker"].Policies().Get(ctx, conv) // the worker reads it
		if err != nil || !strings.Contains(string(data), "0.8") {
			t.Fatalf("policy read as worker: %s, %v", data, err)
		}
	})

	t.Run("worker naks, terms and dead-letters a failing compaction", func(t *testing.T) {
		llm.Set(func(f *fakellm.LLM) { f.Status = http.StatusInternalServerError })
		defer llm.Set(func(f *fakellm.LLM) { f.Status = 0 })
		const dead = "roles-dead"
		msgs, _ := fakellm.NeedleConversation(20)
		for i, m := range msgs {
			if _, err := pc.Publish(ctx, dead, m); err != nil {
				t.Fatalf("publish %d as producer: %v", i, err)
			}
		}
		// Two failed attempts (a nak between them), then the dead letter, the term and
		// the fallback summary.
		eventually(t, time.Minute, "a dead letter for "+dead, func() bool {
			m, err := lastOn(ctx, admin, cfg.DeadStream, "compact.dead."+dead)
			return err == nil && m != nil
		})
		eventually(t, time.Minute, "the fallback summary for "+dead, func() bool {
			v, err := rc.Result(ctx, dead)
			return err == nil && v != nil && v.Fallback
		})
	})

	t.Run("trigger arms and acts on idle timers", func(t *testing.T) {
		const idle = "roles-idle"
		ac := pipeline.NewWithStore(admin.NC, stores["api"])
		if _, err := ac.Policy(ctx, schemas.PolicyRequest{Conversation: idle,
			Set: map[string]any{"idle_after": "1s", "idle_threshold": 0.1}}); err != nil {
			t.Fatalf("set the idle policy: %v", err)
		}
		msgs, _ := fakellm.NeedleConversation(8) // over 10% of the window, under its threshold
		for i, m := range msgs {
			if _, err := pc.Publish(ctx, idle, m); err != nil {
				t.Fatalf("publish %d as producer: %v", i, err)
			}
		}
		eventually(t, time.Minute, "an idle compaction of "+idle, func() bool {
			v, err := rc.Result(ctx, idle)
			return err == nil && v != nil && v.Trigger == schemas.TriggerTemporal && v.Generation >= 1
		})
	})

	t.Run("producer stores messages over the max payload; reader and worker restore them", func(t *testing.T) {
		const conv = "roles-large"
		// A pinned message stays verbatim after the compaction, so the reader shows it
		// whole then; the tool output is summarized, so the worker must restore it.
		pinned := schemas.Message{Role: schemas.RoleUser, Meta: map[string]string{"pin": "true"},
			Content: schemas.Text("NEEDLE-pinned " + strings.Repeat("keep this verbatim. ", rolestest.MaxPayload/20+10))}
		output := schemas.Message{Role: schemas.RoleTool, ToolCallID: "big-1",
			Content: schemas.Text("NEEDLE-outhead " + strings.Repeat("compiler output line\n", 3*rolestest.MaxPayload/22) + " NEEDLE-outtail")}
		msgs := []schemas.Message{pinned,
			{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "big-1", Type: "function", Function: schemas.FunctionCall{Name: "make", Arguments: "{}"}}}},
			output, {Role: schemas.RoleAssistant, Content: schemas.Text("built")}}
		for i, m := range msgs {
			if _, err := pc.Publish(ctx, conv, m); err != nil {
				t.Fatalf("publish %d as producer: %v", i, err)
			}
		}
		es, err := stores["worker"].Chat().LoadEntries(ctx, conv, 0, 0)
		if err != nil || len(es) != 4 || es[0].Message.ContentRef == nil || es[2].Message.ContentRef == nil {
			t.Fatalf("CHAT holds %d entries (%v); want the two large ones as stubs", len(es), err)
		}
		var cx *pipeline.Context
		eventually(t, time.Minute, "a compaction of the large conversation", func() bool {
			cx, err = rc.Context(ctx, conv)
			return err == nil && cx.Generation >= 1
		})
		stripped := pinned.StripMetadata()
		want, _ := stripped.Encode()
		if got, _ := cx.Messages[0].Encode(); len(cx.Skipped) > 0 || string(got) != string(want) {
			t.Fatalf("reader's context starts with %.100s (skipped %v); want the pinned message whole", got, cx.Skipped)
		}
		if in := llm.AllInputs(); !strings.Contains(in, "NEEDLE-outhead") || !strings.Contains(in, "NEEDLE-outtail") {
			t.Fatalf("the worker's summarizer was not given the tool output's head and tail")
		}
		// The api renders a context for compactor.context with a format: it restores the
		// pinned message from its object too, which makes the answer too large for the
		// max payload (413, not a read error or a context without it).
		m, err := admin.NC.Request(schemas.ContextSubject, fmt.Appendf(nil, `{"conversation":%q,"format":"anthropic"}`, conv), 10*time.Second)
		if err != nil {
			t.Fatalf("compactor.context with a format: %v", err)
		}
		if code, desc := m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"); code != "413" {
			t.Fatalf("compactor.context with a format answered %s %q; want 413: the api restores the large pinned message", code, desc)
		}
	})

	t.Run("reader and producer recall raw messages, directly and through the service", func(t *testing.T) {
		const conv = "roles-large" // compacted above: its raw messages are still in CHAT
		for _, c := range []*pipeline.Client{rc, pc} {
			got, err := c.Recall(ctx, conv, pipeline.Query("needle-OUTTAIL"), pipeline.MaxTokens(100_000))
			if err != nil {
				t.Fatalf("recall: %v", err)
			}
			if got.Returned != 2 || !strings.HasSuffix(got.Messages[1].Message.Content.String(), "NEEDLE-outtail") {
				t.Fatalf("recalled %d messages; want the tool round with its large output restored", got.Returned)
			}
		}
		for _, c := range []*rolestest.Conn{reader, producer} {
			var got schemas.RecallResponse
			m, err := c.NC.Request(schemas.RecallSubject, []byte(`{"conversation":"`+conv+`","query":"built"}`), 10*time.Second)
			if err != nil || json.Unmarshal(m.Data, &got) != nil || got.Returned != 1 || got.Messages[0].Message.Content.String() != "built" {
				t.Fatalf("compactor.recall as %s: %s, %v", c.User, m.Data, err)
			}
			// The large round does not fit the server's max payload: the answer says so.
			m, err = c.NC.Request(schemas.RecallSubject, []byte(`{"conversation":"`+conv+`","query":"needle-outtail","max_tokens":100000}`), 10*time.Second)
			if err != nil || json.Unmarshal(m.Data, &got) != nil || got.Returned != 0 || !got.CutByPayload || len(got.SkippedSeqs) != 1 {
				t.Fatalf("compactor.recall of a round over the max payload as %s: %s, %v", c.User, m.Data, err)
			}
		}
	})

	t.Run("worker and trigger take back what they wrote for a forgotten conversation", func(t *testing.T) {
		const other = "roles-taken-back"
		for _, role := range []string{"worker", "trigger"} {
			st := stores[role]
			if _, err := st.Forgotten(ctx, other); err != nil {
				t.Fatalf("%s reads a tombstone: %v", role, err)
			}
			var w jetstream.Writes
			if err := st.Events().PublishRecorded(ctx, schemas.Event{Type: schemas.EventRequested, Conversation: other, RequestID: role}, &w); err != nil {
				t.Fatalf("%s event: %v", role, err)
			}
			// The running workers take this request: it names another conversation, so
			// their job does not write the value written below.
			seq, err := stores["trigger"].Queue().Enqueue(ctx, schemas.Request{RequestID: role + "-req", Conversation: other + "-q",
				Trigger: "manual", RequestedAt: time.Now()})
			if err != nil && !errors.Is(err, jetstream.ErrRequestPending) {
				t.Fatal(err)
			}
			w.Request(seq)
			if role == "worker" {
				if err := st.Events().PublishDeadRecorded(ctx, other, schemas.DeadLetter{Request: schemas.Request{RequestID: role}}, &w); err != nil {
					t.Fatal(err)
				}
				rev, err := st.Results().Put(ctx, &schemas.Result{SchemaVersion: 1, Conversation: other, TailStartSeq: 1}, 0)
				if err != nil {
					t.Fatal(err)
				}
				w.Result(rev)
			}
			if err := st.TakeBack(ctx, other, &w); err != nil {
				t.Fatalf("%s takes back its writes: %v", role, err)
			}
		}
	})

	t.Run("worker learns and shares a small summarizer window; api shows it in status", func(t *testing.T) {
		llm.Set(func(f *fakellm.LLM) { f.Window = 3000 })
		defer llm.Set(func(f *fakellm.LLM) { f.Window = 0 })
		const small = "roles-small-window"
		msgs, _ := fakellm.NeedleConversation(20)
		for i, m := range msgs {
			if _, err := pc.Publish(ctx, small, m); err != nil {
				t.Fatalf("publish %d as producer: %v", i, err)
			}
		}
		eventually(t, time.Minute, "an LLM summary of "+small, func() bool {
			v, err := rc.Result(ctx, small)
			return err == nil && v != nil && v.Generation >= 1 && !v.Fallback
		})
		m, err := admin.NC.Request(schemas.StatusSubject, []byte(`{}`), 10*time.Second)
		if err != nil {
			t.Fatalf("compactor.status: %v", err)
		}
		var status jetstream.Status
		if err := json.Unmarshal(m.Data, &status); err != nil || len(status.LearnedWindows) != 1 || status.LearnedWindowsError != "" ||
			status.LearnedWindows[0].StatedTokens != 3000 {
			t.Fatalf("compactor.status answered %s (%v); want the learned window", m.Data, err)
		}
	})

	t.Run("producer forgets its conversation through the service", func(t *testing.T) {
		// Objects of the conversation, as large messages leave them, and another's.
		obs, err := natsjs.New(admin.NC)
		if err != nil {
			t.Fatal(err)
		}
		// nats.go's ObjectStore below, as on a bucket of an earlier version
		jstest.AllowRollUps(t, admin.NC, cfg.ObjectsBucket)
		store, err := obs.ObjectStore(ctx, cfg.ObjectsBucket) // provisioned by the admin
		if err != nil {
			t.Fatal(err)
		}
		var otherObject string
		for _, c := range []string{conv, "roles-other"} {
			// An object and the stub that names it (forget finds objects through stubs).
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a large tool output of " + c)}
			stub, object, err := m.Offload(c, cfg.ObjectsBucket, 10)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.PutBytes(ctx, stub.ContentRef.Name, object); err != nil {
				t.Fatal(err)
			}
			otherObject = stub.ContentRef.Name
			data, _ := stub.Encode()
			if _, err := obs.Publish(ctx, "chat."+c+".msg", data); err != nil {
				t.Fatal(err)
			}
		}
		out, err := pc.Forget(ctx, conv)
		if err != nil {
			t.Fatalf("forget as producer: %v", err)
		}
		if out.Deleted.ChatMessages < 20 || out.Deleted.ResultRevisions == 0 || out.Deleted.Objects != 1 {
			t.Fatalf("forget as producer deleted %+v; want the messages, the value and the object", out.Deleted)
		}
		if found, _ := jstest.Scan(t, admin.NC, conv); len(found) > 0 {
			t.Fatalf("after the forget: %v", found)
		}
		if _, err := store.GetInfo(ctx, otherObject); err != nil {
			t.Fatalf("another conversation's object after the forget: %v", err)
		}
	})

	// Doing their jobs, no role touched a subject it may not.
	for _, c := range []*rolestest.Conn{admin, producer, reader, conns["trigger"], conns["worker"], conns["api"]} {
		if v := c.Violations(); v != "" {
			t.Errorf("%s was refused subjects while doing its job:\n%s", c.User, v)
		}
	}

	t.Run("no role subscribes to the replies of another", func(t *testing.T) {
		for _, subj := range []string{"_INBOX.>", "_INBOX_reader.>", "_INBOX_api.>", ">"} {
			sub, err := producer.NC.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("Permissions Violation for Subscription to %q", subj)
			eventually(t, 5*time.Second, "the server to refuse "+subj, func() bool {
				return strings.Contains(producer.Violations(), want)
			})
			_ = sub.Unsubscribe()
		}
	})

	result := func(st *jetstream.Store) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := st.Results().Put(ctx, &schemas.Result{SchemaVersion: 1, Conversation: "forged", Summary: "forged"}, 0)
			return err
		}
	}
	policy := func(st *jetstream.Store) func(context.Context) error {
		return func(ctx context.Context) error { return st.Policies().Put(ctx, conv, []byte(`{"threshold":"0.9"}`), 0) }
	}
	event := func(st *jetstream.Store) func(context.Context) error {
		return func(ctx context.Context) error {
			return st.Events().Publish(ctx, schemas.Event{Type: schemas.EventCompleted, Conversation: conv, RequestID: "forged"})
		}
	}
	chat := func(c *pipeline.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("forged")})
			return err
		}
	}
	readPolicy := func(st *jetstream.Store) func(context.Context) error {
		return func(ctx context.Context) error { _, _, err := st.Policies().Get(ctx, conv); return err }
	}
	enqueue := func(st *jetstream.Store) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := st.Queue().Enqueue(ctx, schemas.Request{RequestID: "forged", Conversation: conv, Trigger: "manual",
				RequestedAt: time.Now()})
			return err
		}
	}
	// The producer's and reader's stores: the clients bind through Open.
	pst, err := jetstream.Open(ctx, producer.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rst, err := jetstream.Open(ctx, reader.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}

	object := func(c *rolestest.Conn) func(context.Context) error {
		return func(ctx context.Context) error {
			js, err := natsjs.New(c.NC)
			if err != nil {
				return err
			}
			_, err = js.Publish(ctx, "$O."+cfg.ObjectsBucket+".C.forged", []byte("forged"))
			return err
		}
	}
	t.Run("producer is refused results, policy and events", func(t *testing.T) {
		refused(t, producer, "write a result", "$KV.compaction.forged", result(pst))
		refused(t, producer, "read the policy bucket", "$JS.API.STREAM.MSG.GET.KV_compaction-policy", readPolicy(pst))
		refused(t, producer, "post an event", "compact.event."+conv, event(pst))
		refused(t, producer, "queue a request", "compact.request."+conv, enqueue(pst))
		refused(t, producer, "write a policy", "$JS.API.STREAM.INFO.KV_compaction-policy", policy(pst))
	})
	t.Run("reader is refused writes", func(t *testing.T) {
		refused(t, reader, "publish chat", "chat."+conv+".msg", chat(rc))
		refused(t, reader, "write a result", "$KV.compaction.forged", result(rst))
		refused(t, reader, "read the policy bucket", "$JS.API.STREAM.MSG.GET.KV_compaction-policy", readPolicy(rst))
		refused(t, reader, "write an object", "$O."+cfg.ObjectsBucket+".C.forged", object(reader))
	})
	t.Run("worker is refused policy changes and chat", func(t *testing.T) {
		refused(t, conns["worker"], "change a policy", "$KV.compaction-policy."+conv, policy(stores["worker"]))
		refused(t, conns["worker"], "publish chat", "chat."+conv+".msg", chat(pipeline.NewWithStore(conns["worker"].NC, stores["worker"])))
		refused(t, conns["worker"], "write an object", "$O."+cfg.ObjectsBucket+".C.forged", object(conns["worker"]))
	})
	t.Run("trigger is refused results and policy changes", func(t *testing.T) {
		refused(t, conns["trigger"], "write a result", "$KV.compaction.forged", result(stores["trigger"]))
		refused(t, conns["trigger"], "change a policy", "$KV.compaction-policy."+conv, policy(stores["trigger"]))
	})
	t.Run("api is refused results and chat", func(t *testing.T) {
		refused(t, conns["api"], "write a result", "$KV.compaction.forged", result(stores["api"]))
		refused(t, conns["api"], "publish chat", "chat."+conv+".msg", chat(pipeline.NewWithStore(conns["api"].NC, stores["api"])))
	})
	t.Run("only the api purges; the reader may not ask to forget", func(t *testing.T) {
		for _, c := range []*rolestest.Conn{producer, reader, conns["trigger"], conns["worker"]} {
			refused(t, c, "purge CHAT", "$JS.API.STREAM.PURGE.CHAT", func(ctx context.Context) error {
				_, err := c.NC.RequestWithContext(ctx, "$JS.API.STREAM.PURGE.CHAT", []byte(`{"filter":"chat.`+conv+`.msg"}`))
				return err
			})
		}
		refused(t, producer, "write a tombstone", "$KV.compaction-forgotten.x", func(ctx context.Context) error {
			_, err := producer.NC.RequestWithContext(ctx, "$KV.compaction-forgotten.x", []byte(`{"through_seq":1}`))
			return err
		})
		refused(t, reader, "ask to forget", schemas.ForgetSubject, func(ctx context.Context) error {
			_, err := rc.Forget(ctx, conv)
			return err
		})
	})
	t.Run("only the clients ask the service to recall", func(t *testing.T) {
		for _, c := range []*rolestest.Conn{conns["trigger"], conns["worker"]} {
			refused(t, c, "ask to recall", schemas.RecallSubject, func(ctx context.Context) error {
				_, err := c.NC.RequestWithContext(ctx, schemas.RecallSubject, []byte(`{"conversation":"`+conv+`"}`))
				return err
			})
		}
	})
	t.Run("no role but admin creates or deletes streams", func(t *testing.T) {
		for _, c := range []*rolestest.Conn{producer, reader, conns["trigger"], conns["worker"], conns["api"]} {
			refused(t, c, "delete a stream", "$JS.API.STREAM.DELETE.CHAT", func(ctx context.Context) error {
				_, err := c.NC.RequestWithContext(ctx, "$JS.API.STREAM.DELETE.CHAT", nil)
				return err
			})
		}
	})
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}

// A role without create rights that starts before the admin provisioned waits: its
// creates are refused (reported as permissions violations, retried like a JetStream
// that is not ready) until the admin has created everything, then it binds.
func TestRolesWaitForTheAdminToProvision(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	worker := connect("worker")
	ctx, cancel := context.WithCancel(context.Background()) // no deadline: each attempt times out on its own
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := jetstream.ProvisionRetrying(ctx, worker.NC, cfg, jetstream.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond},
			zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel))
		done <- err
	}()
	eventually(t, 10*time.Second, "the worker's create to be refused", func() bool {
		return strings.Contains(worker.Violations(), `Permissions Violation for Publish to "$JS.API.STREAM.CREATE.CHAT"`)
	})
	select {
	case err := <-done:
		t.Fatalf("the worker provisioned without the admin: %v", err)
	default:
	}
	if _, err := jetstream.Provision(ctxFor(t, 30*time.Second), connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker after the admin provisioned: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not bind within 30s of the admin provisioning")
	}
}

// The trigger user of accounts.conf runs a partitioned trigger (the 4 partitions the
// file lists): two trigger processes share the partitions (one gives some away to the
// other: drain and unpin), and a producer's conversation is compacted, with no
// permissions violation.
func TestRolesPartitionedTrigger(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 4
	cfg.TriggerHeartbeat = 200 * time.Millisecond
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	var triggers []*rolestest.Conn
	var logs []*proctest.LogBuffer
	run := func(role string) {
		c := connect(role)
		st, err := jetstream.Provision(ctx, c.NC, cfg)
		if err != nil {
			t.Fatalf("provision as %s after the admin: %v", role, err)
		}
		env := testEnv(t, 8000)
		env.Roles = role
		env.TriggerPartitions, env.TriggerHeartbeat = cfg.TriggerPartitions, cfg.TriggerHeartbeat
		if role != "trigger" {
			runStack(t, c.NC, st, env, nil)
			return
		}
		// The trigger's log says when it gave a partition away.
		logs = append(logs, &proctest.LogBuffer{})
		nd, err := build(env, c.NC, st, zerolog.New(logs[len(logs)-1]).Level(zerolog.InfoLevel))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- nd.Run(rctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("trigger: %v", err)
			}
		})
		triggers = append(triggers, c)
	}
	run("trigger")
	run("worker")
	// The first trigger owns every partition; the second takes its share.
	eventually(t, 10*time.Second, "the first trigger to own every partition", func() bool {
		return strings.Count(logs[0].String(), `"partition owned"`) == 4
	})
	run("trigger")
	eventually(t, 15*time.Second, "the first trigger to give partitions away (drained, unpinned)", func() bool {
		return strings.Contains(logs[0].String(), `"partition released"`)
	})
	eventually(t, 10*time.Second, "the second trigger to own partitions", func() bool {
		return strings.Contains(logs[1].String(), `"partition owned"`)
	})
	if l := logs[0].String(); strings.Contains(l, "unpin the partition") {
		t.Errorf("the first trigger could not unpin:\n%s", l)
	}

	producer := connect("producer")
	pc, err := pipeline.New(ctx, producer.NC)
	if err != nil {
		t.Fatal(err)
	}
	convs := []string{"roles-p0", "roles-p1", "roles-p2", "roles-p3", "roles-p4", "roles-p5"}
	publishUntilCompacted(t, ctx, pc, convs)
	for _, c := range append(triggers, producer) {
		if v := c.Violations(); v != "" {
			t.Errorf("%s: permissions violations:\n%s", c.User, v)
		}
	}
}

// publishUntilCompacted publishes a 20-message needle conversation to each of convs as
// the producer pc, and waits until each has a summary: what the roles must do together.
func publishUntilCompacted(t *testing.T, ctx context.Context, pc *pipeline.Client, convs []string) {
	t.Helper()
	msgs, _ := fakellm.NeedleConversation(20)
	for _, conv := range convs {
		for i, m := range msgs {
			if _, err := pc.Publish(ctx, conv, m); err != nil {
				t.Fatalf("publish %d of %s as producer: %v", i, conv, err)
			}
		}
	}
	for _, conv := range convs {
		eventually(t, time.Minute, "a compaction of "+conv, func() bool {
			cx, err := pc.Context(ctx, conv)
			return err == nil && cx.HasSummary && cx.Generation >= 1
		})
	}
}
