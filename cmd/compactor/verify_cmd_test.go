package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// compactor verify, against a running stack that compacted four conversations: a
// message deleted from the middle of one's compacted history directly on the stream (a
// lost or corrupted record, as a reader sees it) is reported with its conversation,
// sequence and what was expected there, exit 9, also by --all; the prefix CHAT lost
// to a purge up to a sequence (what its age limit leaves), a conversation untouched,
// and a forgotten one are not holes.
func TestVerifyReportsAHoleAndNothingElse(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, nil)
	t.Setenv("COMPACTOR_NATS_URL", s.nc.ConnectedUrl())
	ctx := ctxFor(t, 2*time.Minute)
	seqs := map[string][]uint64{}
	compacted := func(conv string) {
		t.Helper()
		for i := 0; i < 20; i++ {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("%s %d %s", conv, i, strings.Repeat("w", 1600)))}
			if i%2 == 1 {
				m.Role = schemas.RoleAssistant
			}
			b, _ := m.Encode()
			seq, err := s.st.Chat().Publish(ctx, conv, b, "")
			if err != nil {
				t.Fatal(err)
			}
			seqs[conv] = append(seqs[conv], seq)
		}
		eventually(t, time.Minute, conv+" to be compacted", func() bool {
			v, err := s.client.Result(ctx, conv)
			return err == nil && v != nil && v.Generation >= 1 && len(v.Witnessed) > 0
		})
	}
	compacted("aged")
	js, err := natsjs.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := js.Stream(ctx, s.st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	// CHAT loses everything below aged's fourth message, as its age limit would.
	if err := chat.Purge(ctx, natsjs.WithPurgeSequence(seqs["aged"][3])); err != nil {
		t.Fatal(err)
	}
	compacted("holed")
	compacted("whole")
	compacted("forgot")
	if _, _, err := cli(t, "", "forget", "forgot"); err != nil {
		t.Fatal(err)
	}
	v, err := s.client.Result(ctx, "holed")
	if err != nil {
		t.Fatal(err)
	}
	lost := seqs["holed"][2]
	if lost >= v.TailStartSeq {
		t.Fatalf("the third message (seq %d) is not in the compacted part (tail from %d)", lost, v.TailStartSeq)
	}
	if err := chat.DeleteMsg(ctx, lost); err != nil {
		t.Fatal(err)
	}

	out, _, err := cli(t, "", "verify", "holed")
	if code := exitCode(err); code != exitHoles {
		t.Fatalf("verify holed: exit %d (%v), printed %q; want %d", code, err, out, exitHoles)
	}
	if want := fmt.Sprintf("holed: hole: message at seq %d (witnessed); expected: ", lost); !strings.Contains(out, want) {
		t.Fatalf("verify holed printed %q; want a line starting %q", out, want)
	}
	for _, conv := range []string{"whole", "aged"} {
		out, _, err := cli(t, "", "verify", conv)
		if err != nil || !strings.Contains(out, conv+": no hole") {
			t.Errorf("verify %s: %v, printed %q; want no hole", conv, err, out)
		}
	}
	if _, _, err := cli(t, "", "verify", "forgot"); exitCode(err) != exitNotFound {
		t.Errorf("verify forgot: %v; want not found (exit %d)", err, exitNotFound)
	}
	out, errOut, err := cli(t, "", "verify", "--all")
	if exitCode(err) != exitHoles || strings.Count(out, "hole:") != 1 || !strings.Contains(out, fmt.Sprintf("holed: hole: message at seq %d", lost)) {
		t.Fatalf("verify --all: %v, printed %q; want exactly the hole of holed, exit %d", err, out, exitHoles)
	}
	if !strings.Contains(errOut, "1 holes in 1 of them") {
		t.Errorf("verify --all summed up %q", errOut)
	}
	out, _, _ = cli(t, "", "verify", "holed", "--json")
	var o verifyOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Holes != 1 || len(o.Conversations) != 1 || o.Conversations[0].Holes[0].Seqs[0] != lost {
		t.Fatalf("verify --json printed %s (%v)", out, err)
	}
	// The operator accepts the loss: recorded on the value, no longer reported.
	out, _, err = cli(t, "", "verify", "--accept", "holed")
	if err != nil || !strings.Contains(out, fmt.Sprintf("holed: accepted the loss: message at seq %d (witnessed)", lost)) {
		t.Fatalf("verify --accept holed: %v, printed %q", err, out)
	}
	if v, err := s.client.Result(ctx, "holed"); err != nil || v.LossAcceptedThroughSeq != lost || len(v.Holes) != 0 {
		t.Fatalf("value after --accept: %+v, %v; want the loss accepted through seq %d", v, err, lost)
	}
	out, _, err = cli(t, "", "verify", "holed")
	if err != nil || !strings.Contains(out, "holed: no hole") || !strings.Contains(out, "accepted (compactor verify --accept)") {
		t.Fatalf("verify holed after --accept: %v, printed %q; want no hole and a note of the accepted loss", err, out)
	}
	if out, _, err := cli(t, "", "verify", "--all"); err != nil || strings.Contains(out, "hole:") {
		t.Fatalf("verify --all after --accept: %v, printed %q; want no hole", err, out)
	}
	if out, _, err := cli(t, "", "verify", "--accept", "whole"); err != nil || !strings.Contains(out, "whole: no hole to accept") {
		t.Errorf("verify --accept whole: %v, printed %q", err, out)
	}
	// A message lost later, above the accepted mark, is a hole again.
	lost2 := seqs["holed"][4]
	if lost2 >= v.TailStartSeq {
		t.Fatalf("the fifth message (seq %d) is not in the compacted part (tail from %d)", lost2, v.TailStartSeq)
	}
	if err := chat.DeleteMsg(ctx, lost2); err != nil {
		t.Fatal(err)
	}
	if out, _, err := cli(t, "", "verify", "holed"); exitCode(err) != exitHoles || !strings.Contains(out, fmt.Sprintf("message at seq %d", lost2)) {
		t.Fatalf("verify holed after a later loss: %v, printed %q; want the new hole at seq %d", err, out, lost2)
	}
	for _, args := range [][]string{{"verify"}, {"verify", "a", "--all"}, {"verify", "a.b"}, {"verify", "--accept", "--all"}, {"verify", "--accept"}} {
		if _, _, err := cli(t, "", args...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v; want a usage error", args, err)
		}
	}
}

