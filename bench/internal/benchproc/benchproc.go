// Package benchproc holds what the bench programs (bench/peers,
// bench/churn) share about the processes they start: CPU time of a
// process tree from /proc, free loopback ports, stopping a process group,
// finding a peer's binary and keygate's module root.
package benchproc

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keygate/keygate/internal/testsupport/freeport"
)

// TickMicros is one clock tick of /proc/pid/stat in µs (USER_HZ is 100
// on Linux).
const TickMicros = 10000

// Tree is pid and all its descendants.
func Tree(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := StatFields(p); len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// StatFields are /proc/pid/stat's fields after the command name, starting
// with the state (field 3).
func StatFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// CPUTicks is utime+stime of the process tree, in clock ticks (1/100 s).
func CPUTicks(pid int) int64 {
	var sum int64
	for _, p := range Tree(pid) {
		f := StatFields(p)
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			sum += u + s
		}
	}
	return sum
}

// MachineTicks is the machine's CPU time from /proc/stat, over all
// CPUs, in clock ticks: all of it (idle included) and the part stolen
// by the hypervisor for other guests (0, 0 when unreadable).
func MachineTicks() (total, steal int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	return parseStat(b)
}

// parseStat reads the first line of /proc/stat ("cpu" and at least
// eight counters: user nice system idle iowait irq softirq steal); 0, 0
// for anything else, or for a counter that is not a non-negative number.
func parseStat(b []byte) (total, steal int64) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	// guest and guest_nice (f[9:]) are already in user and nice.
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || total > math.MaxInt64-n {
			return 0, 0
		}
		total += n
		if i == 7 {
			steal = n
		}
	}
	return total, steal
}

// StealShare is the share of the machine's CPU time stolen between two
// MachineTicks readings (0 when none passed).
func StealShare(total0, steal0, total1, steal1 int64) float64 {
	if total1 <= total0 {
		return 0
	}
	return float64(steal1-steal0) / float64(total1-total0)
}

// StealNote is " (steal N%)" when the hypervisor took 1% or more of the
// machine's CPU time during a run (a share from StealShare), else "": the
// mark the benches' per-rep figures carry.
func StealNote(share float64) string {
	if share < 0.01 {
		return ""
	}
	return fmt.Sprintf(" (steal %.0f%%)", 100*share)
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, below the kernel's ephemeral range (freeport.Loopback says why).
func FreeAddr() (string, error) {
	p, err := freeport.Loopback()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// Stop ends a process group the bench started, and waits for it.
func Stop(c *exec.Cmd) {
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func LookPath(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		if p := "/usr/sbin/" + n; FileExists(p) {
			return p
		}
	}
	return ""
}

func FileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// ModuleRoot finds the directory of keygate's go.mod from the working
// directory up.
func ModuleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/keygate/keygate\n")) {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", errors.New("keygate's go.mod not found above the working directory")
		}
		d = p
	}
}
