package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
)

// authRecorder is an OpenAI-compatible endpoint that records the Authorization header
// of every request ("" when there was none) and answers a summary.
type authRecorder struct {
	srv   *httptest.Server
	mu    sync.Mutex
	auths []string
}

func newAuthRecorder(t *testing.T) *authRecorder {
	a := &authRecorder{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.auths = append(a.auths, r.Header.Get("Authorization"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"## Goal\nx"}}]}`)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// take returns the headers recorded since the last take.
func (a *authRecorder) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.auths
	a.auths = nil
	return out
}

// Issue 9: keys go only to the endpoint they were configured for. The default key
// (COMPACTOR_LLM_API_KEY, else OPENAI_API_KEY) goes to the default endpoint
// (COMPACTOR_LLM_BASE_URL) and nowhere else; a profile with an endpoint of its own gets
// only the key of the variable it names itself, and no key when it names none or that
// variable is empty. Each summarizer is the one serve builds (newSummarizers, For),
// speaking through the real go-openai client to endpoints that record what they got.
func TestKeysGoOnlyToTheirEndpoint(t *testing.T) {
	a, b, c := newAuthRecorder(t), newAuthRecorder(t), newAuthRecorder(t)
	profiles := map[string]string{
		// B: a local endpoint without authentication.
		"local": fmt.Sprintf(`{"llm_base_url": %q}`, b.srv.URL),
		// B, naming a variable that is not set.
		"local-unset": fmt.Sprintf(`{"llm_base_url": %q, "llm_api_key_env": "UNSET_KEY"}`, b.srv.URL),
		// C, with a key of its own.
		"other": fmt.Sprintf(`{"llm_base_url": %q, "llm_api_key_env": "OTHER_KEY"}`, c.srv.URL),
		// The default endpoint with another model: the default key.
		"cheap": `{"llm_model": "small-model"}`,
		// The default endpoint named again, with a key variable of its own.
		"own-key": fmt.Sprintf(`{"llm_base_url": %q, "llm_api_key_env": "OWN_KEY"}`, a.srv.URL),
	}
	file := `{"profiles": {`
	sep := ""
	for name, p := range profiles {
		file += fmt.Sprintf("%s%q: %s", sep, name, p)
		sep = ", "
	}
	file += "}}"
	path := filepath.Join(t.TempDir(), "profiles.json")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}

	bearer := func(k string) string { return "Bearer " + k }
	type want struct {
		at   *authRecorder
		auth string // "" = no Authorization header
	}
	tests := []struct {
		name string
		vars map[string]string
		want map[string]want // by profile; "" is the base settings
	}{
		{
			name: "COMPACTOR_LLM_API_KEY",
			vars: map[string]string{"COMPACTOR_LLM_API_KEY": "sk-default", "OPENAI_API_KEY": "sk-openai", "OTHER_KEY": "sk-other", "OWN_KEY": "sk-own"},
			want: map[string]want{
				"":            {a, bearer("sk-default")},
				"local":       {b, ""},
				"local-unset": {b, ""},
				"other":       {c, bearer("sk-other")},
				"cheap":       {a, bearer("sk-default")},
				"own-key":     {a, bearer("sk-own")},
			},
		},
		{
			name: "OPENAI_API_KEY as the default key",
			vars: map[string]string{"OPENAI_API_KEY": "sk-openai", "OTHER_KEY": "sk-other"},
			want: map[string]want{
				"":            {a, bearer("sk-openai")},
				"local":       {b, ""},
				"local-unset": {b, ""},
				"other":       {c, bearer("sk-other")},
				"cheap":       {a, bearer("sk-openai")},
				"own-key":     {a, bearer("sk-openai")}, // OWN_KEY empty: the default endpoint's key
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testEnv(t, 128000)
			t.Setenv("COMPACTOR_CONFIG", path)
			vars := map[string]string{"COMPACTOR_LLM_BASE_URL": a.srv.URL, "COMPACTOR_CONFIG": path}
			for k, v := range tt.vars {
				vars[k] = v
			}
			env, err := loadEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			r, err := env.resolver()
			if err != nil {
				t.Fatal(err)
			}
			sums := node.NewSummarizers(node.Config{Resolver: r, Profiles: env.Profiles, Lookup: env.lookup, Logger: zerolog.Nop()}, extractive.New())
			for profile, w := range tt.want {
				s := r.Base()
				if profile != "" {
					if s, err = r.Resolve(policy.Layer{policy.ProfileKey: profile}); err != nil {
						t.Fatal(err)
					}
				}
				sum, err := sums.For(s)
				if err != nil {
					t.Fatalf("profile %q: %v", profile, err)
				}
				if _, ok := sum.(*llm.Summarizer); !ok {
					t.Fatalf("profile %q: got %T; want the LLM summarizer", profile, sum)
				}
				in := summary.Input{Messages: []schemas.Message{{Role: schemas.RoleUser, Content: schemas.Text("hello")}}}
				if _, err := sum.Summarize(context.Background(), in); err != nil {
					t.Fatalf("profile %q: %v", profile, err)
				}
				for _, e := range []*authRecorder{a, b, c} {
					got := e.take()
					switch {
					case e == w.at && (len(got) != 1 || got[0] != w.auth):
						t.Errorf("profile %q: its endpoint got Authorization %q; want %q", profile, got, w.auth)
					case e != w.at && len(got) != 0:
						t.Errorf("profile %q: another endpoint got %d requests (%q)", profile, len(got), got)
					}
				}
			}
		})
	}
}
