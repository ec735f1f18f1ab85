package triggers

import (
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas/tokens"
)

// chars4Twin counts like chars/4 but is another tokenizer to read: read decodes the
// message for it instead of scanning it.
type chars4Twin struct{}

func (chars4Twin) Count(s string) int { return tokens.Text(s) }

// TestReadScansAsItDecodes: what the trigger counts of a message read in one pass (the
// chars/4 tokenizer) is what it counts of the decoded message, and both refuse the
// same messages.
func TestReadScansAsItDecodes(t *testing.T) {
	for _, data := range []string{
		`{"role":"user","content":"Please fix the failing test in pkg/parser.","meta":{"pin":"true"}}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"dir\":\".\"}"}},{"id":"c2","type":"function","function":{"name":"cat"}}],"usage":{"prompt_tokens":4000,"completion_tokens":12},"context_generation":2}`,
		`{"role":"tool","tool_call_id":"c1","content":"a.go\nb.go\n\u00e9\ud83d\ude00","tokens":2}`,
		`{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
		`{"role":"assistant","content":"x","usage":{"prompt_tokens":10}}`,
		`{"role":"tool","content":"x"}`,
		`{"role":"user","content":"a","role":"tool","tool_call_id":"c"}`,
	} {
		scanned, serr := read([]byte(data), tokens.Chars4{})
		dec, derr := read([]byte(data), chars4Twin{})
		if (serr == nil) != (derr == nil) || serr != nil && serr.Error() != derr.Error() {
			t.Fatalf("%s: read in one pass: %v; decoded: %v", data, serr, derr)
		}
		if !reflect.DeepEqual(scanned, dec) {
			t.Errorf("%s: read in one pass\n %+v\nwant (decoded)\n %+v", data, scanned, dec)
		}
	}
}

// BenchmarkRead is what the trigger reads of each message it counts: in one pass
// (chars/4) and decoded (another tokenizer), on a tool output and an assistant message
// with tool calls. Run: go test ./triggers -bench Read -benchmem -run '^$'
func BenchmarkRead(b *testing.B) {
	msgs := map[string]string{
		"tool-output": `{"role":"tool","tool_call_id":"call_1","content":"` + strings.Repeat(`ok  \tgithub.com/x/y\t0.01s\n`, 40) + `"}`,
		"assistant-calls": `{"role":"assistant","content":"Reading both.","tool_calls":[` +
			`{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.go\"}"}},` +
			`{"id":"call_2","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"b.go\"}"}}]}`,
	}
	for name, m := range msgs {
		data := []byte(m)
		for _, c := range []struct {
			how   string
			count tokens.Counter
		}{{"scan", tokens.Chars4{}}, {"decode", chars4Twin{}}} {
			b.Run(name+"/"+c.how, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := read(data, c.count); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
