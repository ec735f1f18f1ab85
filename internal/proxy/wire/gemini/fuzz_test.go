package gemini

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
)

func FuzzParseGemini(f *testing.F) {
	f.Add(cliRequest)
	f.Add(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	f.Add(`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"parts":[{"text":"a"},{"inlineData":{"mimeType":"image/png","data":"AA=="}}]},{"role":"model","parts":[{"text":"t","thought":true,"thoughtSignature":"x"},{"functionCall":{"id":"a","name":"f","args":{"b":1}},"thoughtSignature":"y"},{"functionCall":{"name":"f"}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"error":"e"}}},{"text":"z"},{"functionResponse":{"id":"a","name":"f","response":{"output":"o"},"parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}}]}},{"functionResponse":{"id":"a","name":"f","response":{}}}]}]}`)
	f.Add(`{"system_instruction":"s","contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"user","parts":[{"fileData":{"fileUri":"u"}}]},{"role":"model","parts":[]},{"role":"model"}]}`)
	files, _ := filepath.Glob(filepath.Join("testdata", "cli", "*.body.json"))
	for _, name := range files[:min(2, len(files))] {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := Gemini().Parse([]byte(body))
		if err != nil {
			return
		}
		out := wiretest.CheckBuild(t, Gemini(), req, "contents", "systemInstruction", "system_instruction")
		if out == nil {
			return
		}
		// What Build sends parses back to the same messages.
		again, err := Gemini().Parse(out)
		if err != nil {
			t.Fatalf("the built body does not parse: %v\n%s\nfrom\n%s", err, out, body)
		}
		if len(again.Messages) != len(req.Messages) {
			t.Fatalf("%d messages, then %d\n%s", len(req.Messages), len(again.Messages), out)
		}
		repeats := false
		for i := range req.Messages {
			if x := readExtra(&req.Messages[i]); x.Response != nil && len(x.Response.After) > 0 {
				repeats = true
			}
		}
		for i := range req.Messages {
			a, _ := req.Messages[i].Encode()
			b, _ := again.Messages[i].Encode()
			if repeats {
				// Build sends the copies of a response the client repeated once: the
				// messages are the same as the proxy compares them, their Extra's
				// copies and part positions aside.
				a, b = proxy.Canonical(&req.Messages[i]), proxy.Canonical(&again.Messages[i])
			}
			if string(a) != string(b) {
				t.Fatalf("message %d: %s, then %s", i, a, b)
			}
		}
	})
}

func FuzzStreamGemini(f *testing.F) {
	f.Add(wiretest.Stream(streamEvents))
	f.Add("data: {\"error\":{\"code\":500,\"message\":\"x\",\"status\":\"INTERNAL\"}}\n\n")
	f.Add("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\",\"thoughtSignature\":\"s\"},{\"text\":\"b\"},{\"executableCode\":{\"code\":\"1\"}}]},\"finishReason\":\"STOP\"}]}\n\ndata: {\"usageMetadata\":{\"promptTokenCount\":1}}\n\n")
	f.Fuzz(func(t *testing.T, stream string) { wiretest.StreamFuzz(t, Gemini(), stream) })
}
