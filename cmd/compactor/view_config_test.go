package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const viewToken = "view-token-for-tests-0123456789"

// The view's variables are checked at start: it needs the api role, and a token on any
// address but loopback, since it shows conversation content.
func TestViewConfiguration(t *testing.T) {
	for _, tc := range []struct {
		listen, token, roles string
		wantErr              string // "" for none
	}{
		{"", "", "", ""},
		{"127.0.0.1:8080", "", "", ""},
		{"localhost:8080", "", "", ""},
		{"[::1]:8080", "", "", ""},
		{"0.0.0.0:8080", "", "", "COMPACTOR_VIEW_LISTEN is 0.0.0.0:8080, not a loopback address, and COMPACTOR_VIEW_TOKEN is empty"},
		{":8080", "", "", "not a loopback address"},
		{"view.internal:8080", "", "", "not a loopback address"},
		{"10.1.2.3:8080", "", "", "not a loopback address"},
		{"0.0.0.0:8080", viewToken, "", ""},
		{"8080", viewToken, "", "COMPACTOR_VIEW_LISTEN must be host:port"},
		{"127.0.0.1:8080", "short", "", "COMPACTOR_VIEW_TOKEN the token must be at least 16 characters"},
		{"127.0.0.1:8080", "has a space in it, sadly", "", "COMPACTOR_VIEW_TOKEN the token must be printable ASCII without spaces"},
		{"127.0.0.1:8080", "", "trigger,worker", "COMPACTOR_ROLES (trigger,worker) has no api role"},
		{"127.0.0.1:8080", "", "api", ""},
	} {
		t.Run(tc.listen+"/"+tc.roles, func(t *testing.T) {
			testEnv(t, 128000)
			t.Setenv("COMPACTOR_VIEW_LISTEN", tc.listen)
			t.Setenv("COMPACTOR_VIEW_TOKEN", tc.token)
			if tc.roles != "" {
				t.Setenv("COMPACTOR_ROLES", tc.roles)
			}
			_, err := loadEnv(os.LookupEnv)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("loadEnv: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("loadEnv: %v; want an error with %q", err, tc.wantErr)
			case err != nil && tc.token != "" && strings.Contains(err.Error(), tc.token):
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
}

// COMPACTOR_PRICES prices the web view's savings pages: read at start when the view
// listens (a bad file stops start-up, naming it), ignored by a process without the view.
func TestViewPrices(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "prices.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"models": {"gpt-4.1": {"input": 2, "cached_input": 0.5, "cache_write": 0, "output": 8}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"models": {"gpt-4.1": {"input": -2}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		listen, prices string
		wantPriced     bool
		wantErr        string
	}{
		{"127.0.0.1:8080", good, true, ""},
		{"127.0.0.1:8080", bad, false, "COMPACTOR_PRICES"},
		{"127.0.0.1:8080", filepath.Join(dir, "missing.json"), false, "COMPACTOR_PRICES"},
		{"", bad, false, ""},
		{"127.0.0.1:8080", "", false, ""},
	} {
		testEnv(t, 128000)
		t.Setenv("COMPACTOR_VIEW_LISTEN", tc.listen)
		t.Setenv("COMPACTOR_PRICES", tc.prices)
		e, err := loadEnv(os.LookupEnv)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Fatalf("%s %s: loadEnv: %v", tc.listen, tc.prices, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Fatalf("%s %s: loadEnv: %v; want an error with %q", tc.listen, tc.prices, err, tc.wantErr)
		case err != nil:
			continue
		}
		if got := e.settings().ViewPrices; (got != nil) != tc.wantPriced || (got != nil && got.For("gpt-4.1") == nil) {
			t.Errorf("%s %s: the view's prices %+v; want priced %v", tc.listen, tc.prices, got, tc.wantPriced)
		}
	}
}
