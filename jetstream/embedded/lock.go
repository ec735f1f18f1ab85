package embedded

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// lockName is the file in the data directory whose lock marks it in use.
const lockName = "compactor.lock"

// dirLock is the held lock of a data directory.
type dirLock struct{ f *os.File }

// lockDataDir creates dir if missing and locks it for this process. When another
// process holds the lock, the error matches ErrDataDirInUse, names dir and, when known,
// the holder's pid.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats: create data dir: %w", err)
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: open lock file: %w", err)
	}
	busy, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded nats: lock %s: %w", path, err)
	}
	if busy {
		holder := "another process"
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil && pid > 0 {
				holder = fmt.Sprintf("another process (pid %d)", pid)
			}
		}
		f.Close()
		return nil, fmt.Errorf("embedded nats: %w: %s is used by %s, another compactor with its embedded nats-server; "+
			"two servers on one directory corrupt its JetStream data: stop the other process, or give this one its own COMPACTOR_DATA_DIR",
			ErrDataDirInUse, dir, holder)
	}
	// The pid is for the error above only; the lock itself is what counts.
	if lockSupported {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
	}
	return &dirLock{f: f}, nil
}

// release drops the lock.
func (l *dirLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
