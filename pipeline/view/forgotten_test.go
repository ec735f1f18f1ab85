package view_test

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas"
)

// A value that outlived a forget (written after the tombstone, for an old generation)
// is not shown: not in the conversation page's value, context or timeline, nor in the
// list's row; the page shows only what was published after the forget.
func TestPagesDoNotShowAValueTheTombstoneCovers(t *testing.T) {
	f := newFixture(t, tokenConfig())
	ctx := ctxT(t)
	for range 3 {
		f.publish(t, "late", `{"role":"user","content":"old message"}`)
	}
	out, err := f.st.Forget(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	late := &schemas.Result{SchemaVersion: 1, Conversation: "late", Generation: 5, Summary: "FORGOTTEN SUMMARY",
		TailStartSeq: out.ThroughSeq, CoveredThroughSeq: out.ThroughSeq - 1, FirstSeq: 1, CreatedAt: time.Now().UTC()}
	if _, err := f.st.Results().Put(ctx, late, 0); err != nil {
		t.Fatal(err)
	}
	f.publish(t, "late", `{"role":"user","content":"new message"}`)

	var c view.Conversation
	f.getJSON(t, "/api/c/late", &c)
	if c.Value != nil || c.Context.Generation != 0 || c.Context.Summary != nil || len(c.Timeline) != 0 ||
		len(c.Context.Tail) != 1 || !strings.Contains(c.Context.Tail[0].Text, "new message") {
		t.Fatalf("conversation page after the forget: value %+v, context %+v, timeline %+v; want only the new message",
			c.Value, c.Context, c.Timeline)
	}
	var l view.List
	f.getJSON(t, "/api/conversations", &l)
	for _, r := range l.Conversations {
		if r.Conversation == "late" && r.Generation != 0 {
			t.Fatalf("list row %+v; want generation 0", r)
		}
	}
	_, _, body := f.get(t, "/c/late")
	if strings.Contains(body, "FORGOTTEN") {
		t.Fatalf("the HTML page shows the forgotten summary")
	}
}
