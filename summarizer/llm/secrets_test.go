package llm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/compactor/compactor/summarizer/summary"
)

// Issue 9: a configuration error never shows the credentials or the query of the base
// URL, whichever field is at fault.
func TestConfigErrorsHideTheURLsSecrets(t *testing.T) {
	tests := []struct {
		name string
		give Config
	}{
		{"unparseable url", Config{BaseURL: "https://user:secret@host:abc/v1", Model: "m"}},
		{"control character", Config{BaseURL: "https://user:secret@host/v1\n", Model: "m"}},
		{"other scheme", Config{BaseURL: "ftp://user:secret@host/v1", Model: "m"}},
		{"no host", Config{BaseURL: "https://user:secret@/v1", Model: "m"}},
		{"key in the query", Config{BaseURL: "https://user:secret@host/v1?api-key=secret", Model: "m"}},
		{"fragment", Config{BaseURL: "https://user:secret@host/v1#secret", Model: "m"}},
		{"no model", Config{BaseURL: "https://user:secret@host/v1", Model: " "}},
		{"temperature", Config{BaseURL: "https://user:secret@host/v1", Model: "m", Temperature: 3}},
		{"max tokens field", Config{BaseURL: "https://user:secret@host/v1", Model: "m", MaxTokensField: "n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.APIKey = "sk-secret-key"
			err := tt.give.Validate()
			if err == nil {
				t.Fatal("got no error; want one")
			}
			_, nerr := New(tt.give)
			for _, e := range []error{err, nerr} {
				if !errors.Is(e, ErrConfig) {
					t.Errorf("got %v; want ErrConfig", e)
				}
				if msg := e.Error(); strings.Contains(msg, "secret") || strings.Contains(msg, "user") {
					t.Errorf("the error shows the URL's credentials or query: %s", msg)
				}
			}
		})
	}
}

// A Config printed with any verb (a %v in a log line, a %+v in a test failure) shows
// neither the key nor the URL's credentials.
func TestConfigPrintsWithoutSecrets(t *testing.T) {
	c := Config{BaseURL: "https://user:secret@host/v1", APIKey: "sk-secret-key", Model: "m"}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(verb, c); strings.Contains(got, "secret") || !strings.Contains(got, "host/v1") {
			t.Errorf("%s: %s; want the endpoint without its secrets", verb, got)
		}
	}
}

// Issue 9: an endpoint that echoes the request's Authorization header (or the URL's
// password) in its error never gets the key into the error Summarize returns, whose
// text ends up in logs, events and dead letters. The error still classifies as before.
func TestCallErrorsHideTheKey(t *testing.T) {
	const key, password = "sk-secret-key-7f3a", "hunter2-password"
	echo := func(status int, jsonBody bool) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			seen := r.Header.Get("Authorization")
			if u, p, ok := r.BasicAuth(); ok {
				seen += " " + u + ":" + p
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			if jsonBody {
				fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, seen)
			} else {
				fmt.Fprintf(w, "<html>bad gateway for %s</html>", seen)
			}
		}
	}
	tests := []struct {
		name          string
		key           string
		respond       func(http.ResponseWriter, *http.Request)
		wantRetryable bool
	}{
		{"401 echoing the key", key, echo(http.StatusUnauthorized, true), false},
		{"502 echoing the key in a plain body", key, echo(http.StatusBadGateway, false), true},
		{"401 echoing the URL's password, sent as basic auth without a key", "", echo(http.StatusUnauthorized, true), false},
		{"200 whose body is not JSON", key, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "not json: %s", r.Header.Get("Authorization"))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, tt.respond)
			base := strings.Replace(e.srv.URL, "http://", "http://ops:"+password+"@", 1)
			s := newSummarizer(t, Config{BaseURL: base, APIKey: tt.key})
			_, err := s.Summarize(context.Background(), summary.Input{Messages: conversation()})
			if err == nil {
				t.Fatal("got no error; want one")
			}
			if got := e.last(t).Auth; tt.key != "" && got != "Bearer "+key {
				t.Fatalf("the endpoint got Authorization %q; want the key", got)
			}
			basic := base64.StdEncoding.EncodeToString([]byte("ops:" + password))
			if msg := err.Error(); strings.Contains(msg, key) || strings.Contains(msg, password) || strings.Contains(msg, basic) {
				t.Errorf("the error shows a secret: %s", msg)
			}
			if got := Retryable(err); got != tt.wantRetryable {
				t.Errorf("Retryable(%v): got %v; want %v", err, got, tt.wantRetryable)
			}
		})
	}
}
