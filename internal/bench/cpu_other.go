//go:build !unix

package bench

import "time"

// cpuTime is not read on this system.
func cpuTime() time.Duration { return -1 }
