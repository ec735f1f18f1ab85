package proxy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wire/openai"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

func user(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(s)}
}
func bot(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(s)}
}

// textBlock is s as the one text part a client may send back instead of a string.
func textBlock(role schemas.Role, s string) schemas.Message {
	return schemas.Message{Role: role, Content: schemas.Parts([]byte(`{"type":"text","text":"` + s + `"}`))}
}

type fixture struct {
	t    *testing.T
	ctx  context.Context
	st   *jetstream.Store
	conv *proxy.Store
	opts proxy.TurnOptions
}

func newFixture(t *testing.T, nc *nats.Conn, st *jetstream.Store, window int) *fixture {
	set := policy.Defaults()
	set.ContextWindow = window
	settings := func(context.Context, string) (policy.Settings, error) { return set, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, st: st, conv: proxy.NewConversations(nc, st, settings, zerolog.Nop()), opts: proxy.TurnOptions{Owner: "owner-a", CacheTTL: time.Minute}}
}

// turn prepares a turn and finishes it with reply ("" leaves it unfinished).
func (f *fixture) turn(conv string, msgs []schemas.Message, reply string) *proxy.Turn {
	f.t.Helper()
	tr, err := f.conv.Prepare(f.ctx, conv, msgs, f.opts)
	if err != nil {
		f.t.Fatalf("prepare: %v", err)
	}
	if reply != "" {
		if err := f.conv.Finish(f.ctx, tr, bot(reply), &proxy.Usage{Input: 100, Output: 10}); err != nil {
			f.t.Fatalf("finish: %v", err)
		}
	}
	return tr
}

// stored is the text of every message of conv in CHAT, in order.
func (f *fixture) stored(conv string) []string {
	f.t.Helper()
	msgs, err := f.st.Chat().LoadLeader(f.ctx, conv, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		e := m.Entry()
		out = append(out, e.Message.Content.String())
	}
	return out
}

// sent is the text the model is sent in t.
func sent(t *proxy.Turn) string {
	var b strings.Builder
	for _, m := range t.Context.Messages {
		b.WriteString(m.Content.String())
		b.WriteString("|")
	}
	return b.String()
}

// A client resends its whole history every turn: each message is stored once, the
// reply as the assistant message, a retried turn stores nothing, and the client's copy
// of the reply as a text block is the same message as the string stored.
func TestEachMessageStoredOnce(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("be brief")}
		t1 := f.turn("c1", []schemas.Message{sys, user("one")}, "reply one")
		if t1.Published != 2 || t1.Conv != "c1" || t1.Branch != "" {
			t.Fatalf("first turn: published %d on %s (%q)", t1.Published, t1.Conv, t1.Branch)
		}
		h2 := []schemas.Message{sys, user("one"), textBlock(schemas.RoleAssistant, "reply one"), user("two")}
		// A turn the upstream never answered (a bad key, a 429) stores nothing.
		failed := f.turn("c1", h2, "")
		if got := strings.Join(f.stored("c1"), "|"); got != "be brief|one|reply one" || failed.Published != 0 {
			t.Fatalf("a turn without its reply stored %d: CHAT holds %q", failed.Published, got)
		}
		retry := f.turn("c1", h2, "reply two")
		if retry.Published != 1 || retry.Branch != "" {
			t.Fatalf("the retried turn published %d (%q); want 1: only the new user message, and the reply", retry.Published, retry.Branch)
		}
		again := f.turn("c1", h2, "reply two")
		if again.Branch != "regenerate" {
			t.Fatalf("the same turn sent once more (its reply stored) is %q; want a regenerate", again.Branch)
		}
		got := strings.Join(f.stored("c1"), "|")
		if want := "be brief|one|reply one|two|reply two"; got != want || t1.Published != 2 {
			t.Fatalf("CHAT holds %q; want %q", got, want)
		}
		if s := sent(again); s != "be brief|one|reply one|two|" {
			t.Fatalf("model sent %q", s)
		}
	})
}

// A regenerated reply: the client drops the last reply and sends the rest again. The
// model is never sent the dropped reply; the new reply goes to a branch, and the next
// turn on it finds the branch.
func TestRegenerateBranches(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("one")}
		f.turn("c2", h, "first answer")
		regen := f.turn("c2", h, "second answer")
		if regen.Branch != "regenerate" || strings.Contains(sent(regen), "first answer") {
			t.Fatalf("regenerate: branch %q, sent %q", regen.Branch, sent(regen))
		}
		next := f.turn("c2", []schemas.Message{user("one"), bot("second answer"), user("two")}, "third answer")
		if !strings.HasPrefix(next.Conv, "c2--") || strings.Contains(sent(next), "first answer") {
			t.Fatalf("after the regenerate: on %s, sent %q", next.Conv, sent(next))
		}
		if got := strings.Join(f.stored(next.Conv), "|"); got != "one|second answer|two|third answer" {
			t.Fatalf("branch holds %q", got)
		}
		if got := strings.Join(f.stored("c2"), "|"); got != "one|first answer" {
			t.Fatalf("the conversation was changed: %q", got)
		}
	})
}

