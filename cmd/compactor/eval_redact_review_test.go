package main

import (
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
