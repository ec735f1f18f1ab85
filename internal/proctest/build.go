package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binaries are built once per test binary, into one directory Run removes.
var binaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]builtBinary
}

type builtBinary struct {
	path string
	err  error
}

// Run runs the tests of m, removes the binaries they built and returns m's exit code.
func Run(m *testing.M) int {
	code := m.Run()
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
		binaries.dir, binaries.built = "", nil
	}
	return code
}

// BuildWith builds the binary name with build, given the path to write it to, the
// first time name is asked for, and returns the path, or the build's error, every time.
func BuildWith(name string, build func(out string) error) (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if b, ok := binaries.built[name]; ok {
		return b.path, b.err
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "compactor-test-bin-")
		if err != nil {
			return "", err
		}
		binaries.dir, binaries.built = dir, map[string]builtBinary{}
	}
	b := builtBinary{path: filepath.Join(binaries.dir, name)}
	b.err = build(b.path)
	binaries.built[name] = b
	return b.path, b.err
}

// Build runs `go build -o <dir>/name pkg` in the module of the working directory (so a
// dependency's version is the one go.mod pins) the first time name is asked for, and
// returns the path, or the build's error, every time.
func Build(name, pkg string) (string, error) {
	return BuildWith(name, func(out string) error {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
		return nil
	})
}

// Compactor returns the binary of cmd/compactor, failing t when it does not build.
func Compactor(t testing.TB) string {
	t.Helper()
	bin, err := Build("compactor", "github.com/compactor/compactor/cmd/compactor")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// NATSServer returns a standalone nats-server built from the version go.mod pins. A
// test that needs it skips when it cannot be built, and fails instead in CI (CI=true).
func NATSServer(t testing.TB) string {
	t.Helper()
	bin, err := Build("nats-server", "github.com/nats-io/nats-server/v2")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: a test that needs nats-server fails instead of skipping)", err)
		}
		t.Skipf("cannot build nats-server: %v", err)
	}
	return bin
}
