package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/jetstream/jstest"
)

// Review of issue 12: eval redacts --nats-url in its errors and in the report's
// "server" field (policy.RedactURL), but the JSON report's "command" echoes the raw
// arguments, so a password given in the URL (nats://user:password@host) is written to
// the report, which the README suggests pasting into documents.
func TestEvalReportDoesNotLeakTheNATSPassword(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.ServerWith(t, nil) // no auth: the server accepts any user and password
	const secret = "s3cret-eval-password"
	url := strings.Replace(srv.ClientURL(), "nats://", "nats://evaluser:"+secret+"@", 1)
	file := evalSession(t, t.TempDir(), "a.jsonl")
	out, errOut, err := cli(t, "", "eval", file, "--strategy", "keep-last-n", "--window", "2000", "--nats-url", url, "--json")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, errOut)
	}
	if strings.Contains(out, secret) || strings.Contains(errOut, secret) {
		i := strings.Index(out, secret)
		t.Fatalf("the NATS password given in --nats-url is in eval's output: ...%s...", out[max(0, i-60):min(len(out), i+len(secret)+10)])
	}
}

func TestRedactArgs(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{"separate value", []string{"--nats-url", "nats://u:pw@h:4222", "d/"}, []string{"--nats-url", "nats://redacted@h:4222", "d/"}},
		{"with =", []string{"--nats-url=nats://u:pw@h:4222"}, []string{"--nats-url=nats://redacted@h:4222"}},
		{"several servers", []string{"nats://u:pw@a,nats://u:pw@b"}, []string{"nats://redacted@a,nats://redacted@b"}},
		{"no user info", []string{"--nats-url", "nats://h:4222", "--window", "8000"}, []string{"--nats-url", "nats://h:4222", "--window", "8000"}},
		{"not a url", []string{"--fact", "a=b", "x.jsonl"}, []string{"--fact", "a=b", "x.jsonl"}},
		// nats.go dials a URL without a scheme as nats://: its password is one too.
		{"no scheme", []string{"--nats-url", "u:pw@h:4222", "d/"}, []string{"--nats-url", "nats://redacted@h:4222", "d/"}},
		{"no scheme, with =", []string{"-nats-url=u:pw@h:4222"}, []string{"-nats-url=nats://redacted@h:4222"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redactArgs(tt.give); !slices.Equal(got, tt.want) {
				t.Errorf("redactArgs(%q) = %q; want %q", tt.give, got, tt.want)
			}
		})
	}
}
