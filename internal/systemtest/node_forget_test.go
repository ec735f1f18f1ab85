package systemtest

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// The Node.js example does not serve a value a forget covers: a late value of an old
// generation, written after the tombstone as a worker that outlived the forget would
// have, is dropped, and only what was published after the forget is read.
func TestNodeExampleDropsAValueTheTombstoneCovers(t *testing.T) {
	node, dir := nodeExample(t)
	s := startStack(t, testEnv(t, 8000), nil)
	ctx := ctxFor(t, time.Minute)
	runNode := func(stdin string, args ...string) (string, string, error) {
		return runNodeExample(t, node, dir, s.nc.ConnectedUrl(), []byte(stdin), args...)
	}
	if _, errOut, err := runNode("{\"role\":\"user\",\"content\":\"old one\"}\n{\"role\":\"assistant\",\"content\":\"old two\"}\n", "publish", "node-late"); err != nil {
		t.Fatalf("node publish: %v\n%s", err, errOut)
	}
	out, err := s.st.Forget(ctx, "node-late")
	if err != nil {
		t.Fatal(err)
	}
	late := &schemas.Result{SchemaVersion: 1, Conversation: "node-late", Generation: 3, Summary: "FORGOTTEN SUMMARY",
		TailStartSeq: out.ThroughSeq, CoveredThroughSeq: out.ThroughSeq - 1, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := s.st.Results().Put(ctx, late, 0); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runNode("{\"role\":\"user\",\"content\":\"new one\"}\n", "publish", "node-late"); err != nil {
		t.Fatalf("node publish: %v\n%s", err, errOut)
	}
	got, errOut, err := runNode("", "context", "node-late")
	if err != nil {
		t.Fatalf("node context: %v\n%s", err, errOut)
	}
	if strings.TrimSpace(got) != `{"role":"user","content":"new one"}` || !strings.Contains(errOut, "generation 0, 1 messages") {
		t.Fatalf("node context after the forget:\n%s\n%s\nwant only the new message, generation 0", got, errOut)
	}
}
