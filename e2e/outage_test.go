package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keystore"
)

// TestRedisKeystoreChangesReachEveryReplica: keys issued, rotated and
// revoked with the CLI against the Redis keystore are seen by all three
// running replicas within a second.
func TestRedisKeystoreChangesReachEveryReplica(t *testing.T) {
	rs := redistest.Start(t)
	gs := replicas(t, 3, rs.Addr, "redis", "", "")
	key := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA)
	everyReplica(t, gs, testkit.HangCheck, "issued key accepted", func(g *gateway) string {
		if s, b := g.send(key); s != 200 {
			return fmt.Sprintf("%d %s", s, b)
		}
		return ""
	})
	recs := gs[1].list()
	if len(recs) != 1 || recs[0].Context != ctxA {
		t.Fatalf("list from another replica's config: %+v", recs)
	}
	out, errOut, err := gs[2].keygate("keys", "rotate", recs[0].ID)
	if err != nil {
		t.Fatalf("rotate: %v %s", err, errOut)
	}
	newKey := strings.SplitN(out, "\n", 2)[0]
	everyReplica(t, gs, testkit.HangCheck, "rotation", func(g *gateway) string {
		s1, _ := g.send(key)
		s2, _ := g.send(newKey)
		if s1 != 401 || s2 != 200 {
			return fmt.Sprintf("old %d new %d", s1, s2)
		}
		return ""
	})
	var newID string
	for _, r := range gs[0].list() {
		if r.Status == "active" {
			newID = r.ID
		}
	}
	if _, errOut, err := gs[0].keygate("keys", "revoke", newID); err != nil {
		t.Fatalf("revoke: %v %s", err, errOut)
	}
	everyReplica(t, gs, testkit.HangCheck, "revocation", func(g *gateway) string {
		if s, b := g.send(newKey); s != 401 || !strings.Contains(b, "revoked") {
			return fmt.Sprintf("%d %s", s, b)
		}
		return ""
	})
}

func everyReplica(t *testing.T, gs []*gateway, within time.Duration, what string, f func(*gateway) string) {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]string, len(gs))
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := start.Add(within)
			for {
				if errs[i] = f(g); errs[i] == "" || time.Now().After(deadline) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("%s: replica %d not within %s (hang check): %s", what, i, within, e)
		}
	}
	t.Logf("%s on every replica after %s", what, time.Since(start).Round(time.Millisecond))
}

