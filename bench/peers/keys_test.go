package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSmokeKeys runs `-keys 1000 -smoke` on the four keygate targets (and
// nginx-lua's two where nginx's Lua module is installed). It
// proves that the many-keys targets answer 200 to the load spread over
// their keys (no errors anywhere, and keygate's access log names every
// one of the 1000 keys in the warm-up and again in the measured load),
// that the many-keys tables come out, and that every rate-limit, quota
// and usage key the Redis limiter's keygate wrote has a TTL. It asserts
// nothing about speed.
func TestSmokeKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	const n = 1000
	targets := "keygate,keygate-redis,keygate-keys,keygate-redis-keys"
	wants := []string{"| keygate-keys | keygate |", "| keygate-redis-keys | keygate-redis |", "Memory of each target that checks keys right after", "| target | RSS MiB | PSS MiB |", "bytes per active key", "| quota counter (q:{id}) | 1000 | 0 |"}
	// nginx checking the key in Lua, with the 1000 keys' hashes.
	needTools(t, "wrk", "nginx", "nginx-lua")
	targets += ",nginx-lua,nginx-lua-keys"
	wants = append(wants, "| nginx-lua-keys | nginx-lua |")
	out, errb := runLogged(t, Options{Smoke: true, Keys: n, Targets: targets}, 5*time.Minute)
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	noFailedRequests(t, errb)
	used := regexp.MustCompile(`(keygate-\S+): keys used: (\d+) in the warm-up, (\d+) in the measured load`).FindAllStringSubmatch(errb, -1)
	if len(used) != 2 {
		t.Fatalf("want the keys used by 2 many-keys targets, got %q", used)
	}
	for _, m := range used {
		if m[2] != strconv.Itoa(n) || m[3] != strconv.Itoa(n) {
			t.Errorf("%s: keys used in the warm-up %s, in the measured load %s; want all %d in each", m[1], m[2], m[3], n)
		}
	}
	// The TTL audit: every rate-limit bucket, quota counter and usage
	// hash expires.
	rows := regexp.MustCompile(`(?m)^\| ((?:rate-limit bucket|quota counter|usage)[^|]*) \| (\d+) \| (\d+) \|$`).FindAllStringSubmatch(out, -1)
	if len(rows) < 3 {
		t.Fatalf("want the TTL audit's quota and usage rows, got %q", rows)
	}
	for _, r := range rows {
		if r[3] != "0" {
			t.Errorf("%s: %s of %s keys have no TTL", r[1], r[3], r[2])
		}
	}
}

// TestKeysOverTLS: a profile of keygate with many keys over TLS warms
// every key over https and profiles the load (the warm-up used to send
// plain http to a TLS listener); the measured run refuses -keys and
// -refusals with -tls, whose tables have no rows for them, rather than
// print tables without them.
func TestKeysOverTLS(t *testing.T) {
	for _, o := range []Options{{TLS: true, Keys: 10}, {TLS: true, Refusals: true}} {
		if err := Run(context.Background(), o, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "plain mode only") {
			t.Errorf("%+v: %v, want it refused: plain mode only", o, err)
		}
	}
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	out, errb := runLogged(t, Options{Profile: prof, TLS: true, Keys: 300, Duration: time.Second, Sizes: "256"}, 5*time.Minute)
	if !strings.Contains(errb, "warm-up sent each of 300 keys once") || !strings.Contains(out, "keygate 256 B:") {
		t.Errorf("want the warm-up of 300 keys and the profile's figure, got\n%s%s", errb, out)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("profile: %v", err)
	}
}

// TestOnlySideBySideKeys: with -keys, side by side pairs each many-keys
// target with the same keygate on one key, after sending every key once,
// and every request of every round is answered 200.
func TestOnlySideBySideKeys(t *testing.T) {
	out, errb := runSideBySide(t, Options{Keys: 300, Targets: "keygate,keygate-keys,keygate-redis,keygate-redis-keys"}, 3*time.Minute)
	for _, want := range []string{"| keygate-keys | keygate | 256 B | **", "| keygate-redis-keys | keygate-redis | 256 B | **", "against the same keygate with one key"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, name := range []string{"keygate-keys", "keygate-redis-keys"} {
		if n := strings.Count(errb, name+": warm-up sent each of 300 keys once"); n != 1 {
			t.Errorf("%s warmed %d times, want once", name, n)
		}
	}
	for _, line := range strings.Split(errb, "\n") {
		if strings.Contains(line, "side by side") && !strings.HasSuffix(line, " 0 errors") {
			t.Errorf("a round failed requests: %s", line)
		}
	}
}
