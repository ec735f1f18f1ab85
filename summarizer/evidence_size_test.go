package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// hugeWindow is a window of 1M tokens (an evidence budget of 75,000 tokens) with a
// strategy that summarizes everything, so one manual compaction covers the whole input.
type hugeWindow struct{}

func (hugeWindow) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow, s.Strategy = 1_000_000, "all"
	return s, s.Validate()
}

// Evidence is never what makes a compaction fail: hostile commands and URLs full of
// characters JSON escapes six bytes to one, at a window whose evidence budget is far
// larger than one NATS message, still give a value that fits the server's max payload
// (here 64 KiB), and the compaction completes with what of the section fits.
func TestEvidenceNeverPushesTheValueOverTheMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	srv := jstest.ServerWith(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	amp := strings.Repeat("&<>", 40)
	var last uint64
	for i := range 300 {
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("curl 'https://example.com/q?a=%d%s' && echo %s%d", i, amp, amp, i)})
		id := fmt.Sprintf("c%d", i)
		for _, m := range []schemas.Message{
			{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "bash", Arguments: string(args)}}}},
			{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text("ok")},
		} {
			data, _ := m.Encode()
			if last, err = st.Chat().Publish(ctx, "amp", data, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: hugeWindow{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	v := compact(t, ctx, st, "amp", last)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxPayload {
		t.Fatalf("value of %d bytes; want it under the max payload %d", len(b), maxPayload)
	}
	if v.Evidence == nil || len(v.Evidence.Items) == 0 || v.EvidenceText == "" {
		t.Fatalf("the value kept no evidence; want what fits (the better ranked items): %+v", v.Evidence)
	}
	if v.CoveredThroughSeq < last-1 {
		t.Fatalf("covered through %d; want the whole input (through %d)", v.CoveredThroughSeq, last)
	}
	t.Logf("value %d bytes of %d; evidence section %d bytes, %d items", len(b), maxPayload, len(v.EvidenceText), func() int {
		if v.Evidence == nil {
			return 0
		}
		return len(v.Evidence.Items)
	}())
}
