package powerloss_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/compactor/compactor/internal/powerloss"
)

// mount mounts the layer over a new backing directory. Without FUSE (no /dev/fuse, no
// fuse in the kernel, not root) the test is skipped, and fails with CI=true.
func mount(t *testing.T) (fs *powerloss.FS, mnt, backing string) {
	t.Helper()
	return mountWith(t, powerloss.Options{})
}

func mountWith(t *testing.T, o powerloss.Options) (fs *powerloss.FS, mnt, backing string) {
	t.Helper()
	backing, mnt = t.TempDir(), t.TempDir()
	return mountOver(t, backing, mnt, o), mnt, backing
}

func mountOver(t *testing.T, backing, mnt string, o powerloss.Options) *powerloss.FS {
	t.Helper()
	err := powerloss.Available()
	var fs *powerloss.FS
	if err == nil {
		fs, err = powerloss.Mount(backing, mnt, o)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("FUSE is needed (CI=true): %v", err)
		}
		t.Skipf("FUSE is not available: %v", err)
	}
	t.Cleanup(func() {
		_ = fs.PowerOff()
		_ = fs.Unmount()
	})
	return fs
}

// powerLoss drops what was not synced and unmounts.
func powerLoss(t *testing.T, fs *powerloss.FS) {
	t.Helper()
	if err := fs.PowerOff(); err != nil {
		t.Error(err)
	}
	if err := fs.Unmount(); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, name, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, name string) {
	t.Helper()
	d, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// want checks what the backing directory holds after the power loss: the file's
// content, or "" for no such file.
func want(t *testing.T, name, content string) {
	t.Helper()
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		if content != "" {
			t.Errorf("%s: lost; want %q", filepath.Base(name), content)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if content == "" {
		t.Errorf("%s: %q survived; want it gone", filepath.Base(name), b)
	} else if string(b) != content {
		t.Errorf("%s: %q; want %q", filepath.Base(name), b, content)
	}
}

func TestWriteWithoutSyncIsLost(t *testing.T) {
	fs, mnt, backing := mount(t)
	writeFile(t, filepath.Join(mnt, "a"), "hello", false)
	// It reads back before the power loss: the page cache has it.
	if b, err := os.ReadFile(filepath.Join(mnt, "a")); err != nil || string(b) != "hello" {
		t.Fatalf("read back %q, %v; want hello", b, err)
	}
	want(t, filepath.Join(backing, "a"), "") // nothing reached the disk yet
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "a"), "")
}

func TestWriteAndFsyncIsKept(t *testing.T) {
	fs, mnt, backing := mount(t)
	name := filepath.Join(mnt, "a")
	writeFile(t, name, "synced", true)
	// An append after the sync is lost; the synced bytes are not.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" and not"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "a"), "synced")
}

func TestOpenSyncWritesAreKept(t *testing.T) {
	fs, mnt, backing := mount(t)
	f, err := os.OpenFile(filepath.Join(mnt, "a"), os.O_CREATE|os.O_WRONLY|os.O_SYNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("o_sync"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "a"), "o_sync")
}

func TestTruncateIsDurableOnlyWhenSynced(t *testing.T) {
	fs, mnt, backing := mount(t)
	writeFile(t, filepath.Join(mnt, "kept"), "abcdef", true)
	writeFile(t, filepath.Join(mnt, "cut"), "abcdef", true)
	if err := os.Truncate(filepath.Join(mnt, "kept"), 2); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "cut"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Shrink, then write past the end: the gap reads as zeros, durably too.
	if err := f.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), 4); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "kept"), "abcdef")
	want(t, filepath.Join(backing, "cut"), "ab\x00\x00X")
}

func TestCreateIsDurableWithItsFileOrDirectory(t *testing.T) {
	fs, mnt, backing := mount(t)
	if err := os.MkdirAll(filepath.Join(mnt, "d1", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d3"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The file's fsync makes it, and the directories that lead to it, durable.
	writeFile(t, filepath.Join(mnt, "d1", "sub", "f"), "data", true)
	// The directory's fsync makes the entry durable, not the data.
	writeFile(t, filepath.Join(mnt, "d2", "f"), "data", false)
	syncDir(t, filepath.Join(mnt, "d2"))
	// Neither: gone, with its directory.
	writeFile(t, filepath.Join(mnt, "d3", "f"), "data", false)
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "d1", "sub", "f"), "data")
	if fi, err := os.Stat(filepath.Join(backing, "d2", "f")); err != nil || fi.Size() != 0 {
		t.Errorf("d2/f: %v, %v; want an empty file (its entry was synced, its data was not)", fi, err)
	}
	if _, err := os.Stat(filepath.Join(backing, "d3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d3: %v; want it gone (never synced)", err)
	}
}

