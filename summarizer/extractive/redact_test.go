package extractive_test

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/summary"
)

// TestSummarizeRedacts: the fallback summary quotes no secret: not from a user
// message, a tool call's arguments, a tool result, nor one that runs across the point
// where a quote is cut (a secret cut short is not a redacted one), nor from an earlier
// extractive summary written before secrets were redacted.
func TestSummarizeRedacts(t *testing.T) {
	const (
		ant = "sk-ant-api03-Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz"
		gh  = "ghp_4fR8tY2uI6oP0aS3dF7gH1jK5lZ9xC2vB6nM"
	)
	// The key starts 10 characters before the 120 a result's quote shows.
	cutResult := strings.Repeat("x ", 55) + ant + " done"
	prev := "Extractive summary, written without an LLM: excerpts of 1 message in order.\n" +
		`- user: "my token is ` + gh + `"`
	got := summarize(t, summary.Input{PreviousSummary: prev, MaxSummaryTokens: 4000, Messages: []schemas.Message{
		user("use https://bob:hunter22pw@db.example.com/x?api_key=k3y5678 please"),
		call("c1", "bash", `{"command":"curl -H \"Authorization: Bearer tok123456789\" https://api.example.com"}`),
		tool("c1", "export OPENAI_API_KEY=sk-proj-Zq3xT9vLm2Kp8RwY4bNc7Hd1Jf6Gs0Ae"),
		call("c2", "bash", `{"command":"cat out.txt"}`),
		tool("c2", cutResult),
	}})
	for _, s := range []string{"hunter22pw", "k3y5678", "tok123456789", "Zq3xT9vLm2", "sk-ant", "api03", gh[4:12]} {
		if strings.Contains(got, s) {
			t.Errorf("summary holds %q:\n%s", s, got)
		}
	}
	if !strings.Contains(got, "[redacted]") || !strings.Contains(got, "db.example.com") {
		t.Errorf("summary:\n%s", got)
	}
}
