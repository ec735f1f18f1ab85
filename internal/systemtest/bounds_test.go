package systemtest

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// An agent that reports a tenth of its real usage every turn (Anthropic's input_tokens
// read as prompt_tokens, without the cache reads), each reply measured on the context
// it read, is still compacted: the trigger ignores such usage, so the conversation
// ends under its threshold (issue 18). It failed before: every reply reset the
// trigger's estimate to a tenth of the context, nothing was ever compacted, and the
// context grew past the window.
func TestUsageTenTimesTooLowStillCompacts(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, nil)
	const conv = "usage-too-low"
	user := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("note ", 320))} // about 400 tokens
	for turn := range 20 {                                                                               // about 8,200 tokens in all
		cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.Publish(ctxFor(t, 10*time.Second), conv, user); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		gen := cx.Generation
		reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("noted"), ContextGeneration: &gen}
		read := cx.Tokens + tokens.Message(&user)
		reply.Usage = &schemas.Usage{PromptTokens: read / 10, CompletionTokens: 1}
		if _, err := s.client.Publish(ctxFor(t, 10*time.Second), conv, reply); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}
	threshold := env.budget().ThresholdTokens()
	var last int
	var gen uint64
	eventually(t, 30*time.Second, "a compacted context under the threshold", func() bool {
		cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
		if err != nil {
			return false
		}
		last, gen = cx.Tokens, cx.Generation
		return cx.Generation > 0 && cx.Tokens < threshold
	})
	t.Logf("generation %d, %d tokens (threshold %d)", gen, last, threshold)
}
