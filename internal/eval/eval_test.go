package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
)

// writeJSONL writes msgs as a conversation file in dir.
func writeJSONL(t *testing.T, dir, name string, msgs []schemas.Message) string {
	t.Helper()
	var b strings.Builder
	for i := range msgs {
		data, err := msgs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// filler is n characters of text naming no path and no command.
func filler(n int) string { return strings.Repeat("lorem ipsum dolor sit amet ", n/27+1)[:n] }

// agentSession is a synthetic coding session with known paths, commands and changed
// files. Its last tool output alone is over the threshold of a 2,000-token window, so
// the last compaction comes after the last message: the final context is the pinned
// system prompt and the summary.
func agentSession() []schemas.Message {
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("You are a careful coding agent.")},
		{Role: schemas.RoleUser, Content: schemas.Text("Please fix the parser overflow in the keep module.")},
	}
	round := func(id, name, args, output string) {
		msgs = append(msgs,
			schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{call(id, name, args)}},
			schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(output)})
	}
	round("c1", "str_replace_editor", `{"command":"create","path":"/repo/keep.py","file_text":"x = 1"}`, filler(900))
	for k := 1; k <= 6; k++ {
		round(fmt.Sprintf("r%d", k), "bash", fmt.Sprintf(`{"command":"cat /repo/mod%d.py | head -50"}`, k), filler(1100))
	}
	round("s1", "bash", `{"command":"sed -i 's/x/y/' /repo/f2.py"}`, filler(300))
	msgs = append(msgs, schemas.Message{Role: schemas.RoleAssistant,
		Content:   schemas.Text("Fixed the parser overflow by clamping indexes; running the final check."),
		ToolCalls: []schemas.ToolCall{call("z", "bash", `{"command":"python /repo/check.py --all"}`)}})
	msgs = append(msgs, schemas.Message{Role: schemas.RoleTool, ToolCallID: "z", Content: schemas.Text(filler(7000))})
	return msgs
}

// fakeLLM is an OpenAI-compatible endpoint for the real go-openai client. A
// summarization gets a fixed summary that names one changed file and the last
// command, plus every planted fact its request holds; a probe question gets a fixed
// answer.
type fakeLLM struct {
	srv        *httptest.Server
	summaries  atomic.Int64
	probes     atomic.Int64
	fileProbes atomic.Int64
}

const fakeSummary = "Work so far: created /repo/keep.py; the last step ran python /repo/check.py --all."

var plantedRE = regexp.MustCompile(`PLANTED-[0-9A-F]{8}`)