// Edits: an edit in the tail makes a branch that starts from the parent's summary (it
// covers only messages the client still has); an edit of a message the summary covers
// makes a branch from the client's own messages: the old summary is never sent.
func TestEditsBranchOnDigests(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("alpha"), bot("beta"), user("gamma"), bot("delta"), user("epsilon")}
		f.turn("c3", h, "zeta")
		putValue(f, "c3", 1, "SUMMARY of the first two", "gamma")
		live := f.turn("c3", append(h, bot("zeta"), user("eta")), "")
		if s := sent(live); !strings.Contains(s, "SUMMARY") || strings.Contains(s, "alpha|") {
			t.Fatalf("compacted turn sent %q", s)
		}

		tailEdit := []schemas.Message{user("alpha"), bot("beta"), user("gamma"), bot("delta"), user("EPSILON EDITED")}
		te := f.turn("c3", tailEdit, "omega")
		if te.Branch != "edit" || !strings.Contains(sent(te), "SUMMARY") || strings.Contains(sent(te), "epsilon|") || strings.Contains(sent(te), "zeta") {
			t.Fatalf("tail edit: branch %q, sent %q", te.Branch, sent(te))
		}
		if got := strings.Join(f.stored(te.Conv), "|"); !strings.Contains(got, "SUMMARY") || !strings.HasSuffix(got, "gamma|delta|EPSILON EDITED|omega") {
			t.Fatalf("tail-edit branch holds %q", got)
		}

		earlyEdit := []schemas.Message{user("ALPHA EDITED"), bot("beta"), user("gamma")}
		ee := f.turn("c3", earlyEdit, "")
		if ee.Branch != "edit" || strings.Contains(sent(ee), "SUMMARY") || sent(ee) != "ALPHA EDITED|beta|gamma|" {
			t.Fatalf("edit of a summarized message: branch %q on %s, sent %q", ee.Branch, ee.Conv, sent(ee))
		}
		if ee.Conv == te.Conv {
			t.Fatal("two different edits share a branch")
		}
	})
}

// A conversation written with one credential is refused to another.
func TestAnotherCredentialIsRefused(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		f.turn("c4", []schemas.Message{user("secret plan")}, "ok")
		f.opts.Owner = "owner-b"
		if _, err := f.conv.Prepare(f.ctx, "c4", []schemas.Message{user("secret plan")}, f.opts); !errors.Is(err, proxy.ErrNotOwner) {
			t.Fatalf("another owner: %v; want ErrNotOwner", err)
		}
	})
}

// Over the window with no compaction coming, the context is cut at read time to fit.
func TestOverTheWindowIsCut(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 2000)
		var h []schemas.Message
		for i := 0; i < 20; i++ {
			h = append(h, user(strings.Repeat("word ", 200)), bot("ok"))
		}
		h = append(h, user("last"))
		tr := f.turn("c5", h, "")
		if !tr.Cut || tr.Context.Tokens > 2000 || tr.ClientTokens <= 2000 {
			t.Fatalf("cut %v, sent %d tokens of the client's %d; want a cut under 2000", tr.Cut, tr.Context.Tokens, tr.ClientTokens)
		}
	})
}

// putValue writes generation gen of conv's value, its tail starting at the message
// holding tailText.
func putValue(f *fixture, conv string, gen uint64, summary, tailText string) {
	f.t.Helper()
	msgs, err := f.st.Chat().LoadLeader(f.ctx, conv, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range msgs {
		if e := m.Entry(); e.Message.Content.String() == tailText {
			_, rev, _ := f.st.Results().Get(f.ctx, conv, true)
			v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: gen, Summary: summary,
				TailStartSeq: m.Seq, CoveredThroughSeq: m.Seq - 1, FirstSeq: msgs[0].Seq, CreatedAt: time.Now()}
			if _, err := f.st.Results().Put(f.ctx, v, rev); err != nil {
				f.t.Fatal(err)
			}
			return
		}
	}
	f.t.Fatalf("no message %q", tailText)
}

// Between compactions the model is sent the same prefix: a newer compaction is not
// swapped in while the provider's cache likely holds the one sent before, and is once
// the cache has likely expired, or once the context outgrows the threshold.
func TestNewerCompactionWaitsForTheCache(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		now := time.Now()
		proxy.SetClock(f.conv, func() time.Time { return now })
		h := []schemas.Message{user("m1"), bot("m2"), user("m3"), bot("m4"), user("m5")}
		f.turn("c6", h, "m6")
		putValue(f, "c6", 1, "FIRST SUMMARY", "m3")
		h = append(h, bot("m6"), user("m7"))
		if tr := f.turn("c6", h, "m8"); tr.Context.Generation != 1 {
			t.Fatalf("first compacted turn: generation %d", tr.Context.Generation)
		}
		putValue(f, "c6", 2, "SECOND SUMMARY", "m7")
		h = append(h, bot("m8"), user("m9"))
		now = now.Add(time.Second)
		if tr := f.turn("c6", h, "m10"); tr.Context.Generation != 1 || !strings.Contains(sent(tr), "FIRST SUMMARY") {
			t.Fatalf("within the cache's life: generation %d, sent %q; want the first summary again", tr.Context.Generation, sent(tr))
		}
		h = append(h, bot("m10"), user("m11"))
		now = now.Add(2 * time.Minute) // past the fixture's CacheTTL of a minute
		if tr := f.turn("c6", h, ""); tr.Context.Generation != 2 || !strings.Contains(sent(tr), "SECOND SUMMARY") {
			t.Fatalf("past the cache's life: generation %d, sent %q; want the second summary", tr.Context.Generation, sent(tr))
		}
	})
}