// TestRename is the atomic replace a server does (write a temporary file, sync it,
// rename it over the old one, sync the directory), cut at each step.
func TestRename(t *testing.T) {
	tests := []struct {
		name            string
		syncTmp, rename bool
		syncDir         bool
		wantMeta        string
		wantTmp         string
	}{
		{name: "unsynced temporary file", wantMeta: "old"},
		{name: "synced temporary file, not renamed", syncTmp: true, wantMeta: "old", wantTmp: "new"},
		{name: "renamed, directory not synced", syncTmp: true, rename: true, wantMeta: "old", wantTmp: "new"},
		{name: "renamed, directory synced", syncTmp: true, rename: true, syncDir: true, wantMeta: "new"},
		{name: "unsynced data renamed, directory synced", rename: true, syncDir: true, wantMeta: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, mnt, backing := mount(t)
			writeFile(t, filepath.Join(mnt, "meta"), "old", true)
			writeFile(t, filepath.Join(mnt, "meta.tmp"), "new", tt.syncTmp)
			if tt.rename {
				if err := os.Rename(filepath.Join(mnt, "meta.tmp"), filepath.Join(mnt, "meta")); err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(mnt, "meta")); err != nil || string(b) != "new" {
					t.Fatalf("read back %q, %v; want new", b, err)
				}
			}
			if tt.syncDir {
				syncDir(t, mnt)
			}
			powerLoss(t, fs)
			if tt.wantMeta == "" {
				// The entry is durable, its data is not: an empty file.
				if fi, err := os.Stat(filepath.Join(backing, "meta")); err != nil || fi.Size() != 0 {
					t.Errorf("meta: %v, %v; want an empty file", fi, err)
				}
			} else {
				want(t, filepath.Join(backing, "meta"), tt.wantMeta)
			}
			want(t, filepath.Join(backing, "meta.tmp"), tt.wantTmp)
		})
	}
}

func TestRenamedFileSyncMovesIt(t *testing.T) {
	fs, mnt, backing := mount(t)
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mnt, "a"), "one", true)
	if err := os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "d", "b")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "d", "b"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" two"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "a"), "")
	want(t, filepath.Join(backing, "d", "b"), "one two")
}

func TestUnlinkIsDurableWhenTheDirectoryIsSynced(t *testing.T) {
	fs, mnt, backing := mount(t)
	writeFile(t, filepath.Join(mnt, "kept"), "k", true)
	writeFile(t, filepath.Join(mnt, "gone"), "g", true)
	if err := os.Remove(filepath.Join(mnt, "kept")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "gone"), filepath.Join(mnt, "d", "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "d", "gone")); err != nil {
		t.Fatal(err)
	}
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "kept"), "k")
	want(t, filepath.Join(backing, "gone"), "g")

	// Again, syncing the directory this time.
	mnt2 := t.TempDir()
	fs = mountOver(t, backing, mnt2, powerloss.Options{})
	if err := os.Remove(filepath.Join(mnt2, "kept")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt2)
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "kept"), "")
	want(t, filepath.Join(backing, "gone"), "g")
}

