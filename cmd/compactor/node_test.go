package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
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
	// The corpus's largest transcript with the default strategy, and long user messages
	// under user-messages, whose kept messages are pinned and one truncated by an override.
	var long []schemas.Message
	for i := range 30 {
		long = append(long,
			schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("request %d: %s", i, strings.Repeat("details of what I want. ", 40)))},
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("working on it")})
	}
	cases := map[string][]schemas.Message{"from-node": nil, "node-user-messages": long}
	for _, msgs := range convs {
		cases["from-node"] = msgs
	}
	data, _ := policy.EncodeConversation(policy.Layer{"strategy": "user-messages", "user_message_tokens": "700"})
	if err := s.st.PutPolicy(ctxFor(t, 5*time.Second), "node-user-messages", data, 0); err != nil {
		t.Fatal(err)
	}
	for conv, msgs := range cases {
		t.Run(conv, func(t *testing.T) {
			var jsonl bytes.Buffer
			for _, m := range msgs {
				b, _ := m.Encode()
				jsonl.Write(b)
				jsonl.WriteByte('\n')
			}
			seqs := strings.Fields(runNode(jsonl.Bytes(), "publish", conv))
			if len(seqs) != len(msgs) {
				t.Fatalf("node published %d messages; want %d", len(seqs), len(msgs))
			}
			settle(t, s)
			eventually(t, 30*time.Second, "compaction of the node conversation", func() bool {
				cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
				return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
			})
			settle(t, s)
			cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSpace(runNode(nil, "context", conv)), "\n")
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
			if conv == "node-user-messages" {
				v, _, _ := s.st.GetResult(ctxFor(t, 5*time.Second), conv, false)
				if len(v.KeptSeqs) == 0 || len(v.Overrides) == 0 {
					t.Fatalf("user-messages kept %v with overrides %v; the test needs both", v.KeptSeqs, v.Overrides)
				}
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