// TestRedisOutagePolicy kills (SIGKILL) or freezes (SIGSTOP) Redis under
// three replicas and checks the documented outage policy, then brings it
// back and checks that normal service resumes within 5 s.
func TestRedisOutagePolicy(t *testing.T) {
	for _, c := range []struct {
		outage, mode string
	}{{"kill", "open"}, {"freeze", "open"}, {"kill", "closed"}, {"freeze", "closed"}} {
		t.Run(c.outage+" "+c.mode, func(t *testing.T) {
			// Persistence on, as production Redis runs: a killed Redis
			// comes back with its keys.
			rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
			gs := outageReplicas(t, 3, rs.Addr, "redis", `    live: { rate: 30, per: 1s, burst: 30 }
    test: { rate: 30, per: 1s, burst: 30 }`, "")
			// failure_mode is set by restarting with it: replicas() writes
			// "open"; for closed, restart each replica with the change.
			if c.mode == "closed" {
				for _, g := range gs {
					g.signal(syscall.SIGTERM)
					_ = g.wait(10 * time.Second)
					g.rewriteConfig(func(s string) string {
						return strings.Replace(s, "ratelimit:\n  backend: redis", "ratelimit:\n  failure_mode: closed\n  backend: redis", 1)
					})
					g.exited = make(chan error, 1)
					g.start()
				}
			}
			key := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA)
			waitKey(t, gs, key)

			if c.outage == "kill" {
				rs.Kill()
			} else {
				rs.Freeze()
			}
			unknown, _ := keystore.Generate(keystore.Live)

			// Let the breakers open: a few requests per replica.
			for _, g := range gs {
				for i := 0; i < 5; i++ {
					g.send(unknown)
					g.send(key)
				}
			}
			var maxLatency time.Duration
			var admitted, limited, unavailable, other atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, g := range gs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < 2*time.Second {
						t0 := time.Now()
						s, b := g.send(key)
						su, bu := g.send(unknown)
						d := time.Since(t0) / 2
						mu.Lock()
						maxLatency = max(maxLatency, d)
						mu.Unlock()
						if su != 503 || !strings.Contains(bu, "key store unavailable") {
							other.Add(1)
							t.Errorf("unknown key during the outage: %d %s", su, bu)
							return
						}
						switch {
						case s == 200:
							admitted.Add(1)
						case s == 429:
							limited.Add(1)
						case s == 503:
							unavailable.Add(1)
						default:
							other.Add(1)
							t.Errorf("cached key during the outage: %d %s", s, b)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			t.Logf("%s/%s: admitted %d, 429 %d, 503 %d in %.1fs; slowest request %s", c.outage, c.mode, admitted.Load(), limited.Load(), unavailable.Load(), elapsed, maxLatency)
			// A hang check: with the breaker open no request waits on Redis
			// (the slowest is logged above); Redis comes back only after
			// this loop, so a request held until then would not return.
			if maxLatency > testkit.HangCheck {
				t.Errorf("a request took %s with the breaker open; want no wait on Redis", maxLatency)
			}
			switch c.mode {
			case "open":
				if admitted.Load() == 0 || unavailable.Load() != 0 {
					t.Errorf("open: cached key admitted %d, 503 %d; want service from the local fallback", admitted.Load(), unavailable.Load())
				}
				// Each replica admits a third of the limit: 3 × (30/3 burst + 30/3 per s).
				if bound := 30 + 30*elapsed + 3; float64(admitted.Load()) > bound*1.1 {
					t.Errorf("open: admitted %d, above the per-replica share total %.0f", admitted.Load(), bound)
				}
			case "closed":
				if admitted.Load() != 0 || unavailable.Load() == 0 {
					t.Errorf("closed: admitted %d, 503 %d; want 503", admitted.Load(), unavailable.Load())
				}
			}
			for _, g := range gs {
				resp, err := http.Get(g.Admin + "/readyz")
				if err == nil {
					var b strings.Builder
					_, _ = fmt.Fprint(&b, readAll(resp))
					if !strings.Contains(b.String(), "degraded") {
						t.Errorf("/readyz does not report the degraded state: %s", b.String())
					}
				}
			}

			if c.outage == "kill" {
				rs.Restart()
			} else {
				rs.Thaw()
			}
			fresh := gs[0].issueWithin(testkit.HangCheck, "--product", "extraction", "--env", "live", "--context", ctxA)
			everyReplica(t, gs, testkit.HangCheck, "recovery", func(g *gateway) string {
				time.Sleep(100 * time.Millisecond) // stay under the key's rate
				s1, _ := g.send(key)
				s2, _ := g.send(fresh)
				s3, _ := g.send(unknown)
				if s1 != 200 || s2 != 200 || s3 != 401 {
					return fmt.Sprintf("cached %d, new %d, unknown %d", s1, s2, s3)
				}
				return ""
			})
		})
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// issueWithin retries `keys issue` until Redis answers.
func (g *gateway) issueWithin(within time.Duration, args ...string) string {
	g.t.Helper()
	var key string
	testkit.Eventually(g.t, within, "keys issue", func() error {
		out, errOut, err := g.keygate(append([]string{"keys", "issue"}, args...)...)
		if err != nil {
			return fmt.Errorf("%w: %s", err, errOut)
		}
		key = strings.SplitN(out, "\n", 2)[0]
		return nil
	})
	return key
}
