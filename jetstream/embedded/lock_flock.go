//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package embedded

import (
	"errors"
	"os"
	"syscall"
)

// lockSupported says whether this platform locks the data directory.
const lockSupported = true

// tryLock takes an exclusive advisory lock (flock) on f without waiting. The lock
// belongs to f's open file description: a second open of the same file, even in the
// same process, cannot take it; the kernel releases it when f is closed or the
// process dies.
func tryLock(f *os.File) (busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}
