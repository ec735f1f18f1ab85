package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/proctest"
)

// serve takes the nats CLI's credential flags (--token, --password, ...). The operators'
// listener serves net/http/pprof's /debug/pprof/cmdline, which answers os.Args: every
// client of that listener (a Prometheus scraper the README's network policy admits, the
// kubelet) would read the NATS credentials given on the command line.
func TestOpsListenerDoesNotServeCredentialFlags(t *testing.T) {
	bin := proctest.Compactor(t)
	port := strconv.Itoa(proctest.FreePort(t))
	const secret = "s3cret-nats-token-from-a-flag"
	// NATS is not reachable: serve keeps retrying, and the listener serves meanwhile.
	p := proctest.Start(t, "serve", bin, []string{"serve", "-s", "nats://127.0.0.1:1", "--token", secret},
		[]string{"COMPACTOR_HTTP_LISTEN=127.0.0.1:" + port})
	url := "http://127.0.0.1:" + port + "/debug/pprof/cmdline"
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if msg := p.UnexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operators' listener never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polls for the listener to be up
	}
	if strings.Contains(body, secret) {
		t.Errorf("GET /debug/pprof/cmdline shows the --token given to serve: %q", body)
	}
}