// Many producers publishing one conversation at once, interleaved with another's and
// with a client that sets none of Compactor's fields (a bare publish, no headers),
// through the real trigger and workers: compactions complete, no hole is declined or
// recorded, and verify finds none.
func TestManyProducersMakeNoFalseHole(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, nil)
	t.Setenv("COMPACTOR_NATS_URL", s.nc.ConnectedUrl())
	ctx := ctxFor(t, 2*time.Minute)
	subj, err := s.st.Config().ChatSubject("crowd")
	if err != nil {
		t.Fatal(err)
	}
	burst := func(round int) {
		var wg sync.WaitGroup
		for p := range 4 {
			wg.Go(func() {
				for i := range 15 {
					conv := "crowd"
					if i%4 == 3 {
						conv = fmt.Sprintf("beside-%d", p)
					}
					if p == 0 && i%3 == 0 {
						if err := s.nc.Publish(subj, []byte(`{"role":"user","content":"bare `+strings.Repeat("b", 1200)+`"}`)); err != nil {
							t.Error(err)
						}
						continue
					}
					m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("%d %d %d %s", round, p, i, strings.Repeat("w", 1200)))}
					b, _ := m.Encode()
					if _, err := s.st.Chat().Publish(ctx, conv, b, ""); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if err := s.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Each burst is about 14,000 tokens of crowd's, far over its threshold whatever the
	// compaction before it covered: two bursts make two compactions at least.
	for round := 1; round <= 2; round++ {
		burst(round)
		eventually(t, time.Minute, fmt.Sprintf("crowd to be compacted after burst %d", round), func() bool {
			v, err := s.client.Result(ctx, "crowd")
			return err == nil && v != nil && v.Generation >= uint64(round)
		})
	}
	v, err := s.client.Result(ctx, "crowd")
	if err != nil || len(v.Holes) > 0 || len(v.Witnessed) == 0 {
		t.Fatalf("value %+v, %v; want no hole and what the compactions read witnessed", v, err)
	}
	if out, _, err := cli(t, "", "verify", "crowd"); err != nil || !strings.Contains(out, "crowd: no hole") {
		t.Fatalf("verify crowd: %v, printed %q; want no hole", err, out)
	}
}

// An operator's purge of one conversation's subject, without compactor forget, leaves
// no trace that it was meant: verify reports it as a hole (counted: more than 4 are
// missing), also with --all, which finds the conversation by its value since CHAT holds
// no subject of it any more.
func TestVerifyReportsASubjectPurgedWithoutForget(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, nil)
	t.Setenv("COMPACTOR_NATS_URL", s.nc.ConnectedUrl())
	ctx := ctxFor(t, 2*time.Minute)
	for _, conv := range []string{"kept", "wiped"} {
		for i := range 20 {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("%s %d %s", conv, i, strings.Repeat("w", 1600)))}
			b, _ := m.Encode()
			if _, err := s.st.Chat().Publish(ctx, conv, b, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, time.Minute, "wiped to be compacted", func() bool {
		v, err := s.client.Result(ctx, "wiped")
		return err == nil && v != nil && v.Generation >= 1 && len(v.Witnessed) > 0
	})
	js, err := natsjs.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := js.Stream(ctx, s.st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := s.st.Config().ChatSubject("wiped")
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.Purge(ctx, natsjs.WithPurgeSubject(subj)); err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, "", "verify", "--all")
	if exitCode(err) != exitHoles || !strings.Contains(out, "wiped: hole: ") || strings.Contains(out, "kept:") {
		t.Fatalf("verify --all: %v, printed %q; want the hole of wiped only, exit %d", err, out, exitHoles)
	}
}
