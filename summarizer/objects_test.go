package summarizer_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/pretrim"
	"github.com/compactor/compactor/summarizer/split"
)

// summarizeAll is window4000 with the strategy that covers the whole history, so every
// message published reaches the summarizer.
type summarizeAll struct{}

func (summarizeAll) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	s, err := window4000{}.Settings(ctx, conv)
	s.Strategy = split.StrategyAll
	return s, err
}

// recording summarizes like the extractive summarizer and keeps every input.
type recording struct {
	mu     sync.Mutex
	inputs []summarizer.Input
}

func (r *recording) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	r.mu.Lock()
	r.inputs = append(r.inputs, in)
	r.mu.Unlock()
	return extractive.New().Summarize(ctx, in)
}

func (r *recording) all() []summarizer.Input {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]summarizer.Input(nil), r.inputs...)
}

// publishLarge publishes m as a client does when it is over the max payload: its
// object first, then the stub.
func publishLarge(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, m schemas.Message) uint64 {
	t.Helper()
	data, _ := m.Encode()
	if len(data) > st.Objects().InlineLimit("") {
		stub, object, err := m.Offload(conv, st.Config().ObjectsBucket, tokens.Stored(&m))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Objects().Put(ctx, conv, stub.ContentRef.Name, object); err != nil {
			t.Fatal(err)
		}
		data, _ = stub.Encode()
	}
	seq, err := st.Chat().Publish(ctx, conv, data, "")
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// The worker restores a message stored as an object before splitting and pre-trimming:
// the summarizer is given exactly the pre-trim of the whole tool output (its head and
// tail, here), not of the stub's note. When the object is gone, the message and its
// round are reported and left out, and the compaction still completes.
func TestSummarizerIsGivenTheWholeStoredMessage(t *testing.T) {
	const maxPayload = 16 << 10
	ns := jstest.ServerWith(t, jstest.MaxPayload(maxPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	output := "NEEDLE-head " + strings.Repeat("a line of the build log\n", 3*maxPayload/24) + " NEEDLE-tail"
	msgs := []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("build it")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "make", Arguments: "{}"}}}},
		{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(output)},
		{Role: schemas.RoleAssistant, Content: schemas.Text("built")},
	}
	reqs := map[string]schemas.Request{}
	for _, conv := range []string{"whole", "gone"} {
		var last uint64
		for _, m := range msgs {
			last = publishLarge(t, ctx, st, conv, m)
		}
		if conv == "gone" {
			es, err := st.Chat().LoadEntries(ctx, conv, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			js, _ := natsjs.New(nc)
			// nats.go's ObjectStore below, as on a bucket of an earlier version
			jstest.AllowRollUps(t, nc, st.Config().ObjectsBucket)
			obs, err := js.ObjectStore(ctx, st.Config().ObjectsBucket)
			if err != nil {
				t.Fatal(err)
			}
			if err := obs.Delete(ctx, es[2].Message.ContentRef.Name); err != nil {
				t.Fatal(err)
			}
		}
		reqs[conv] = request(t, ctx, st, conv, last)
	}
	sum := &recording{}
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, pcfg, summarizer.Options{Policies: summarizeAll{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	for conv, req := range reqs {
		ev, err := st.Events().WaitOutcome(ctx, conv, req.RequestID, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		// Without the tool output the context is small: a decline is a fine outcome.
		if ev.Type != schemas.EventCompleted && (conv == "whole" || ev.Type != schemas.EventDeclined) {
			t.Fatalf("%s: outcome %+v; want completed", conv, ev)
		}
	}
	s, _ := summarizeAll{}.Settings(ctx, "whole")
	stripped := make([]schemas.Message, len(msgs))
	for i, m := range msgs {
		stripped[i] = m.StripMetadata()
	}
	want := pretrim.TotalBudget(pretrim.ToolOutputs(stripped, s.ToolOutputCap), s.ToolOutputBudget)
	inputs := map[string]summarizer.Input{}
	for _, in := range sum.all() {
		inputs[in.Conversation] = in
	}
	got := inputs["whole"].Messages
	if len(got) != len(want) {
		t.Fatalf("the summarizer was given %d messages; want %d", len(got), len(want))
	}
	for i := range want {
		g, _ := got[i].Encode()
		w, _ := want[i].Encode()
		if !bytes.Equal(g, w) {
			t.Fatalf("message %d given to the summarizer:\n%.300s\nwant the pre-trim of the whole message:\n%.300s", i, g, w)
		}
	}
	if text := got[2].Content.String(); !strings.Contains(text, "NEEDLE-head") || !strings.Contains(text, "NEEDLE-tail") || strings.Contains(text, "stored as object") {
		t.Fatalf("tool output given to the summarizer: %.200s…; want the head and tail of the real output", text)
	}
	// Without its object, the round is not summarized; the rest is.
	gone := inputs["gone"].Messages
	if len(gone) != 2 || gone[0].Content.String() != "build it" || gone[1].Content.String() != "built" {
		t.Fatalf("with the object gone the summarizer was given %+v; want the user and the final assistant message", gone)
	}
}
