package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/summarizer/summary"
)

// The endpoint misbehaving in every way it can, spoken to by the real go-openai client:
// each failure is an error (never a summary), classified for the worker's retries, and
// carries the wait the endpoint asked for when it asked for one.
func TestMisbehavingEndpoint(t *testing.T) {
	retryAt := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name           string
		respond        func(http.ResponseWriter, *http.Request)
		wantErr        error
		wantRetryable  bool
		wantRetryAfter time.Duration // 0: none; otherwise at least this…
		retryAfterMax  time.Duration // …and at most this (0: exactly wantRetryAfter)
	}{
		{
			name:          "500",
			respond:       reply(http.StatusInternalServerError, `{"error":{"message":"boom","type":"server_error"}}`),
			wantRetryable: true,
		},
		{
			name:           "429 with Retry-After in seconds",
			respond:        withHeader("Retry-After", "7", reply(http.StatusTooManyRequests, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)),
			wantRetryable:  true,
			wantRetryAfter: 7 * time.Second,
		},
		{
			name:           "429 with Retry-After as an HTTP date",
			respond:        withHeader("Retry-After", retryAt, reply(http.StatusTooManyRequests, `{"error":{"message":"slow down"}}`)),
			wantRetryable:  true,
			wantRetryAfter: 80 * time.Second,
			retryAfterMax:  90 * time.Second,
		},
		{
			name: "503 with retry-after-ms, which wins over Retry-After",
			respond: withHeader("Retry-After-Ms", "1500", withHeader("Retry-After", "2",
				reply(http.StatusServiceUnavailable, "<html>overloaded</html>"))),
			wantRetryable:  true,
			wantRetryAfter: 1500 * time.Millisecond,
		},
		{
			name:           "429 asking for a day waits at most MaxRetryAfter",
			respond:        withHeader("Retry-After", "86400", reply(http.StatusTooManyRequests, `{"error":{"message":"quota"}}`)),
			wantRetryable:  true,
			wantRetryAfter: MaxRetryAfter,
		},
		{
			name:          "429 with an unreadable Retry-After",
			respond:       withHeader("Retry-After", "soon", reply(http.StatusTooManyRequests, `{"error":{"message":"quota"}}`)),
			wantRetryable: true,
		},
		{
			name:          "429 without Retry-After",
			respond:       reply(http.StatusTooManyRequests, `{"error":{"message":"quota"}}`),
			wantRetryable: true,
		},
		{
			name:          "200 with an HTML body",
			respond:       reply(http.StatusOK, "<html><body>proxy login</body></html>"),
			wantRetryable: true,
		},
		{
			name:          "200 with JSON of the wrong shape",
			respond:       reply(http.StatusOK, `{"choices":"none today"}`),
			wantRetryable: true,
		},
		{
			name:          "200 with an empty body",
			respond:       reply(http.StatusOK, ""),
			wantRetryable: true,
		},
		{
			name:          "200 with an empty summary",
			respond:       reply(http.StatusOK, completion("   \n", "m", 10, 0)),
			wantErr:       ErrEmptySummary,
			wantRetryable: true,
		},
		{
			name:          "200 with a refusal instead of a summary",
			respond:       reply(http.StatusOK, `{"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"","refusal":"I cannot help"}}]}`),
			wantErr:       ErrEmptySummary,
			wantRetryable: true,
		},
		{
			name: "400 context length exceeded",
			respond: reply(http.StatusBadRequest, `{"error":{"message":"This model's maximum context length is 4096 tokens.",`+
				`"type":"invalid_request_error","code":"context_length_exceeded"}}`),
			wantErr: ErrContextLength,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, tt.respond)
			s := newSummarizer(t, Config{BaseURL: e.srv.URL, APIKey: "sk-test"})
			out, err := s.Summarize(context.Background(), summary.Input{Messages: conversation()})
			if err == nil {
				t.Fatalf("got summary %q; want an error", out.Summary)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v; want %v", err, tt.wantErr)
			}
			if got := Retryable(err); got != tt.wantRetryable {
				t.Errorf("Retryable(%v): got %v; want %v", err, got, tt.wantRetryable)
			}
			got, ok := RetryAfter(err)
			hi := tt.retryAfterMax
			if hi == 0 {
				hi = tt.wantRetryAfter
			}
			if ok != (tt.wantRetryAfter > 0) || got < tt.wantRetryAfter || got > hi {
				t.Errorf("RetryAfter(%v): got %s, %v; want %s to %s", err, got, ok, tt.wantRetryAfter, hi)
			}
			// Wrapped further, as the pool does, the wait is still found.
			if again, _ := RetryAfter(fmt.Errorf("chunk 1 of 2: %w", err)); again != got {
				t.Errorf("RetryAfter of the wrapped error: got %s; want %s", again, got)
			}
		})
	}
}

