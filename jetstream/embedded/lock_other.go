//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package embedded

import "os"

// lockSupported says whether this platform locks the data directory: not here, so
// nothing stops two processes from sharing one.
const lockSupported = false

func tryLock(*os.File) (busy bool, err error) { return false, nil }
