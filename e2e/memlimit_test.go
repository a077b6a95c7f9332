package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestMemoryLimitFromCgroup: keygate in a container (a cgroup with a
// memory limit) gives the Go collector that limit, times AUTOMEMLIMIT
// (0.9 by default), so that its heap is collected before it outgrows the
// container; an operator's GOMEMLIMIT wins, AUTOMEMLIMIT=off leaves it
// unset. The limit is what the operator sees on /metrics
// (go_gc_gomemlimit_bytes) and in the start-up log.
func TestMemoryLimitFromCgroup(t *testing.T) {
	t.Parallel()
	const limit = 512 << 20
	tests := []struct {
		name   string
		cgroup bool
		env    []string
		want   float64
		log    string // a line of the start-up log holds this
	}{
		{"the cgroup's limit, times 0.9", true, nil, math.Floor(0.9 * limit), `"from":"cgroup"`},
		{"AUTOMEMLIMIT is the share", true, []string{"AUTOMEMLIMIT=0.5"}, 0.5 * limit, `"ratio":0.5`},
		{"GOMEMLIMIT wins", true, []string{"GOMEMLIMIT=300MiB", "AUTOMEMLIMIT=0.5"}, 300 << 20, `"from":"GOMEMLIMIT"`},
		{"AUTOMEMLIMIT=off", true, []string{"AUTOMEMLIMIT=off"}, math.MaxInt64, `"memory limit off"`},
		{"no cgroup of its own: the test's limit, if any", false, nil, ownLimit(t), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := gwOpts{env: tc.env}
			if tc.cgroup {
				o.cgroup = memCgroup(t, limit)
			}
			g := startGateway(t, o)
			if got := g.metric("go_gc_gomemlimit_bytes"); got != tc.want {
				t.Errorf("go_gc_gomemlimit_bytes = %.0f, want %.0f", got, tc.want)
			}
			if tc.log != "" && !strings.Contains(g.logs.String(), tc.log) {
				t.Errorf("no start-up log line with %s:\n%s", tc.log, tail(g.logs.String(), 2000))
			}
		})
	}
}

// TestMemoryLimitFollowsTheCgroup: a container whose memory limit
// changes while keygate runs (a pod resized in place) gets the new limit
// in the Go runtime too, within keygate's 15 s between two reads.
func TestMemoryLimitFollowsTheCgroup(t *testing.T) {
	t.Parallel()
	const before, after = 512 << 20, 256 << 20
	dir := memCgroup(t, before)
	g := startGateway(t, gwOpts{cgroup: dir})
	if got, want := g.metric("go_gc_gomemlimit_bytes"), math.Floor(0.9*before); got != want {
		t.Fatalf("go_gc_gomemlimit_bytes = %.0f at start, want %.0f", got, want)
	}
	setCgroupLimit(t, dir, after)
	want := math.Floor(0.9 * after)
	testkit.Eventually(t, 30*time.Second, "the new limit", func() error {
		if got := g.metric("go_gc_gomemlimit_bytes"); got != want {
			return fmt.Errorf("go_gc_gomemlimit_bytes = %.0f, want %.0f", got, want)
		}
		return nil
	})
	if !strings.Contains(g.logs.String(), `"msg":"memory limit changed"`) {
		t.Errorf("no log line of the change:\n%s", tail(g.logs.String(), 2000))
	}
}

// ownLimit is what keygate sets in the test's own cgroup: 0.9 of its
// limit, or none.
func ownLimit(t *testing.T) float64 {
	limit, err := memlimit.FromCgroup()
	switch {
	case err == nil:
		return math.Floor(0.9 * float64(limit))
	case errors.Is(err, memlimit.ErrNoLimit):
		return math.MaxInt64
	}
	t.Fatalf("the test's own memory limit: %v", err)
	return 0
}

// TestMemoryEnvBad: an AUTOMEMLIMIT that is no share of the limit, or a
// KEYGATE_GC_FLOOR_MIB that is no size in MiB, stops keygate at start
// with a message that says what it wants.
func TestMemoryEnvBad(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOpts{skipStart: true})
	for _, tc := range []struct {
		name   string
		values []string
		want   string
	}{
		{"AUTOMEMLIMIT", []string{"2", "0", "-0.5", "ninety", "NaN"}, "want a share"},
		{"KEYGATE_GC_FLOOR_MIB", []string{"-1", "64MiB", "1e3", "4194305", " 64"}, "want the collector's heap floor in whole MiB"},
	} {
		for _, v := range tc.values {
			// A keygate that started anyway would serve until killed.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, binary, "serve", "--config", g.cfgPath)
			cmd.Env = append(os.Environ(), "GOGC=", tc.name+"="+v)
			out, err := cmd.CombinedOutput()
			cancel()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Errorf("%s=%s: %v, want exit status 1\n%s", tc.name, v, err, out)
			}
			if want := tc.name + "=" + strconv.Quote(v) + ": " + tc.want; !strings.Contains(string(out), want) {
				t.Errorf("%s=%s: output lacks %q:\n%s", tc.name, v, want, out)
			}
		}
	}
}

