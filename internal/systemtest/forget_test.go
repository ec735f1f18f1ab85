package systemtest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// taggedConversation is fakellm.NeedleConversation whose needles carry tag (NEEDLE-<tag>000x),
// so two conversations' needles tell apart.
func taggedConversation(tag string, turns int) []schemas.Message {
	msgs, _ := fakellm.NeedleConversation(turns)
	for i := range msgs {
		if s := msgs[i].Content.String(); strings.Contains(s, "NEEDLE-") {
			msgs[i].Content = schemas.Text(strings.ReplaceAll(s, "NEEDLE-", "NEEDLE-"+tag))
		}
	}
	return msgs
}

// publishAll publishes msgs to conv through the client and returns the last sequence.
func publishAll(t *testing.T, c *pipeline.Client, conv string, msgs []schemas.Message) uint64 {
	t.Helper()
	var last uint64
	for i, m := range msgs {
		var err error
		if last, err = c.Publish(ctxFor(t, 10*time.Second), conv, m); err != nil {
			t.Fatalf("publish %d to %s: %v", i, conv, err)
		}
	}
	return last
}

// compacted waits until conv has a value of generation ≥ 1.
func compacted(t *testing.T, s *stack, conv string) {
	t.Helper()
	eventually(t, time.Minute, "a compaction of "+conv, func() bool {
		v, err := s.client.Result(ctxFor(t, 10*time.Second), conv)
		return err == nil && v != nil && v.Generation >= 1
	})
}

// placesOf returns the streams in which a scan found something.
func placesOf(found []jstest.Found) []string {
	var out []string
	for _, f := range found {
		if !slices.Contains(out, f.Stream) {
			out = append(out, f.Stream)
		}
	}
	slices.Sort(out)
	return out
}

