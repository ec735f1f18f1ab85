package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The version set at link time (-X main.version, the Dockerfile's VERSION build
// argument) is the one compactor version prints; without it, the build info's is, as
// before: "(devel)" for a build without VCS information, as in a docker build. Both
// binaries are built as the Dockerfile builds (-trimpath, no VCS stamping).
func TestVersionSetAtLinkTime(t *testing.T) {
	dir := t.TempDir()
	build := func(name, ldflags string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -ldflags %q: %v\n%s", ldflags, err, msg)
		}
		return out
	}
	version := func(bin string) (text string, info versionInfo) {
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		js, err := exec.Command(bin, "version", "--json").Output()
		if err != nil {
			t.Fatalf("%s version --json: %v", bin, err)
		}
		if err := json.Unmarshal(js, &info); err != nil {
			t.Fatalf("%s version --json: %v\n%s", bin, err, js)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		return first, info
	}
	for _, c := range []struct{ name, ldflags, want string }{
		{"tagged", "-s -w -X main.version=v9.9.9-test", "v9.9.9-test"},
		{"untagged", "-s -w", "(devel)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text, info := version(build(c.name, c.ldflags))
			if f := strings.Fields(text); len(f) != 2 || f[0] != "compactor" || f[1] != c.want {
				t.Errorf("version printed %q; want compactor %s", text, c.want)
			}
			if info.Version != c.want || info.WireContract == 0 || info.Go == "" {
				t.Errorf("version --json = %+v; want version %s", info, c.want)
			}
		})
	}
}