func withHeader(k, v string, next func(http.ResponseWriter, *http.Request)) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(k, v)
		next(w, r)
	}
}

// An endpoint that never finishes its answer fails the call within about
// Config.Timeout, as a retryable deadline error: whether it sends nothing at all, the
// headers and part of the body, or a body that trickles on forever.
func TestEndpointThatNeverFinishes(t *testing.T) {
	const timeout = 300 * time.Millisecond
	// Each handler ends when the client goes away; the test server's Close waits for it.
	tests := []struct {
		name    string
		respond func(http.ResponseWriter, *http.Request)
	}{
		{"no answer at all", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}},
		{"headers, then nothing", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
		{"part of the body, then nothing", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "4096")
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"## Goal`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
		{"a body that trickles forever", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `{"choices":[`)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					if _, err := fmt.Fprint(w, " "); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}
		}},
		{"an error status whose body never ends", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"message":"`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, tt.respond)
			s := newSummarizer(t, Config{BaseURL: e.srv.URL, Timeout: timeout})
			start := time.Now()
			out, err := s.Summarize(context.Background(), summary.Input{Messages: conversation()})
			took := time.Since(start)
			if err == nil {
				t.Fatalf("got summary %q; want a deadline error", out.Summary)
			}
			if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline exceeded") {
				t.Errorf("got %v; want a deadline error", err)
			}
			if !Retryable(err) {
				t.Errorf("Retryable(%v): got false; want true", err)
			}
			// About the timeout: well under a second past it even on a loaded machine,
			// and never the endpoint's own pace (it would never end).
			if took < timeout || took > timeout+2*time.Second {
				t.Errorf("failed after %s; want about the timeout %s", took, timeout)
			}
		})
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		give map[string]string
		want time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{"zero", map[string]string{"Retry-After": "0"}, 0},
		{"negative", map[string]string{"Retry-After": "-5"}, 0},
		{"date", map[string]string{"Retry-After": now.Add(30 * time.Second).Format(http.TimeFormat)}, 30 * time.Second},
		{"date in the past", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"garbage", map[string]string{"Retry-After": "later"}, 0},
		{"milliseconds", map[string]string{"Retry-After-Ms": "250"}, 250 * time.Millisecond},
		{"milliseconds win", map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{"unreadable milliseconds fall back", map[string]string{"Retry-After-Ms": "x", "Retry-After": "9"}, 9 * time.Second},
		{"capped", map[string]string{"Retry-After": "1e12"}, MaxRetryAfter},
		{"capped milliseconds", map[string]string{"Retry-After-Ms": "1e15"}, MaxRetryAfter},
		{"capped date", map[string]string{"Retry-After": now.Add(48 * time.Hour).Format(http.TimeFormat)}, MaxRetryAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.give {
				h.Set(k, v)
			}
			if got := retryAfterHeader(h, now); got != tt.want {
				t.Errorf("got %s; want %s", got, tt.want)
			}
		})
	}
}
