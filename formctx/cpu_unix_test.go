//go:build unix

package formctx

import (
	"syscall"
	"time"
)

// cpuTime is the process's CPU time so far (user and system), which a busy
// machine inflates less than wall time.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