// Forgetting a conversation forgets its branches: a client that sends its edited
// history again after the forget is never sent the summary its branch started from.
func TestForgottenBranchIsNeverServed(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("alpha"), bot("beta"), user("gamma"), bot("delta"), user("epsilon")}
		f.turn("c7", h, "zeta")
		putValue(f, "c7", 1, "FORGOTTEN SUMMARY", "gamma")
		edited := []schemas.Message{user("alpha"), bot("beta"), user("gamma"), bot("delta"), user("EDITED")}
		if tr := f.turn("c7", edited, "eta"); !strings.Contains(sent(tr), "FORGOTTEN SUMMARY") {
			t.Fatalf("before the forget the branch starts from the summary: sent %q", sent(tr))
		}
		if _, err := st.Forget(f.ctx, "c7"); err != nil {
			t.Fatal(err)
		}
		tr := f.turn("c7", append(edited, bot("eta"), user("again")), "theta")
		if strings.Contains(sent(tr), "FORGOTTEN SUMMARY") || tr.Conv != "c7" || tr.Published != 7 {
			t.Fatalf("after the forget: on %s, published %d, sent %q; want the client's messages stored anew on c7", tr.Conv, tr.Published, sent(tr))
		}
	})
}

// The client sends its next turn before the reply of the last one is stored (an SDK
// closes at the stream's end and sends again at once, or another process takes the next
// turn): the next turn stores the client's copy of the reply, and storing the reply
// afterwards is no error and no second copy.
func TestReplyStoredAfterTheNextTurnStoredItsCopy(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		other := newFixture(t, nc, st, 128000) // a second proxy process
		h := []schemas.Message{user("one")}
		first, err := f.conv.Prepare(f.ctx, "c8", h, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		next := append(h, textBlock(schemas.RoleAssistant, "reply one"), user("two"))
		if tr := other.turn("c8", next, "reply two"); tr.Published != 3 {
			t.Fatalf("the next turn published %d; want the first message, the reply's copy and the new message", tr.Published)
		}
		if err := f.conv.Finish(f.ctx, first, bot("reply one"), &proxy.Usage{Input: 10, Output: 2}); err != nil {
			t.Fatalf("storing the reply after its copy: %v", err)
		}
		if got := strings.Join(f.stored("c8"), "|"); got != "one|reply one|two|reply two" {
			t.Fatalf("CHAT holds %q", got)
		}
	})
}

// The reply was a tool call: the conversation ends with a call whose results the
// client sends in its next turn. The reader leaves an open call out, so the model is
// sent the client's copy of the call with its results, never the results alone (the
// request could not be built before).
func TestToolRoundOpenAtTheTipIsSentWhole(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("be brief")}
		call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function",
			Function: schemas.FunctionCall{Name: "read", Arguments: "{}"}}}}
		first, err := f.conv.Prepare(f.ctx, "c9", []schemas.Message{sys, user("one")}, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.conv.Finish(f.ctx, first, call, nil); err != nil {
			t.Fatal(err)
		}
		result := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text("file text")}
		tr := f.turn("c9", []schemas.Message{sys, user("one"), call, result}, "done")
		if _, err := openai.OpenAI().Build(&proxy.Request{Body: []byte(`{"model":"m","messages":[]}`)}, tr.Context); err != nil {
			t.Fatalf("the turn after a tool call cannot be sent: %v", err)
		}
		if n := len(tr.Context.Messages); n != 4 || len(tr.Context.Messages[2].ToolCalls) != 1 {
			t.Fatalf("sent %d messages: %q", n, sent(tr))
		}
		if got := len(f.stored("c9")); got != 5 || tr.Published != 1 {
			t.Fatalf("CHAT holds %d messages, the turn published %d; want 5 and 1 (the result, then the reply)", got, tr.Published)
		}
	})
}

// With no owner binding (COMPACTOR_PROXY_BIND_OWNER=false: a client whose credential
// changes during a conversation), a conversation is neither bound nor refused.
func TestAnyOwnerBindsNothing(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		f.opts.Owner = proxy.AnyOwner
		f.turn("c10", []schemas.Message{user("one")}, "reply one")
		f.opts.Owner = "a-refreshed-token"
		tr := f.turn("c10", []schemas.Message{user("one"), bot("reply one"), user("two")}, "reply two")
		if tr.Published != 1 {
			t.Fatalf("a later credential published %d; want 1", tr.Published)
		}
		msgs, err := st.Chat().LoadLeader(f.ctx, "c10", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if owner := msgs[0].Entry().Message.Meta[proxy.MetaOwner]; owner != "" {
			t.Fatalf("an unbound turn wrote owner %q", owner)
		}
	})
}