func newFakeLLM(t *testing.T) *fakeLLM {
	f := &fakeLLM{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var reply string
		switch req.Messages[len(req.Messages)-1].Content {
		case QuestionFiles:
			f.probes.Add(1)
			reply = "/repo/keep.py\n/repo/other.py"
		case QuestionDecided:
			f.probes.Add(1)
			reply = "We fixed the parser."
		case QuestionAsked:
			f.probes.Add(1)
			reply = "The user wanted the parser overflow fixed."
		default:
			if q := req.Messages[len(req.Messages)-1].Content; strings.HasPrefix(q, "PROBE:") {
				f.fileProbes.Add(1)
				reply = "The parser overflow was fixed in keep.py; next, run check.py."
				break
			}
			f.summaries.Add(1)
			var all strings.Builder
			for _, m := range req.Messages {
				all.WriteString(m.Content)
			}
			facts := slices.Compact(slices.Sorted(slices.Values(plantedRE.FindAllString(all.String(), -1))))
			reply = fakeSummary + " " + strings.Join(facts, " ")
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "cmpl-eval", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []map[string]any{{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": reply}}},
			"usage":   map[string]int{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
		})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) summarizers(t *testing.T) func(policy.Settings) (summary.Summarizer, error) {
	s, err := llm.New(llm.Config{BaseURL: f.srv.URL, APIKey: "test", Model: "fake-model", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return func(policy.Settings) (summary.Summarizer, error) { return s, nil }
}

func runEval(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestRunKnownSurvival replays the synthetic session with the LLM summarizer (the real
// go-openai client against the fake) and the probes: what survives is known from the
// fixed summary.
func TestRunKnownSurvival(t *testing.T) {
	dir := t.TempDir()
	file := writeJSONL(t, dir, "session.jsonl", agentSession())
	f := newFakeLLM(t)
	rep := runEval(t, Config{Files: []string{file}, Strategies: []string{"all"}, Window: 2000, Plant: 2, EvidenceBudget: "0.075",
		Facts:       []string{"PARSER OVERFLOW", "never said anywhere"},
		Summarizers: f.summarizers(t), SummarizerName: "fake", Prober: NewProber(f.srv.URL, "test", "fake-model")})
	if len(rep.Conversations) != 1 || len(rep.Strategies) != 1 {
		t.Fatalf("got %d conversations, %d strategies; want 1 and 1", len(rep.Conversations), len(rep.Strategies))
	}
	c := rep.Conversations[0]
	if c.Compactions < 1 || c.SummarizerCalls < 1 {
		t.Fatalf("compactions %d, summarizer calls %d; want at least 1 each", c.Compactions, c.SummarizerCalls)
	}
	if c.SummarizerIn != 100*int64(c.SummarizerCalls) || c.SummarizerOut != 10*int64(c.SummarizerCalls) {
		t.Errorf("summarizer tokens %d+%d over %d calls; want the reported 100+10 each", c.SummarizerIn, c.SummarizerOut, c.SummarizerCalls)
	}
	if c.TokensWith >= c.TokensWithout || c.ModelTurns != 9 {
		t.Errorf("tokens with %d, without %d over %d turns; want fewer with compaction, over 9 turns", c.TokensWith, c.TokensWithout, c.ModelTurns)
	}
	// Paths: /repo/keep.py, /repo/mod1..6.py, /repo/f2.py, /repo/check.py; the summary
	// names keep.py and check.py. The evidence section (when the server writes one) can
	// only add to them.
	if c.Paths.Total != 9 || c.Paths.KeptWithoutEvidence != 2 || c.Paths.Kept < 2 {
		t.Errorf("paths %+v; want 2 of 9 kept without the evidence section", c.Paths)
	}
	// Commands: 6 cats, the sed and the check; the summary holds the check.
	if c.Commands.Total != 8 || c.Commands.KeptWithoutEvidence != 1 || c.Commands.Kept < 1 {
		t.Errorf("commands %+v; want 1 of 8 kept without the evidence section", c.Commands)
	}
	if c.EvidenceTokens == 0 && (c.Paths.Kept != 2 || c.Commands.Kept != 1) {
		t.Errorf("no evidence section, yet %d paths and %d commands kept with it; want the same 2 and 1", c.Paths.Kept, c.Commands.Kept)
	}
	// By construction (the summary's prose removed) the final context is the system
	// prompt, which names nothing, and the evidence section. Its budget, 0.075 × W = 150
	// tokens (also the cap, 15% of target × W), of which its first line takes about 55,
	// holds the changed files first (/repo/keep.py, /repo/f2.py), then the newest items
	// as far as it goes: three commands (cat /repo/mod6.py, the sed and the check) and
	// four more paths, the files those commands name among them (not listed again: the
	// commands show them, and their room goes to older paths). The planted facts are
	// only in the summary's prose.
	if c.Paths.KeptByConstruction != 6 || c.Commands.KeptByConstruction != 3 || c.Facts.KeptByConstruction != 0 {
		t.Errorf("by construction %d paths, %d commands, %d facts; want 6, 3 and 0", c.Paths.KeptByConstruction,
			c.Commands.KeptByConstruction, c.Facts.KeptByConstruction)
	}
	for _, k := range []Count{c.Paths, c.Commands, c.Facts} {
		if k.KeptByConstruction > k.Kept {
			t.Errorf("%+v: more kept by construction than with the summary; want at most as many", k)
		}
	}
	// Facts: the 2 planted (the summary carries them) and "parser overflow" (in the
	// history, not in the summary); the fact never said is not counted.
	if c.Facts.Total != 3 || c.Facts.Kept != 2 || !slices.Equal(c.Facts.Lost, []string{"PARSER OVERFLOW"}) {
		t.Errorf("facts %+v; want the 2 planted kept and PARSER OVERFLOW lost", c.Facts)
	}
	if c.BrokenToolPairs != 0 || c.MissingPinned != 0 {
		t.Errorf("broken tool pairs %d, missing pinned %d; want 0", c.BrokenToolPairs, c.MissingPinned)
	}
	if c.Probes == nil {
		t.Fatal("no probe scores")
	}
	want := ProbeScores{FilesRecall: 0.5, FilesPrecision: 0.5, Decided: 2.0 / 7, Asked: 0.5}
	got := *c.Probes
	got.Answers = [3]string{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("probe scores %+v; want %+v", got, want)
	}
	if n := f.probes.Load(); n != 3 {
		t.Errorf("%d probe calls; want 3", n)
	}
	s := rep.Strategies[0]
	if s.Paths.MicroWithoutEvidence != 2.0/9 || s.Commands.MicroWithoutEvidence != 1.0/8 || s.Compacted != 1 || s.Probes == nil ||
		s.Probes.FilesRecall != 0.5 || s.EvidenceShareMax != float64(c.EvidenceTokens)/(0.5*2000) {
		t.Errorf("strategy %+v; want its figures to be the conversation's", s)
	}
	for _, k := range []struct {
		name string
		v    Survival
		want float64
	}{{"paths", s.Paths, 6.0 / 9}, {"commands", s.Commands, 3.0 / 8}, {"facts", s.Facts, 0}} {
		if k.v.KeptByConstruction != int(k.want*float64(k.v.Total)+0.5) || k.v.MicroByConstruction != k.want ||
			k.v.MacroByConstruction != k.want || k.v.CompactedMicroByConstruction != k.want {
			t.Errorf("%s %+v; want %.3f by construction (micro, macro, compacted): the conversation's", k.name, k.v, k.want)
		}
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"22.2%", "12.5%", "66.7%", "37.5%", "by construction", "files recall", "summarizer: fake"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"| all | 1 of 1 |", " (22.2%) | ", "| all | 66.7% | 66.7% | 66.7% | 37.5% | 37.5% | 37.5% | 0.0% |",
		"9 distinct paths, 8 distinct commands, 3 facts"} {
		if !strings.Contains(md.String(), w) {
			t.Errorf("markdown lacks %q:\n%s", w, md.String())
		}
	}
}

// TestRunByConstructionEvidenceOff replays the synthetic session with the extractive
// summarizer and evidence_budget 0: the final context is the pinned system prompt and the
// summary, so what the summary quotes is kept, and nothing by construction.
func TestRunByConstructionEvidenceOff(t *testing.T) {
	file := writeJSONL(t, t.TempDir(), "session.jsonl", agentSession())
	rep := runEval(t, Config{Files: []string{file}, Strategies: []string{"all"}, Window: 2000, Plant: 1, EvidenceBudget: "0"})
	c := rep.Conversations[0]
	if c.Compactions == 0 || c.EvidenceTokens != 0 {
		t.Fatalf("compactions %d, evidence tokens %d; want compacted without an evidence section", c.Compactions, c.EvidenceTokens)
	}
	for _, k := range []struct {
		name string
		c    Count
	}{{"paths", c.Paths}, {"commands", c.Commands}, {"facts", c.Facts}} {
		if k.c.Kept == 0 || k.c.KeptWithoutEvidence != k.c.Kept || k.c.KeptByConstruction != 0 {
			t.Errorf("%s %+v; want some kept by the extractive summary, the same without evidence, none by construction", k.name, k.c)
		}
	}
	if s := rep.Strategies[0]; s.Paths.MicroByConstruction != 0 || s.Commands.CompactedMicroByConstruction != 0 || s.Facts.MacroByConstruction != 0 {
		t.Errorf("strategy %+v; want 0 by construction", s)
	}
}

// TestRunStrategiesKeepInvariants replays several sessions with every default
// strategy, extractive, and checks the invariants in every context read.
func TestRunStrategiesKeepInvariants(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		msgs := agentSession()
		// Parallel calls: two results for one assistant message.
		msgs = slices.Insert(msgs, 2, schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			call("p1", "bash", `{"command":"ls /repo/a.py"}`), call("p2", "bash", `{"command":"ls /repo/b.py"}`)}},
			schemas.Message{Role: schemas.RoleTool, ToolCallID: "p2", Content: schemas.Text(filler(800))},
			schemas.Message{Role: schemas.RoleTool, ToolCallID: "p1", Content: schemas.Text(filler(800))},
			schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("session %d goes on", i))})
		writeJSONL(t, dir, fmt.Sprintf("s%d.jsonl", i), msgs)
	}
	files, err := Expand([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var calls, last atomic.Int64
	progress := func(done, total int) {
		calls.Add(1)
		if done == total {
			last.Store(int64(total))
		}
	}
	rep := runEval(t, Config{Files: files, Window: 2000, Concurrency: 4, Progress: progress})
	if want := int64(3 * len(DefaultStrategies)); calls.Load() != want || last.Load() != want {
		t.Errorf("progress heard %d times, last total %d; want %d replays reported", calls.Load(), last.Load(), want)
	}
	if len(rep.Strategies) != len(DefaultStrategies) || len(rep.Conversations) != 3*len(DefaultStrategies) {
		t.Fatalf("got %d strategies, %d replays; want %d and %d", len(rep.Strategies), len(rep.Conversations),
			len(DefaultStrategies), 3*len(DefaultStrategies))
	}
	if rep.Broken() != 0 {
		t.Errorf("%d broken tool pairs or missing pinned messages; want 0", rep.Broken())
	}
	for _, s := range rep.Strategies {
		if s.Skipped != 0 {
			t.Errorf("%s: the reader skipped %d messages of valid sessions; want 0", s.Strategy, s.Skipped)
		}
		if s.Compacted != 3 || s.TokensWith >= s.TokensWithout || s.SummarizerIn == 0 {
			t.Errorf("%s: compacted %d of 3, tokens %d with vs %d without, summarizer in %d; want every session compacted, fewer tokens",
				s.Strategy, s.Compacted, s.TokensWith, s.TokensWithout, s.SummarizerIn)
		}
		if s.Paths.Total != 3*11 || s.Paths.Kept == 0 {
			t.Errorf("%s: paths %d kept of %d; want some of 33 kept", s.Strategy, s.Paths.Kept, s.Paths.Total)
		}
		// The evidence section is on (the default budget): it keeps some paths whatever
		// the summary says, and never more than the whole context does.
		if s.Paths.KeptByConstruction == 0 || s.Paths.KeptByConstruction > s.Paths.Kept || s.Commands.KeptByConstruction > s.Commands.Kept {
			t.Errorf("%s: by construction %d of %d paths kept (%d with the summary), %d of %d commands (%d); want some paths, at most as many as with the summary",
				s.Strategy, s.Paths.KeptByConstruction, s.Paths.Total, s.Paths.Kept, s.Commands.KeptByConstruction, s.Commands.Total, s.Commands.Kept)
		}
	}
	if !strings.Contains(rep.SummaryTokens, "estimated") {
		t.Errorf("summarizer tokens %q; want them said to be estimated", rep.SummaryTokens)
	}
}

// TestRunOnServer replays on a server the caller names, in a namespace of its own that
// is gone afterwards.
func TestRunOnServer(t *testing.T) {
	srv := jstest.ServerWith(t, nil)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Somebody else's stream, named much like a run's: it must outlive the run.
	const foreign = "EVAL_SOMEONE_ELSES_CHAT"
	if _, err := js.CreateStream(context.Background(), natsjs.StreamConfig{Name: foreign, Subjects: []string{"eval.others.>"}}); err != nil {
		t.Fatal(err)
	}
	file := writeJSONL(t, t.TempDir(), "a.jsonl", agentSession())
	rep := runEval(t, Config{Files: []string{file}, Strategies: []string{"keep-last-n"}, Window: 2000, NATSURL: srv.ClientURL()})
	if !strings.Contains(rep.Server, "namespace eval") || rep.Conversations[0].Compactions == 0 {
		t.Errorf("server %q, compactions %d; want a namespace and a compaction", rep.Server, rep.Conversations[0].Compactions)
	}
	names := js.StreamNames(context.Background())
	var left []string
	for n := range names.Name() {
		left = append(left, n)
	}
	if !slices.Equal(left, []string{foreign}) {
		t.Errorf("streams left on the server: %q; want only %s, which was not the run's", left, foreign)
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	good := writeJSONL(t, dir, "good.jsonl", agentSession())
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"role\":\"user\",\"content\":\"x\"}\n{\"role\":\"user\",\"content\":5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want error
		text string
	}{
		{"unknown strategy", Config{Files: []string{good}, Strategies: []string{"newest"}}, ErrConfig, `unknown strategy "newest"`},
		{"small window", Config{Files: []string{good}, Window: 10}, ErrConfig, "context_window"},
		{"bad line", Config{Files: []string{good, bad}}, ErrBadInput, "bad.jsonl:2:"},
		{"no files", Config{}, ErrNoInput, "no conversation"},
	}
	for _, tt := range tests {
		_, err := Run(context.Background(), tt.cfg)
		if err == nil || !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("%s: got %v; want %v naming %q", tt.name, err, tt.want, tt.text)
		}
	}
	// evidence_budget is passed through as a policy knob: refused while the policy does
	// not know the key, accepted once it does.
	cfg := Config{Files: []string{good}, EvidenceBudget: "0.1"}
	err := cfg.Validate()
	if _, known := policy.Lookup("evidence_budget"); known && err != nil {
		t.Errorf("evidence_budget 0.1: %v; want it accepted", err)
	} else if !known && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "evidence_budget")) {
		t.Errorf("evidence_budget unknown to the policy: got %v; want ErrConfig naming it", err)
	}
	if _, err := Expand([]string{t.TempDir()}); !errors.Is(err, ErrNoInput) {
		t.Errorf("an empty directory: got %v; want ErrNoInput", err)
	}
}
