package main

import (
	"os"
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
