package main

import (
	"errors"
	"strings"
	"testing"
)

// A mistyped command gets the nearest command's name; a word far from every command
// gets none, and neither does a hidden command.
func TestUnknownCommandSuggests(t *testing.T) {
	testEnv(t, 128000)
	for _, tc := range []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"stauts"}, `did you mean "status"?`},
		{[]string{"compcat", "conv"}, `did you mean "compact"?`},
		{[]string{"-s", "nats://h:4222", "pubish", "c"}, `did you mean "publish"?`},
		{[]string{"proxi"}, `did you mean "proxy"?`},
		{[]string{"help", "contxt"}, `did you mean "context"?`},
		{[]string{"frobnicate"}, ""},
		{[]string{"bench-worke"}, ""},
	} {
		_, _, err := cli(t, "", tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("%v: %v; want an unknown command (exit 2)", tc.args, err)
			continue
		}
		switch {
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%v: %q; want it to say %s", tc.args, err, tc.want)
		case tc.want == "" && strings.Contains(err.Error(), "did you mean"):
			t.Errorf("%v: %q; want no suggestion", tc.args, err)
		}
	}
}

// A malformed server URL is reported as one, naming what is wrong, before dialling:
// never as a server that did not answer.
func TestMalformedServerURL(t *testing.T) {
	testEnv(t, 128000)
	for _, tc := range []struct {
		url, want string
	}{
		{"htp:/localhost:4222", "scheme"},
		{"htp://localhost:4222", `scheme "htp"`},
		{"nats://:4222", "no host"},
		{"nats:/localhost:4222", "scheme"},
		{"nats://user:s3cret-pw@localhost:4222,nats//other:4222", "server 2 of 2"},
	} {
		for _, args := range [][]string{{"status", "-s", tc.url}, {"serve", "-s", tc.url}} {
			_, _, err := cli(t, "", args...)
			if err == nil || exitCode(err) != exitUsage || strings.Contains(err.Error(), "no server answered") ||
				!strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v (exit %d); want a malformed URL (exit 2) saying %q", args, err, exitCode(err), tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret-pw") {
				t.Errorf("%v: the error shows the password: %v", args, err)
			}
		}
	}
	// What nats.go dials as it is stays accepted: a host and port without a scheme.
	t.Setenv("COMPACTOR_NATS_URL", "")
	if _, _, err := cli(t, "", "status", "-s", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "no server answered") {
		t.Errorf("status -s 127.0.0.1:1: %v; want no server answered", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"status", "status", 0}, {"stauts", "status", 1}, {"pubish", "publish", 1},
		{"", "abc", 3}, {"kitten", "sitting", 3}, {"compcat", "compact", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
