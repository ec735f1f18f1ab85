package corpustest

import (
	"path/filepath"
	"testing"
)

// go test runs each package in its own folder: a relative AGENT_CORPUS_DIR is taken
// from the module root, so every package finds the same corpus (found by the outside
// review: a relative path made the corpus tests skip).
func TestDirTakesARelativePathFromTheModuleRoot(t *testing.T) {
	t.Setenv(EnvVar, "examples/transcripts")
	root, ok := moduleRoot()
	if !ok {
		t.Fatal("no module root above the working directory")
	}
	if got, want := Dir(), filepath.Join(root, "examples", "transcripts"); got != want {
		t.Fatalf("Dir() = %q; want %q", got, want)
	}
	t.Setenv(EnvVar, filepath.Join(root, "no-such-folder"))
	if got := Dir(); got != "" {
		t.Fatalf("Dir() = %q for a folder that does not exist; want \"\"", got)
	}
	t.Setenv(EnvVar, "")
	if got := Dir(); got != "" {
		t.Fatalf("Dir() = %q with the variable unset; want \"\"", got)
	}
}