// Owners can delete: a conversation compacted by the whole pipeline, with a policy, an
// idle timer, a dead letter, stored objects and a compaction in flight (its summarizer
// call held open), is forgotten through the Go client and the service. Once the held
// call is released and the job has finished, no stream, bucket or object store holds a
// byte of it (its id or its needles), another conversation is untouched, and the id
// starts again from scratch: its next compaction reads nothing of the old one.
func TestForgetLeavesNoByteOfTheConversation(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	ctx := ctxFor(t, 3*time.Minute)
	cfg := s.st.Config()
	const gone, kept = "forget-1", "keep-1"
	// nats.go's ObjectStore below, as on a bucket of an earlier version
	jstest.AllowRollUps(t, s.nc, cfg.ObjectsBucket)
	obs, err := jsFor(t, s.nc).ObjectStore(ctx, cfg.ObjectsBucket) // provisioned
	if err != nil {
		t.Fatal(err)
	}
	// Policy first: idle_after makes the trigger arm the conversation's idle timer.
	// The stack's service may not answer yet: ask until it does.
	eventually(t, 10*time.Second, "the service to set the policy", func() bool {
		_, err := s.client.Policy(ctx, schemas.PolicyRequest{Conversation: gone,
			Set: map[string]any{"idle_after": "1h", "instructions": "remember NEEDLE-fpolicy"}})
		if err != nil && !errors.Is(err, pipeline.ErrNoService) {
			t.Fatal(err)
		}
		return err == nil
	})
	publishAll(t, s.client, gone, taggedConversation("f", 8))
	publishAll(t, s.client, kept, taggedConversation("k", 8))
	compacted(t, s, gone)
	compacted(t, s, kept)
	settle(t, s)
	keptValue, keptRev, err := s.st.Results().Get(ctx, kept, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.st.Events().PublishDead(ctx, gone, schemas.DeadLetter{Request: schemas.Request{RequestID: "old", Conversation: gone,
		Trigger: schemas.TriggerManual, Instructions: "keep NEEDLE-fdead"}, Error: "llm down", Attempts: 5, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Objects of large messages, each named by its stub in CHAT (forget finds them there).
	for conv, names := range map[string][]string{gone: {"a", "b"}, kept: {"a"}} {
		for _, n := range names {
			tag := map[string]string{gone: "f", kept: "k"}[conv]
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("tool output "+n+" NEEDLE-"+tag+"object ", 100))}
			stub, object, err := m.Offload(conv, cfg.ObjectsBucket, 100)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := obs.PutBytes(ctx, stub.ContentRef.Name, object); err != nil {
				t.Fatal(err)
			}
			data, _ := stub.Encode()
			if _, err := s.st.Chat().Publish(ctx, conv, data, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A compaction in flight: the summarizer call is held open. Two more turns give it
	// something to summarize (the trigger may ask first: then the manual one is busy).
	llm.Set(func(f *fakellm.LLM) { f.Block = make(chan struct{}) })
	publishAll(t, s.client, gone, taggedConversation("f", 10)[33:])
	if r, err := s.client.Compact(ctx, gone, pipeline.Instructions("keep NEEDLE-fmanual")); err != nil ||
		(r.Status != pipeline.StatusQueued && r.Status != pipeline.StatusBusy) {
		t.Fatalf("manual compaction: %+v, %v", r, err)
	}
	eventually(t, 30*time.Second, "the compaction to reach the summarizer", func() bool { return llm.Held() >= 1 })

	before, _ := jstest.Scan(t, s.nc, gone, "NEEDLE-f")
	want := []string{cfg.ActivityStream, cfg.ChatStream, cfg.DeadStream, cfg.EventsStream, cfg.RequestsStream,
		"KV_" + cfg.ResultsBucket, "KV_" + cfg.PolicyBucket, "OBJ_" + cfg.ObjectsBucket}
	slices.Sort(want)
	if got := placesOf(before); !slices.Equal(got, want) {
		t.Fatalf("before the forget the conversation is in %v; want it in every place %v", got, want)
	}

	start := time.Now()
	out, err := s.client.Forget(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forget answered in %s: %+v", time.Since(start).Round(time.Millisecond), out)
	d := out.Deleted
	if d.ChatMessages != 43 || d.ChatMessagesErased != 43 || d.ResultRevisions == 0 || d.PolicyRevisions != 1 || d.Requests != 1 || d.Events == 0 ||
		d.DeadLetters != 1 || d.ActivityMarkers != 1 || d.Objects != 2 {
		t.Errorf("deleted %+v; want 43 messages, the value's revisions, the policy, the request in flight, the events, the dead letter, the idle timer and 2 objects", d)
	}
	llm.Release(false)
	s.stop(t) // the held job finishes before the stack stops: all it will write is written

	after, read := jstest.Scan(t, s.nc, gone, "NEEDLE-f")
	if len(after) > 0 {
		t.Fatalf("after the forget and the release, %d of %d stored messages hold the forgotten conversation:\n%v", len(after), read, after)
	}
	t.Logf("scanned %d stored messages after the forget: none holds %s or its needles", read, gone)
	if got := placesOf(mustScan(t, s, kept, "NEEDLE-k")); !slices.Contains(got, cfg.ChatStream) || !slices.Contains(got, "OBJ_"+cfg.ObjectsBucket) {
		t.Fatalf("the other conversation is in %v after the forget; want it untouched", got)
	}
	if v, rev, err := s.st.Results().Get(ctx, kept, true); err != nil || rev != keptRev || v.Summary != keptValue.Summary {
		t.Fatalf("the other conversation's value changed: revision %d (was %d), %v", rev, keptRev, err)
	}

	// The id starts again from scratch.
	s2 := runStack(t, s.nc, s.st, env, llm)
	calls := len(llm.AllInputs())
	publishAll(t, s2.client, gone, taggedConversation("r", 8))
	compacted(t, s2, gone)
	settle(t, s2)
	v, err := s2.client.Result(ctx, gone)
	if err != nil || v.FirstSeq <= out.ThroughSeq || strings.Contains(v.Summary, "NEEDLE-f") || !strings.Contains(v.Summary, "NEEDLE-r") {
		t.Fatalf("the new conversation's value: first_seq %d (forgotten through %d), summary %q, %v; want the new messages only",
			v.FirstSeq, out.ThroughSeq, v.Summary, err)
	}
	cx, err := s2.client.Context(ctx, gone)
	if err != nil || cx.Seqs[0] <= out.ThroughSeq {
		t.Fatalf("the new conversation's context starts at %v (%v); want after %d", cx.Seqs, err, out.ThroughSeq)
	}
	if in := llm.AllInputs()[calls:]; strings.Contains(in, "NEEDLE-f") {
		t.Fatal("the summarizer was given the forgotten conversation after the forget")
	}
	if after, _ := jstest.Scan(t, s.nc, "NEEDLE-f"); len(after) > 0 {
		t.Fatalf("after the id was used again: %v", after)
	}
}

func mustScan(t *testing.T, s *stack, needles ...string) []jstest.Found {
	t.Helper()
	found, _ := jstest.Scan(t, s.nc, needles...)
	return found
}

// A first compaction whose summarizer call is held open when its conversation is
// forgotten does not bring it back when the call returns: not as a first value, not as
// the generation-0 marker of a decline, not as a dead letter or failed event.
func TestForgetWhileTheFirstCompactionIsHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy map[string]any
		status int // the summarizer's answer once released (0: a summary)
	}{
		{name: "completed"},
		{name: "declined", policy: map[string]any{"min_progress": "0.99"}},
		{name: "failed", status: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, 4000)
			env.MaxAttempts = 1
			llm := fakellm.New(t)
			llm.Set(func(f *fakellm.LLM) { f.Block = make(chan struct{}) })
			s := startStack(t, env, llm)
			ctx := ctxFor(t, 2*time.Minute)
			const conv = "held-1"
			if tc.policy != nil {
				eventually(t, 10*time.Second, "the service to set the policy", func() bool {
					_, err := s.client.Policy(ctx, schemas.PolicyRequest{Conversation: conv, Set: tc.policy})
					if err != nil && !errors.Is(err, pipeline.ErrNoService) {
						t.Fatal(err)
					}
					return err == nil
				})
			}
			publishAll(t, s.client, conv, taggedConversation("h", 8))
			eventually(t, 30*time.Second, "the first compaction to reach the summarizer", func() bool { return llm.Held() >= 1 })
			if _, err := s.client.Forget(ctx, conv); err != nil {
				t.Fatal(err)
			}
			llm.Set(func(f *fakellm.LLM) { f.Status = tc.status })
			llm.Release(false)
			s.stop(t) // the job has finished when the stack has stopped
			if found, read := jstest.Scan(t, s.nc, conv, "NEEDLE-h"); len(found) > 0 {
				t.Fatalf("%d of %d stored messages hold the forgotten conversation:\n%v", len(found), read, found)
			}
		})
	}
}