// memCgroup makes a cgroup with a memory limit of limit bytes under the
// test's own and returns its directory, removed when the test ends. A
// machine that does not let the test make one (not root, or no memory
// controller it may write) fails the test in CI, which runs as root,
// and skips it elsewhere.
func memCgroup(t *testing.T, limit int64) string {
	t.Helper()
	dir, file, err := newMemCgroup(limit)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("a cgroup with a memory limit: %v", err)
		}
		t.Skipf("a cgroup with a memory limit: %v", err)
	}
	t.Cleanup(func() {
		// keygate is killed by startGateway's cleanup, which runs first;
		// the cgroup can go once it has exited.
		testkit.Eventually(t, testkit.HangCheck, "cgroup removed", func() error { return os.Remove(dir) })
	})
	if got, err := os.ReadFile(filepath.Join(dir, file)); err != nil || strings.TrimSpace(string(got)) != strconv.FormatInt(limit, 10) {
		t.Fatalf("%s: %q, %v; want %d", file, got, err, limit)
	}
	return dir
}

// setCgroupLimit changes the memory limit of the cgroup dir.
func setCgroupLimit(t *testing.T, dir string, limit int64) {
	t.Helper()
	for _, file := range []string{"memory.limit_in_bytes", "memory.max"} {
		p := filepath.Join(dir, file)
		if _, err := os.Stat(p); err == nil {
			if err := os.WriteFile(p, []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("%s has no memory limit file", dir)
}

// newMemCgroup makes the cgroup: under the memory controller's hierarchy
// on cgroup v1, in the unified one on v2. It returns the directory and
// the file that holds its limit.
func newMemCgroup(limit int64) (dir, file string, err error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	name := fmt.Sprintf("keygate-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())
	switch {
	case v1 != "":
		dir, file = filepath.Join("/sys/fs/cgroup/memory", v1, name), "memory.limit_in_bytes"
	case v2 != "":
		dir, file = filepath.Join("/sys/fs/cgroup", v2, name), "memory.max"
	default:
		return "", "", errors.New("no memory cgroup in /proc/self/cgroup")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = os.Remove(dir)
		return "", "", err
	}
	return dir, file, nil
}

// TestGCHeapFloor: keygate raises the Go collector's minimum heap to 64
// MiB (KEYGATE_GC_FLOOR_MIB), so that a replica with little live heap
// does not collect several times a second under load. With one key its
// GOGC, on /metrics as go_gc_gogc_percent, rises above 100 once it has
// collected; 0 turns the floor off, an operator's GOGC wins, and the
// start-up log says which.
func TestGCHeapFloor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		gogc func(float64) bool
		want string
		log  string
	}{
		{"the default floor", nil, func(p float64) bool { return p > 100 }, "above 100", `"msg":"gc heap floor","floor_mib":64`},
		{"a larger floor", []string{"KEYGATE_GC_FLOOR_MIB=256"}, func(p float64) bool { return p > 1000 }, "above 1000", `"floor_mib":256`},
		{"KEYGATE_GC_FLOOR_MIB=0", []string{"KEYGATE_GC_FLOOR_MIB=0"}, func(p float64) bool { return p == 100 }, "100", `"msg":"gc heap floor off","from":"KEYGATE_GC_FLOOR_MIB=0"`},
		{"GOGC wins", []string{"GOGC=50"}, func(p float64) bool { return p == 50 }, "50", `"msg":"gc heap floor off","from":"GOGC","GOGC":"50"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The test's own environment may set either: "" is unset.
			env := append([]string{"GOGC=", "KEYGATE_GC_FLOOR_MIB="}, tc.env...)
			g := startGateway(t, gwOpts{env: env})
			key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
			eventually(t, 10*time.Second, func() string { // the key file is reloaded
				if s, _, _ := g.post(key, ctxA, []byte("%PDF-1.4")); s != 200 {
					return fmt.Sprint(s)
				}
				return ""
			})
			file := bytes.Repeat([]byte("%PDF-1.4 "), 1<<10)
			collected := g.metric("go_gc_duration_seconds_count")
			// GOGC is set after a collection: send uploads until one ran.
			testkit.Eventually(t, 60*time.Second, "a collection", func() error {
				for range 50 {
					if s, b, _ := g.post(key, ctxA, file); s != 200 {
						t.Fatalf("POST /sync: %d %s", s, b)
					}
				}
				if g.metric("go_gc_duration_seconds_count") == collected {
					return errors.New("no collection yet")
				}
				return nil
			})
			got := g.metric("go_gc_gogc_percent")
			t.Logf("go_gc_gogc_percent = %.0f", got)
			if !tc.gogc(got) {
				t.Errorf("go_gc_gogc_percent = %.0f, want %s", got, tc.want)
			}
			if !strings.Contains(g.logs.String(), tc.log) {
				t.Errorf("no start-up log line with %s:\n%s", tc.log, tail(g.logs.String(), 2000))
			}
		})
	}
}
