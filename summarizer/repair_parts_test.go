package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
)

type rawRecorder struct {
	windowRecorder
	mu  sync.Mutex
	raw []int
}

func (r *rawRecorder) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	if !r.down.Load() {
		n := 0
		for _, m := range in.Messages {
			n += len(m.Content.Raw())
		}
		r.mu.Lock()
		r.raw = append(r.raw, n)
		r.mu.Unlock()
	}
	return r.windowRecorder.Summarize(ctx, in)
}

// A repair holds at most its window of the covered messages at once, images included:
// a message weighs its content as stored, every part (an outside review found messages
// with images weighing nothing, so one window held them all).
func TestRepairWindowWeighsNonTextParts(t *testing.T) {
	const bound = 4000
	summarizer.SetRepairWindowBytes(t, bound)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img := `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 20_000) + `"}}`
	for i := range 20 {
		text, _ := json.Marshal(map[string]string{"type": "text", "text": fmt.Sprintf("screenshot %d", i)})
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(text, json.RawMessage(img))}
		if i%2 == 1 {
			m = schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(fmt.Sprintf("seen %d", i))}
		}
		data, _ := m.Encode()
		if _, err := st.Chat().Publish(ctx, "ri", data, ""); err != nil {
			t.Fatal(err)
		}
	}
	sum := &rawRecorder{}
	sum.down.Store(true)
	needles := map[uint64]string{}
	last := needleMessages(t, ctx, st, "ri", "w", 0, 10, needles)
	wide := settings(func(s *policy.Settings) { s.SummarizerContextWindow = 200_000 })
	startPool(t, st, sum, wide, 2)
	req := request(t, ctx, st, "ri", last)
	if ev, err := st.Events().WaitOutcome(ctx, "ri", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "ri", true)
	if err != nil || v1 == nil || !v1.Fallback {
		t.Fatalf("value %+v, %v; want a fallback", v1, err)
	}
	t.Logf("fallback covers %d..%d", v1.FirstSeq, v1.CoveredThroughSeq)
	sum.down.Store(false)
	waitValue(t, ctx, st, "ri", "the repair", func(v *schemas.Result) bool { return v.RepairOf == v1.Generation })
	sum.mu.Lock()
	defer sum.mu.Unlock()
	for _, n := range sum.raw {
		if n > bound+25_000 {
			t.Fatalf("a repair call held %d bytes of message content (calls %v); the bound is %d plus one message", n, sum.raw, bound)
		}
	}
	t.Logf("calls %v", sum.raw)
}
