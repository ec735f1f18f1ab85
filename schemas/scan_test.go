package schemas_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// TestScanCorpus runs every message of every corpus transcript, as its file holds it and
// as the client encodes it, through ScanMessage and DecodeMessage (checkScan), and
// requires the one-pass reader to read each one alone.
func TestScanCorpus(t *testing.T) {
	convs := corpustest.Load(t)
	n := 0
	for _, c := range convs {
		for _, line := range corpusLines(t, c.Name) {
			checkScan(t, line)
			n++
			if _, sure := schemas.ScanFast(line); !sure {
				t.Errorf("%s: %s is left to DecodeMessage; want it read in one pass", c.Name, line)
			}
		}
		for _, m := range c.Messages() {
			data, err := m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			checkScan(t, data)
			if _, sure := schemas.ScanFast(data); !sure {
				t.Errorf("%s: %s is left to DecodeMessage; want it read in one pass", c.Name, data)
			}
		}
	}
	t.Logf("%d corpus messages scanned", n)
}

// corpusLines returns the non-blank lines of a corpus file.
func corpusLines(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(corpustest.Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			out = append(out, bytes.Clone(sc.Bytes()))
		}
	}
	return out
}

// scanBenchMessages are the shapes of the messages a trigger counts.
var scanBenchMessages = []struct{ name, json string }{
	{"user-short", `{"role":"user","content":"Please fix the failing test in pkg/parser and run the suite again."}`},
	{"tool-output-8KB", `{"role":"tool","tool_call_id":"call_oYHDxU9tCZvK72L28iJya8HK","content":"` +
		strings.Repeat(`=== RUN   TestParse/case_17\n--- PASS: TestParse/case_17 (0.00s)\n\tparser_test.go:42: ok \"x\"\n`, 100) + `"}`},
	{"assistant-tool-calls", `{"role":"assistant","content":"Let me look at the files.","tool_calls":[` +
		`{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"pkg/parser/parse.go\",\"start\":1,\"end\":200}"}},` +
		`{"id":"call_2","type":"function","function":{"name":"run","arguments":"{\"cmd\":\"go test ./pkg/parser/ -run TestParse -count=1\"}"}}],` +
		`"usage":{"prompt_tokens":48211,"completion_tokens":113},"context_generation":3}`},
	{"parts-image", `{"role":"user","content":[{"type":"text","text":"What does this screenshot show?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 200) + `","detail":"high"}}]}`},
}

// BenchmarkScanMessage compares, per message, what the trigger did (DecodeMessage and
// tokens.MessageWith with chars/4) with ScanMessage and tokens.Scanned.
// Run: go test ./schemas -bench ScanMessage -benchmem -run '^$'
func BenchmarkScanMessage(b *testing.B) {
	for _, m := range scanBenchMessages {
		data := []byte(m.json)
		if _, sure := schemas.ScanFast(data); !sure {
			b.Fatalf("%s is not read in one pass", m.name)
		}
		b.Run(m.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				msg, err := schemas.DecodeMessage(data)
				if err != nil {
					b.Fatal(err)
				}
				_ = tokens.MessageWith(tokens.Chars4{}, &msg)
			}
		})
		b.Run(m.name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				s, err := schemas.ScanMessage(data)
				if err != nil {
					b.Fatal(err)
				}
				_ = tokens.Scanned(&s)
			}
		})
	}
}
