package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/eval"
	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream/jstest"
)

// evalSession is a small coding session as JSONL that compacts at a 2,000-token window.
func evalSession(t *testing.T, dir, name string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"role":"system","content":"You are a coding agent."}` + "\n")
	b.WriteString(`{"role":"user","content":"Fix the flaky test in the cache package."}` + "\n")
	for k := range 8 {
		fmt.Fprintf(&b, `{"role":"assistant","content":"","tool_calls":[{"id":"c%d","type":"function","function":{"name":"bash","arguments":"{\"command\":\"cat /repo/cache/file%d.go\"}"}}]}`+"\n", k, k)
		fmt.Fprintf(&b, `{"role":"tool","tool_call_id":"c%d","content":"%s"}`+"\n", k, strings.Repeat("package cache // filler ", 50))
	}
	b.WriteString(`{"role":"assistant","content":"The flaky test is fixed."}` + "\n")
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvalJSON(t *testing.T) {
	testEnv(t, 128000)
	dir := t.TempDir()
	evalSession(t, dir, "a.jsonl")
	evalSession(t, dir, "b.jsonl")
	out, errOut, err := cli(t, "", "eval", dir, "--strategy", "keep-last-n", "--strategy", "tool-rounds", "--window", "2000", "--plant", "1", "--json")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "extractive (no LLM endpoint configured") {
		t.Errorf("stderr %q; want it to say the extractive summarizer runs", errOut)
	}
	var rep eval.Report
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&rep); err != nil || dec.More() {
		t.Fatalf("printed %q; want one JSON document (%v)", out, err)
	}
	if rep.Files != 2 || len(rep.Strategies) != 2 || rep.Strategies[1].Strategy != "tool-rounds" || rep.Window != 2000 {
		t.Fatalf("report %+v; want 2 files and the 2 strategies asked for at W=2000", rep)
	}
	for _, s := range rep.Strategies {
		if s.Compacted != 2 || s.Paths.Total != 16 || s.Facts.Total != 2 || s.BrokenToolPairs != 0 || s.MissingPinned != 0 {
			t.Errorf("%s: %+v; want both compacted, 16 paths, 2 planted facts, nothing broken", s.Strategy, s)
		}
		if p := s.Paths; p.KeptByConstruction == 0 || p.KeptByConstruction > p.Kept || p.MicroByConstruction != float64(p.KeptByConstruction)/16 {
			t.Errorf("%s: paths %+v; want some kept by construction (the evidence section), at most the kept ones, micro of 16", s.Strategy, p)
		}
	}
	for _, key := range []string{`"kept_by_construction"`, `"micro_by_construction"`, `"macro_by_construction"`, `"compacted_micro_by_construction"`} {
		if !strings.Contains(out, key) {
			t.Errorf("the JSON lacks %s", key)
		}
	}
	if !strings.HasPrefix(rep.Command, "compactor eval ") || !strings.Contains(rep.Probes, "off") {
		t.Errorf("command %q, probes %q; want the command line and probes off", rep.Command, rep.Probes)
	}
}

func TestEvalWithLLMProbes(t *testing.T) {
	testEnv(t, 128000)
	f := fakellm.New(t)
	t.Setenv("COMPACTOR_LLM_BASE_URL", f.URL())
	t.Setenv("COMPACTOR_LLM_API_KEY", "test-key")
	file := evalSession(t, t.TempDir(), "a.jsonl")
	out, errOut, err := cli(t, "", "eval", file, "--strategy", "keep-last-n", "--window", "2000")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "summarizer: LLM") || !strings.Contains(out, "files recall") {
		t.Errorf("stderr %q, stdout:\n%s\nwant the LLM named and the probe table", errOut, out)
	}
	// The probes asked the fake as well as the summaries: three questions more.
	if got := f.AllInputs(); !strings.Contains(got, eval.QuestionFiles) || !strings.Contains(got, eval.QuestionAsked) {
		t.Errorf("the LLM was not asked the probe questions; inputs:\n%.500s", got)
	}
}

func TestEvalRefuses(t *testing.T) {
	testEnv(t, 128000)
	dir := t.TempDir()
	good := evalSession(t, dir, "good.jsonl")
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"wizard\",\"content\":\"x\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"eval", good, "--strategy", "newest"}, exitUsage, `--strategy: unknown strategy "newest"`},
		{[]string{"eval", empty}, exitUsage, "no *.jsonl file in directory"},
		{[]string{"eval", filepath.Join(dir, "missing.jsonl")}, exitError, "missing.jsonl"},
		{[]string{"eval", good, "--window", "10"}, exitUsage, "--window: must be at least 1000"},
		{[]string{"eval", good, "--plant", "1000"}, exitUsage, "--plant: must be 0 to 100"},
		{[]string{"eval", good, "--evidence-budget", "lots"}, exitUsage, "--evidence-budget"},
		{[]string{"eval", good, bad}, exitUsage, "bad.jsonl:2:"}, // an invalid message, like a bad flag, needs a change
		{[]string{"eval", good, "--rungs", "mask,fold"}, exitUsage, `--rungs: unknown rungs "fold"`},
		{[]string{"eval", good, "--rungs", "mask,mask"}, exitUsage, `--rungs: "mask" named twice`},
		{[]string{"eval", good, "--probes", bad}, exitUsage, "--probes:"},
		{[]string{"eval", good, "--prices", bad}, exitUsage, "--prices:"},
		{[]string{"eval", good, "--prices", "../../examples/prices.json", "--model", "no-such-model"}, exitUsage, `prices no model "no-such-model"`},
		{[]string{"eval", good, "--turn-gap", "-1s"}, exitUsage, "--turn-gap must not be negative"},
	} {
		_, _, err := cli(t, "", tc.args...)
		if exitCode(err) != tc.exit || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (exit %d); want exit %d saying %q", tc.args, err, exitCode(err), tc.exit, tc.want)
		}
	}
}

// TestEvalRungs compares the three rungs under the policy's strategy with the
// example price table and probe file: one arm per rung, priced, the cost table and
// one line saying the probes are skipped (no LLM endpoint).
func TestEvalRungs(t *testing.T) {
	testEnv(t, 128000)
	file := evalSession(t, t.TempDir(), "a.jsonl")
	out, errOut, err := cli(t, "", "eval", file, "--rungs", "all", "--window", "2000", "--prices", "../../examples/prices.json",
		"--model", "claude-sonnet-4-5", "--probes", "../../examples/probes.json")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	if n := strings.Count(errOut, "skipped: no LLM endpoint configured"); n != 1 || !strings.Contains(errOut, "examples/probes.json") {
		t.Errorf("stderr %q; want one line saying the probes (and the file's) are skipped", errOut)
	}
	for _, want := range []string{"keep-last-n summary", "keep-last-n mask", "keep-last-n mask-then-summary", "prefix identical",
		"Cost in US dollars (the sent tokens at claude-sonnet-4-5's prices", "with cache", eval.Baselines} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
	if _, err := eval.ReadProbes("../../examples/probes.json"); err != nil {
		t.Errorf("the example probe file: %v", err)
	}
}

// Outside a clone, eval with no argument has nothing to read and says what to give it.
func TestEvalWithNoArgumentOutsideAClone(t *testing.T) {
	testEnv(t, 128000)
	t.Chdir(t.TempDir())
	_, _, err := cli(t, "", "eval")
	if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "name a directory or a JSONL file") {
		t.Errorf("eval with no argument outside a clone: %v (exit %d); want exit %d naming what to give", err, exitCode(err), exitUsage)
	}
}

func TestEvalOnNamedServer(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.ServerWith(t, nil)
	file := evalSession(t, t.TempDir(), "a.jsonl")
	out, errOut, err := cli(t, "", "eval", file, "--strategy", "keep-last-n", "--window", "2000", "--nats-url", srv.ClientURL(), "--json")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	var rep eval.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Server, "--nats-url") || rep.Strategies[0].Compacted != 1 {
		t.Errorf("server %q, compacted %d; want the named server and the conversation compacted", rep.Server, rep.Strategies[0].Compacted)
	}
}

// An LLM that always fails does not stall eval: the run ends (the final read does not
// wait out --turn-wait), no summary is counted as the LLM's, a fallback result would be
// reported as one, the failed probes are reported, and the tool pairs stay whole.
func TestEvalWithFailingLLM(t *testing.T) {
	testEnv(t, 128000)
	f := fakellm.New(t)
	f.Set(func(f *fakellm.LLM) { f.Status = 500 })
	t.Setenv("COMPACTOR_LLM_BASE_URL", f.URL())
	t.Setenv("COMPACTOR_LLM_API_KEY", "test-key")
	file := evalSession(t, t.TempDir(), "a.jsonl")
	out, errOut, err := cli(t, "", "eval", file, "--strategy", "keep-last-n", "--window", "2000", "--json")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	var rep eval.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Conversations[0]
	if c.SummarizerCalls != 0 && !c.Fallback {
		t.Errorf("%+v: want no successful LLM summary", c)
	}
	if c.Compactions > 0 && (!c.Fallback || rep.Strategies[0].Fallbacks != 1) {
		t.Errorf("compactions %d, fallback %v, fallbacks %d; want a fallback result reported", c.Compactions, c.Fallback, rep.Strategies[0].Fallbacks)
	}
	if rep.Broken() != 0 {
		t.Errorf("%d broken; want 0", rep.Broken())
	}
	if p := rep.Strategies[0].Probes; p == nil || p.Failed != 1 || p.Conversations != 0 || !strings.Contains(c.ProbeError, "500") {
		t.Errorf("probes %+v, error %q; want the failed probe reported", p, c.ProbeError)
	}
}

// --cache-ttl 0 means a provider that caches nothing, as COMPACTOR_PROXY_CACHE_TTL=0
// does for the proxy; without the flag eval takes the proxy's setting. Before, 0 given
// was taken as no flag: the proxy's 5 minutes.
func TestEvalCacheTTLZeroMeansNoCache(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"no flag: the proxy's default", nil, nil, 5 * time.Minute},
		{"no flag: the proxy's setting", nil, map[string]string{"COMPACTOR_PROXY_CACHE_TTL": "1h"}, time.Hour},
		{"the proxy's setting of 0", nil, map[string]string{"COMPACTOR_PROXY_CACHE_TTL": "0s"}, eval.NoCache},
		{"--cache-ttl 0", []string{"--cache-ttl", "0s"}, nil, eval.NoCache},
		{"--cache-ttl 0 over the proxy's setting", []string{"--cache-ttl", "0s"}, map[string]string{"COMPACTOR_PROXY_CACHE_TTL": "1h"}, eval.NoCache},
		{"--cache-ttl 30m", []string{"--cache-ttl", "30m"}, nil, 30 * time.Minute},
	} {
		fs := newFlagSet("eval")
		f := defineEvalFlags(fs)
		if _, err := fs.parse(tt.args); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		c := &call{cmd: evalCommand, lookup: func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }}
		cfg, err := evalConfig(c, f, nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if cfg.CacheTTL != tt.want {
			t.Errorf("%s: CacheTTL %s, want %s", tt.name, cfg.CacheTTL, tt.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: the config does not validate: %v", tt.name, err)
		}
	}
}
