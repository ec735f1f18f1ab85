package proxy_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// Review: a regenerate of the last reply whose history holds an earlier reply of the
// same text ("Done." is a common one) is taken as the agent's own context management:
// the newest message's "copy" is the earlier reply. The docs promise "A history that
// lost the newest message is a regenerate or an edit" (a branch, the parent never
// changed); instead the client's last prompt is stored a second time in the parent,
// after the reply it regenerates.
func TestReviewRegenerateWithARepeatedReplyIsNotAContinuation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("fix the tests"), bot("Done.")}
		f.turn("rg", h[:1], "Done.")
		h = append(h, user("now fix the lint"))
		f.turn("rg", h, "Done.")
		before := strings.Join(f.stored("rg"), "|")
		// The agent regenerates the last reply: the same history, the newest reply dropped.
		tr := f.turn("rg", h, "Fixed 3 lint warnings.")
		if got := strings.Join(f.stored("rg"), "|"); got != before || tr.Branch != "regenerate" {
			t.Fatalf("regenerate: branch %q on %s; the parent went from\n%q\nto\n%q", tr.Branch, tr.Conv, before, got)
		}
	})
}

// Review: the same false anchor turns an edit into a continuation: the edited prompt is
// appended to the parent after the reply the agent rewound away, so the stored
// conversation (and what Compactor summarizes of it for the next turns) holds the
// dropped prompt and reply, which the docs promise the model is never sent.
func TestReviewEditWithARepeatedReplyBranches(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("fix the tests"), bot("Done."), user("DROPPED: delete the database")}
		f.turn("ed", h[:1], "Done.")
		f.turn("ed", h, "Done.")
		before := strings.Join(f.stored("ed"), "|")
		edited := []schemas.Message{user("fix the tests"), bot("Done."), user("now fix the lint")}
		tr := f.turn("ed", edited, "ok")
		if got := strings.Join(f.stored("ed"), "|"); got != before || tr.Branch != "edit" {
			t.Fatalf("edit: branch %q on %s; the parent went from\n%q\nto\n%q", tr.Branch, tr.Conv, before, got)
		}
	})
}
