package e2e

import (
	"bufio"
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

// TestMemoryEnvBad: an AUTOMEMLIMIT that is no share of the limit stops
// keygate at start with a message that says what it wants.
func TestMemoryEnvBad(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOpts{skipStart: true})
	for _, tc := range []struct {
		name   string
		values []string
		want   string
	}{
		{"AUTOMEMLIMIT", []string{"2", "0", "-0.5", "ninety", "NaN"}, "want a share"},
	} {
		for _, v := range tc.values {
			// A keygate that started anyway would serve until killed.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, binary, "serve", "--config", g.cfgPath)
			cmd.Env = append(os.Environ(), tc.name+"="+v)
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

// TestGOGC: keygate leaves GOGC to the runtime (docs/explanation/
// memory-sizing.md): 100 unless the operator sets it, on /metrics as
// go_gc_gogc_percent. KEYGATE_GC_FLOOR_MIB, read by an earlier build, no
// longer changes it: keygate starts, with a warning in its log.
func TestGOGC(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		want float64
		log  string // a line of the start-up log holds this ("": none)
	}{
		{"the runtime's default", nil, 100, ""},
		{"the operator's GOGC", []string{"GOGC=400"}, 400, ""},
		{"KEYGATE_GC_FLOOR_MIB is ignored with a warning", []string{"KEYGATE_GC_FLOOR_MIB=64"}, 100,
			`"msg":"KEYGATE_GC_FLOOR_MIB is no longer read`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The test's own environment may set either: "" is unset.
			env := append([]string{"GOGC=", "KEYGATE_GC_FLOOR_MIB="}, tc.env...)
			g := startGateway(t, gwOpts{env: env})
			if got := g.metric("go_gc_gogc_percent"); got != tc.want {
				t.Errorf("go_gc_gogc_percent = %.0f, want %.0f", got, tc.want)
			}
			logs := g.logs.String()
			if tc.log != "" && !strings.Contains(logs, tc.log) {
				t.Errorf("no start-up log line with %s:\n%s", tc.log, tail(logs, 2000))
			}
			if tc.log == "" && strings.Contains(logs, "KEYGATE_GC_FLOOR_MIB") {
				t.Errorf("a warning about KEYGATE_GC_FLOOR_MIB, which is unset:\n%s", tail(logs, 2000))
			}
		})
	}
}
