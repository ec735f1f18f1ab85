package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
)

// With COMPACTOR_HTTP_LISTEN, serve answers /healthz and the pprof profiles on that
// address, serves nothing else, and closes the listener when it stops.
func TestServeHTTPListenerForOperators(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	t.Setenv("COMPACTOR_HTTP_LISTEN", addr)
	t.Setenv("COMPACTOR_LOG_LEVEL", "warn")
	logs := &logBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, []string{"serve"}, stdio{in: strings.NewReader(""), out: io.Discard, err: logs}, os.LookupEnv)
	}()
	waitForService(t, srv.ClientURL(), served, logs, "started with an HTTP listener")

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, logs)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q; want 200 \"ok\\n\"", code, body)
	}
	if code, body := get("/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d, body without the goroutine profile:\n%.300s", code, body)
	}
	// A profile of this process: the trigger's goroutines are in it.
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "compactor/triggers") {
		t.Errorf("/debug/pprof/goroutine: %d, no goroutine of the trigger in:\n%.300s", code, body)
	}
	if code, _ := get("/"); code != http.StatusNotFound {
		t.Errorf("/: %d; want 404 (the listener serves only /healthz and /debug/pprof/)", code)
	}

	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop\n%s", logs)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after serve stopped", addr)
	}
}

// A listener address that is not host:port stops start-up, naming the variable.
func TestHTTPListenMustBeHostPort(t *testing.T) {
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_HTTP_LISTEN", "9090")
	_, err := loadEnv(os.LookupEnv)
	if err == nil || !strings.Contains(err.Error(), "COMPACTOR_HTTP_LISTEN") {
		t.Fatalf("loadEnv: %v; want an error naming COMPACTOR_HTTP_LISTEN", err)
	}
}