func TestMountShowsTheBackingDirectory(t *testing.T) {
	backing := t.TempDir()
	if err := os.MkdirAll(filepath.Join(backing, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(backing, "d", "f"), []byte("there"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	fs := mountOver(t, backing, mnt, powerloss.Options{})
	if b, err := os.ReadFile(filepath.Join(mnt, "d", "f")); err != nil || string(b) != "there" {
		t.Fatalf("read %q, %v; want there", b, err)
	}
	writeFile(t, filepath.Join(mnt, "d", "f"), "changed", false)
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "d", "f"), "there")
}

func TestNothingWorksAfterThePowerLoss(t *testing.T) {
	fs, mnt, backing := mount(t)
	f, err := os.OpenFile(filepath.Join(mnt, "a"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("x"); err != nil {
		t.Fatal(err)
	}
	if err := fs.PowerOff(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync after the power loss: %v; want EIO", err)
	}
	f.Close()
	if err := fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	want(t, filepath.Join(backing, "a"), "")
}

func TestSyncWritesEverythingBack(t *testing.T) {
	fs, mnt, backing := mount(t)
	if err := os.MkdirAll(filepath.Join(mnt, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mnt, "d", "e", "f"), "all", false)
	writeFile(t, filepath.Join(mnt, "g"), "of it", false)
	if err := fs.Sync(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mnt, "h"), "after", false)
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "d", "e", "f"), "all")
	want(t, filepath.Join(backing, "g"), "of it")
	want(t, filepath.Join(backing, "h"), "")
}

func TestStrictDirectories(t *testing.T) {
	fs, mnt, backing := mountWith(t, powerloss.Options{StrictDirectories: true})
	writeFile(t, filepath.Join(mnt, "meta"), "old", true)
	syncDir(t, mnt)
	// The file is synced, and so are its directory and every one above: kept.
	if err := os.MkdirAll(filepath.Join(mnt, "k", "l"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mnt, "k", "l", "f"), "synced", true)
	syncDir(t, filepath.Join(mnt, "k", "l"))
	syncDir(t, filepath.Join(mnt, "k"))
	// The atomic replace: the temporary file synced, renamed, the directory synced.
	writeFile(t, filepath.Join(mnt, "meta.tmp"), "new", true)
	if err := os.Rename(filepath.Join(mnt, "meta.tmp"), filepath.Join(mnt, "meta")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	// A synced file whose directory's entry is not durable: lost, with the directory.
	if err := os.MkdirAll(filepath.Join(mnt, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mnt, "d", "e", "f"), "synced", true)
	syncDir(t, filepath.Join(mnt, "d", "e"))
	syncDir(t, filepath.Join(mnt, "d")) // d's entries, not d's own
	// A synced file in a synced directory, then renamed: the rename is not durable.
	writeFile(t, filepath.Join(mnt, "k", "g"), "g", true)
	syncDir(t, filepath.Join(mnt, "k"))
	if err := os.Rename(filepath.Join(mnt, "k", "g"), filepath.Join(mnt, "k", "h")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "k", "h"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("h"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil { // its data, under the name it has durably
		t.Fatal(err)
	}
	f.Close()
	powerLoss(t, fs)
	want(t, filepath.Join(backing, "meta"), "new")
	want(t, filepath.Join(backing, "k", "l", "f"), "synced")
	want(t, filepath.Join(backing, "k", "g"), "gh")
	want(t, filepath.Join(backing, "k", "h"), "")
	ents, err := os.ReadDir(backing)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "k" || names[1] != "meta" {
		t.Errorf("backing holds %q; want [k meta]", names)
	}
}

// TestSwapThenSyncDirectory: two names swapped through a third; the directory's sync
// makes the swap durable, each content under its new name.
func TestSwapThenSyncDirectory(t *testing.T) {
	for _, o := range []powerloss.Options{{}, {StrictDirectories: true}} {
		fs, mnt, backing := mountWith(t, o)
		writeFile(t, filepath.Join(mnt, "a"), "A", true)
		writeFile(t, filepath.Join(mnt, "b"), "B", true)
		syncDir(t, mnt)
		for _, mv := range [][2]string{{"a", "tmp"}, {"b", "a"}, {"tmp", "b"}} {
			if err := os.Rename(filepath.Join(mnt, mv[0]), filepath.Join(mnt, mv[1])); err != nil {
				t.Fatal(err)
			}
		}
		syncDir(t, mnt)
		powerLoss(t, fs)
		want(t, filepath.Join(backing, "a"), "B")
		want(t, filepath.Join(backing, "b"), "A")
		want(t, filepath.Join(backing, "tmp"), "")
		if ents, err := os.ReadDir(backing); err != nil || len(ents) != 2 {
			t.Errorf("strict %t: backing holds %v, %v; want a and b", o.StrictDirectories, ents, err)
		}
	}
}
