package embedded

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A second server on a data directory in use fails at start with an error naming the
// directory; once the first is shut down, the directory can be used again.
func TestDataDirIsLockedWhileInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err != nil {
		t.Fatalf("first server: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			first.Shutdown()
		}
	})
	second, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err == nil {
		second.Shutdown()
		t.Fatal("a second server started on a data dir in use; want an error")
	}
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another compactor") {
		t.Fatalf("second server: %v; want an error naming %s and another compactor", err, dir)
	}
	t.Logf("second server: %v", err)
	// The first server is untouched.
	nc, err := nats.Connect(first.ClientURL())
	if err != nil {
		t.Fatalf("first server after the refused second: %v", err)
	}
	nc.Close()

	first.Shutdown()
	stopped = true
	again, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err != nil {
		t.Fatalf("start after the first server stopped: %v", err)
	}
	again.Shutdown()
}

// The shipped embedded server flushes every JetStream write to disk before it
// acknowledges it; an interval is an explicit choice.
func TestEmbeddedServerSyncsEveryWriteByDefault(t *testing.T) {
	srv, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if !srv.SyncsEveryWrite() || !srv.NATS().JetStreamConfig().SyncAlways {
		t.Fatalf("the default embedded server does not sync every write: %+v", srv.NATS().JetStreamConfig())
	}
	lazy, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Shutdown()
	if lazy.SyncsEveryWrite() || lazy.NATS().JetStreamConfig().SyncInterval != time.Minute {
		t.Fatalf("an explicit interval was not kept: %+v", lazy.NATS().JetStreamConfig())
	}
	if _, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: t.TempDir(), SyncInterval: -time.Second}); err == nil {
		t.Fatal("a negative interval started a server")
	}
}

// A listen address in use is told at once, with what to do, and leaves no data
// directory behind (the start made none it keeps).
func TestTakenListenAddressFailsAtOnceAndLeavesNoDataDir(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "compactor-data")
	srv, err := Start(Config{Listen: ln.Addr().String(), DataDir: dir, ReadyTimeout: time.Minute})
	if err == nil {
		srv.Shutdown()
		t.Fatal("the embedded server started on a taken address")
	}
	if !errors.Is(err, ErrListenInUse) || !strings.Contains(err.Error(), "COMPACTOR_LISTEN") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("start on a taken address: %v; want ErrListenInUse naming the address and COMPACTOR_LISTEN", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed start left %s behind (%v)", dir, err)
	}
}

// A second server with the same address and data directory is told the directory is
// in use, the refusal that matters (two servers on one directory corrupt it), not only
// that the address is taken.
func TestSecondServerOnTheSameDirAndAddressNamesTheDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown()
	addr := strings.TrimPrefix(first.ClientURL(), "nats://")
	second, err := Start(Config{Listen: addr, DataDir: dir})
	if err == nil {
		second.Shutdown()
		t.Fatal("a second server started on the same directory and address")
	}
	if !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second server: %v; want ErrDataDirInUse", err)
	}
}
