//go:build unix

package systemtest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
)

// chromiumBinary is Debian's chromium (apt-get install chromium; .ci/run installs it).
// Without it the test skips, unless CI=true: then it fails.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); CI needs it for the web view's test")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// chromium runs headless Chromium on url with args and returns its standard output. It
// runs in a process group of its own, killed whole when the test's deadline passes.
func chromium(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,900"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

// The web view in a real browser: headless Chromium renders the conversation page of a
// conversation the pipeline compacted, logged in with basic authentication; its DOM
// holds the gauge and the timeline, and the screenshot is a rendered page, not a blank
// one. VIEW_SCREENSHOT_OUT=path keeps the screenshot (docs/view.png is made so).
func TestViewInHeadlessChromium(t *testing.T) {
	bin := chromiumBinary(t)
	testEnv(t, 4000)
	srv := jstest.Server(t)
	llm := fakellm.New(t)
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	for k, v := range map[string]string{
		"COMPACTOR_NATS_URL": srv.ClientURL(), "COMPACTOR_VIEW_LISTEN": addr, "COMPACTOR_VIEW_TOKEN": viewToken,
		"COMPACTOR_CONTEXT_WINDOW": "4000", "COMPACTOR_LOG_LEVEL": "warn", "COMPACTOR_RETRY_DELAY": "200ms",
		"COMPACTOR_LLM_BASE_URL": llm.URL(), "COMPACTOR_LLM_API_KEY": "test-key",
	} {
		t.Setenv(k, v)
	}
	// serve is the built binary, with the variables above (proctest.Start passes the test's
	// environment on).
	serve := proctest.Start(t, "serve", proctest.Compactor(t), []string{"serve"}, nil)
	t.Cleanup(func() {
		serve.Signal(t, syscall.SIGTERM)
		select {
		case <-serve.Done():
			if serve.Err() != nil {
				t.Errorf("serve: %v\n%s", serve.Err(), serve.Logs)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("serve did not stop\n%s", serve.Logs)
		}
	})
	waitForService(t, srv.ClientURL(), serve, "started with the web view")
	s := &stack{nc: jstest.ConnTo(t, srv.ClientURL())}
	s.st = jstest.Provision(t, s.nc)
	s.client = pipeline.NewWithStore(s.nc, s.st)
	compactedConversation(t, s, "agent-run-7", 24, 3)
	msgs, _ := fakellm.NeedleConversation(2)
	replay(t, s, "short-chat", msgs, 0)

	url := fmt.Sprintf("http://view:%s@%s/c/agent-run-7", viewToken, addr)
	dom := chromium(t, bin, url, "--dump-dom")
	for _, want := range []string{`id="gauge"`, `class="gauge-bar"`, `id="timeline"`, `class="kind-compaction`, "gpt-4o-mini-fake", `id="summary"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered DOM lacks %s:\n%.3000s", want, dom)
		}
	}
	if rows := regexp.MustCompile(`<tr class="kind-compaction`).FindAllString(dom, -1); len(rows) < 3 {
		t.Errorf("%d compaction rows in the timeline; want at least 3", len(rows))
	}
	if strings.Contains(dom, "401 Unauthorized") {
		t.Fatal("Chromium was refused: the page is the 401 answer")
	}

	shot := filepath.Join(t.TempDir(), "shot.png")
	chromium(t, bin, url, "--screenshot="+shot, "--hide-scrollbars")
	img := decodePNG(t, shot)
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %dx%d; want 1280x900", b.Dx(), b.Dy())
	}
	mean, variance, colors := pixelStats(img)
	t.Logf("screenshot: mean luminance %.1f, variance %.1f, %d colors", mean, variance, colors)
	if variance < 100 || colors < 16 {
		t.Errorf("the screenshot looks blank: luminance variance %.1f, %d colors", variance, colors)
	}
	// The list page renders too, with a gauge per conversation.
	list := chromium(t, bin, fmt.Sprintf("http://view:%s@%s/", viewToken, addr), "--dump-dom")
	if n := strings.Count(list, `class="mini gauge-bar`); n != 2 || !strings.Contains(list, "short-chat") {
		t.Errorf("the list holds %d gauges; want 2, one per conversation:\n%.3000s", n, list)
	}
	// Without the credential Chromium gets the refusal, not the page.
	if refused := chromium(t, bin, fmt.Sprintf("http://%s/c/agent-run-7", addr), "--dump-dom"); strings.Contains(refused, `id="gauge"`) {
		t.Error("Chromium without the token was shown the page")
	}
	if out := os.Getenv("VIEW_SCREENSHOT_OUT"); out != "" {
		b, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(out, b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot does not decode: %v", err)
	}
	return img
}

// pixelStats is the mean and variance of the luminance of img's pixels, and how many
// distinct colors it has (up to 1,000).
func pixelStats(img image.Image) (mean, variance float64, colors int) {
	b := img.Bounds()
	seen := map[[3]uint32]bool{}
	var sum, sumSq float64
	n := float64(b.Dx() * b.Dy())
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			l := (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(bl)) / 257
			sum += l
			sumSq += l * l
			if len(seen) < 1000 {
				seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			}
		}
	}
	mean = sum / n
	return mean, sumSq/n - mean*mean, len(seen)
}
