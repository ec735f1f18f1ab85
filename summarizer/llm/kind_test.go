package llm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/compactor/compactor/summarizer/summary"
)

// Every way a call fails, through the real go-openai client, is one kind of
// ErrorKinds, the one an operator would look for.
func TestErrorKind(t *testing.T) {
	status := func(code int) func(http.ResponseWriter, *http.Request) {
		return reply(code, `{"error":{"message":"nope","type":"x"}}`)
	}
	tests := []struct {
		name    string
		respond func(http.ResponseWriter, *http.Request)
		timeout time.Duration
		want    string
	}{
		{"408", status(http.StatusRequestTimeout), 0, KindTimeout},
		{"504", status(http.StatusGatewayTimeout), 0, KindTimeout},
		{"429", status(http.StatusTooManyRequests), 0, KindRateLimited},
		{"401", status(http.StatusUnauthorized), 0, KindAuth},
		{"403", status(http.StatusForbidden), 0, KindAuth},
		{"404", status(http.StatusNotFound), 0, KindNotFound},
		{"400", status(http.StatusBadRequest), 0, KindBadRequest},
		{"422", status(http.StatusUnprocessableEntity), 0, KindBadRequest},
		{"500", status(http.StatusInternalServerError), 0, KindServer},
		{"503 with an HTML body", reply(http.StatusServiceUnavailable, "<html>down</html>"), 0, KindServer},
		{"context length", reply(http.StatusBadRequest, `{"error":{"message":"maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`), 0, KindContextLength},
		{"empty summary", reply(http.StatusOK, completion(" ", "m", 1, 0)), 0, KindEmpty},
		{"truncated summary", reply(http.StatusOK, `{"model":"m","choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":"## Goal\nShip"}}]}`), 0, KindTruncated},
		{"200 with HTML", reply(http.StatusOK, "<html>proxy login</html>"), 0, KindOther},
		{"no answer within the timeout", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, 200 * time.Millisecond, KindTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, tt.respond)
			s := newSummarizer(t, Config{BaseURL: e.srv.URL, APIKey: "sk-test", Timeout: tt.timeout})
			_, err := s.Summarize(context.Background(), summary.Input{Messages: conversation()})
			if got := ErrorKind(err); got != tt.want {
				t.Errorf("ErrorKind(%v) = %q; want %q", err, got, tt.want)
			}
			if got := ErrorKind(fmt.Errorf("chunk 2 of 3: %w", err)); got != tt.want {
				t.Errorf("ErrorKind of the wrapped error = %q; want %q", got, tt.want)
			}
			if !slices.Contains(ErrorKinds, tt.want) {
				t.Errorf("%q is not in ErrorKinds", tt.want)
			}
		})
	}

	t.Run("nothing listens", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		s := newSummarizer(t, Config{BaseURL: url, APIKey: "sk-test"})
		_, err := s.Summarize(context.Background(), summary.Input{Messages: conversation()})
		if got := ErrorKind(err); got != KindNetwork {
			t.Errorf("ErrorKind(%v) = %q; want %q", err, got, KindNetwork)
		}
	})
	t.Run("the caller gave up", func(t *testing.T) {
		e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		s := newSummarizer(t, Config{BaseURL: e.srv.URL, APIKey: "sk-test"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.Summarize(ctx, summary.Input{Messages: conversation()})
		if got := ErrorKind(err); got != KindCanceled {
			t.Errorf("ErrorKind(%v) = %q; want %q", err, got, KindCanceled)
		}
	})
	if got := ErrorKind(nil); got != "" {
		t.Errorf("ErrorKind(nil) = %q; want \"\"", got)
	}
}
