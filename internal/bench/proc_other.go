//go:build !linux

package bench

import "time"

// procRSS cannot read another process's resident set here.
func procRSS(int) int64 { return -1 }

// procCPU cannot read another process's CPU time here.
func procCPU(int) time.Duration { return -1 }
