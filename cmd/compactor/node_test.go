package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Node.js example publishes a real transcript with the plain NATS client, Compactor
// compacts it, and the example's reader, written from the README's steps, assembles the
// same context as the Go reader. Skips unless node and the example's modules are there
// (.ci/run installs them when npm is available).
func TestNodeExampleReadsTheSameContext(t *testing.T) {
	dir, _ := filepath.Abs(filepath.Join("..", "..", "deploy", "examples", "node"))
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats")); err != nil {
		t.Skip("run npm ci in deploy/examples/node to enable this test")
	}
	convs := loadCorpus(t, 1)
	env := testEnv(t, 8000)
	s := startStack(t, env, newFakeLLM(t))
	var jsonl bytes.Buffer
	var n int
	for _, msgs := range convs {
		for _, m := range msgs {
			b, _ := m.Encode()
			jsonl.Write(b)
			jsonl.WriteByte('\n')
			n++
		}
	}
	url := s.nc.ConnectedUrl()
	runNode := func(stdin []byte, args ...string) string {
		cmd := exec.Command(node, append([]string{"compactor.mjs"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NATS_URL="+url)
		cmd.Stdin = bytes.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("node %v: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}
	seqs := strings.Fields(runNode(jsonl.Bytes(), "publish", "from-node"))
	if len(seqs) != n {
		t.Fatalf("node published %d messages; want %d", len(seqs), n)
	}
	settle(t, s)
	eventually(t, 30*time.Second, "compaction of the node conversation", func() bool {
		cx, err := s.client.Context(ctxFor(t, 10*time.Second), "from-node")
		return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
	})
	settle(t, s)
	cx, err := s.client.Context(ctxFor(t, 10*time.Second), "from-node")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(runNode(nil, "context", "from-node")), "\n")
	if len(got) != len(cx.Messages) {
		t.Fatalf("node read %d messages; Go read %d", len(got), len(cx.Messages))
	}
	for i, line := range got {
		want, _ := cx.Messages[i].Encode()
		var a, b any
		_ = json.Unmarshal([]byte(line), &a)
		_ = json.Unmarshal(want, &b)
		if !jsonEqual(a, b) {
			t.Fatalf("message %d differs:\nnode: %.300s\ngo:   %.300s", i, line, want)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
