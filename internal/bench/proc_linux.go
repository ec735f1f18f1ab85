package bench

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// procRSS is process pid's resident set (VmRSS of /proc/PID/status) in bytes, or -1
// when it cannot be read.
func procRSS(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	return vmRSS(data)
}

// procCPU is the CPU time process pid used so far (user and system, from
// /proc/PID/stat), or -1 when it cannot be read.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; the fields after it are counted from
	// its closing parenthesis: state is field 3, utime 14 and stime 15.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	// USER_HZ is 100 on every Linux the bench runs on (it is fixed in the kernel's ABI
	// for /proc, whatever the kernel's own tick).
	return time.Duration(utime+stime) * (time.Second / 100)
}
