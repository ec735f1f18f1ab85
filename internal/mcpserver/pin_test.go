package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/mcpserver"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// withService runs the compactor service (which sets policies) on f's store until the
// test ends.
func (f *fixture) withService(t *testing.T) {
	t.Helper()
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{}, f.nc, f.st, basePolicies{r}, r.Resolve, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for {
		if _, err := f.cl.Policy(ctxFor(t), schemas.PolicyRequest{Conversation: "probe"}); err == nil {
			return
		} else if ctxFor(t).Err() != nil || !strings.Contains(err.Error(), "no compactor service") && !strings.Contains(err.Error(), "no responders") {
			t.Fatalf("the compactor service: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type basePolicies struct{ r *policy.Resolver }

func (p basePolicies) Settings(context.Context, string) (policy.Settings, error) {
	return p.r.Base(), nil
}

// pins reads conv's pins policy key.
func (f *fixture) pins(t *testing.T, conv string) []uint64 {
	t.Helper()
	p, err := f.cl.Policy(ctxFor(t), schemas.PolicyRequest{Conversation: conv})
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := policy.ParsePins(p.Policy[policy.PinsKey])
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// The pin tool is listed only when the operator allows it, marked as a tool that writes
// (additively, idempotently), its seq at least 1; without it the server is read-only.
func TestPinToolListedOnlyWhenAllowed(t *testing.T) {
	f := newFixture(t)
	for _, allow := range []bool{false, true} {
		cs := f.fn(mcpserver.Config{Conversation: "c1", AllowPin: allow})
		lt, err := cs.ListTools(ctxFor(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range lt.Tools {
			names = append(names, tool.Name)
			if tool.Name != mcpserver.PinTool {
				continue
			}
			a := tool.Annotations
			if a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint || !a.IdempotentHint {
				t.Errorf("pin annotations %+v; want a tool that writes, additively and idempotently", a)
			}
			b, _ := json.Marshal(tool.InputSchema)
			var sc struct {
				Properties map[string]struct {
					Type    string   `json:"type"`
					Minimum *float64 `json:"minimum"`
				} `json:"properties"`
				Required []string `json:"required"`
			}
			if err := json.Unmarshal(b, &sc); err != nil {
				t.Fatal(err)
			}
			if p := sc.Properties["seq"]; p.Type != "integer" || p.Minimum == nil || *p.Minimum != 1 || !slices.Equal(sc.Required, []string{"seq"}) {
				t.Errorf("pin input schema %s; want seq, a required integer of at least 1", b)
			}
		}
		want := []string{"recall", "status"}
		if allow {
			want = []string{"pin", "recall", "status"}
		}
		if !slices.Equal(names, want) {
			t.Fatalf("allow pin %v: tools %v; want %v", allow, names, want)
		}
		if !allow {
			if _, err := cs.CallTool(ctxFor(t), &mcp.CallToolParams{Name: "pin", Arguments: map[string]any{"seq": 1}}); err == nil || !strings.Contains(err.Error(), `unknown tool "pin"`) {
				t.Fatalf("pin on a read-only server: %v; want unknown tool", err)
			}
		}
	}
}

// pin adds a message to its conversation's pins: a message of a tool round pins the
// whole round (the call and all its results), read with the recall operation; pinning
// again writes nothing; another conversation's sequence, a round still waiting for a
// result, an unknown and a forgotten conversation are tool errors that say which.
func TestPinPinsAWholeToolRound(t *testing.T) {
	f := newFixture(t)
	f.withService(t)
	const conv = "mcp-pin"
	seqs := f.publish(t, conv,
		`{"role":"user","content":"read both files"}`,
		`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}},{"id":"b","type":"function","function":{"name":"read","arguments":"{\"path\":\"b.go\"}"}}]}`,
		`{"role":"tool","tool_call_id":"a","content":"package a"}`)
	other := f.publish(t, "mcp-elsewhere", `{"role":"user","content":"not this conversation"}`)
	seqs = append(seqs, f.publish(t, conv,
		`{"role":"tool","tool_call_id":"b","content":"package b"}`,
		`{"role":"assistant","content":"both read"}`,
		`{"role":"user","content":"remember: the deadline is friday"}`,
		`{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"read","arguments":"{}"}}]}`)...)
	cs := f.fn(mcpserver.Config{Conversation: conv, AllowPin: true})

	var got mcpserver.Pinned
	decode(t, call(t, cs, "pin", map[string]any{"seq": seqs[3]}), &got)
	round := []uint64{seqs[1], seqs[2], seqs[3]}
	if !slices.Equal(got.Seqs, round) || !slices.Equal(got.Pins, round) || got.AlreadyPinned || got.MaxPins != policy.MaxPins ||
		!strings.Contains(got.Note, "next compaction") {
		t.Fatalf("pin of a result = %+v; want its round %v pinned", got, round)
	}
	if p := f.pins(t, conv); !slices.Equal(p, round) {
		t.Fatalf("pins key %v; want %v", p, round)
	}
	got = mcpserver.Pinned{}
	decode(t, call(t, cs, "pin", map[string]any{"seq": seqs[1]}), &got)
	if !got.AlreadyPinned || !slices.Equal(got.Pins, round) {
		t.Fatalf("pin of the round's call again = %+v; want already pinned", got)
	}
	got = mcpserver.Pinned{}
	decode(t, call(t, cs, "pin", map[string]any{"seq": seqs[5]}), &got)
	if !slices.Equal(got.Seqs, []uint64{seqs[5]}) || len(got.Pins) != 4 {
		t.Fatalf("pin of a single message = %+v", got)
	}
	wantError(t, call(t, cs, "pin", map[string]any{"seq": other[0]}), fmt.Sprintf("seq %d is not a message of conversation %s", other[0], conv))
	wantError(t, call(t, cs, "pin", map[string]any{"seq": 9999}), "seq 9999 is not a message of conversation")
	wantError(t, call(t, cs, "pin", map[string]any{"seq": seqs[6]}), "its tool round is not whole")
	wantError(t, call(t, cs, "pin", map[string]any{"seq": 0}), "seq")
	if p := f.pins(t, conv); len(p) != 4 {
		t.Fatalf("pins key %v after the refused calls; want the 4 pinned before", p)
	}

	f.publish(t, "gone", `{"role":"user","content":"forget me"}`)
	if _, err := f.st.Forget(ctxFor(t), "gone"); err != nil {
		t.Fatal(err)
	}
	anyConv := f.fn(mcpserver.Config{AnyConversation: true, AllowPin: true})
	wantError(t, call(t, anyConv, "pin", map[string]any{"conversation": "never-here", "seq": 1}), "conversation never-here not found")
	wantError(t, call(t, anyConv, "pin", map[string]any{"conversation": "gone", "seq": 1}), "conversation gone was forgotten at")
}

// A conversation pins at most policy.MaxPins messages: a round that would pass the cap
// is refused whole, with the count, and nothing is written; a single message still fits.
func TestPinCap(t *testing.T) {
	f := newFixture(t)
	f.withService(t)
	const conv = "mcp-cap"
	seqs := f.publish(t, conv,
		`{"role":"user","content":"go"}`,
		`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}}]}`,
		`{"role":"tool","tool_call_id":"a","content":"a.go"}`,
		`{"role":"assistant","content":"done"}`)
	held := make([]uint64, policy.MaxPins-1)
	for i := range held {
		held[i] = uint64(100_000 + i)
	}
	if _, err := f.cl.Policy(ctxFor(t), schemas.PolicyRequest{Conversation: conv, Set: map[string]any{policy.PinsKey: policy.FormatPins(held)}}); err != nil {
		t.Fatal(err)
	}
	cs := f.fn(mcpserver.Config{Conversation: conv, AllowPin: true})
	wantError(t, call(t, cs, "pin", map[string]any{"seq": seqs[2]}), fmt.Sprintf("needs 2 more pins (%d, %d), and conversation %s has 63 of at most 64", seqs[1], seqs[2], conv))
	if p := f.pins(t, conv); len(p) != policy.MaxPins-1 {
		t.Fatalf("%d pins after the refused call; want %d", len(p), policy.MaxPins-1)
	}
	var got mcpserver.Pinned
	decode(t, call(t, cs, "pin", map[string]any{"seq": seqs[3]}), &got)
	if len(got.Pins) != policy.MaxPins || !slices.Contains(got.Pins, seqs[3]) {
		t.Fatalf("pin of one more message = %+v; want the 64th pin", got)
	}
	wantError(t, call(t, cs, "pin", map[string]any{"seq": seqs[0]}), "has 64 of at most 64")
}
