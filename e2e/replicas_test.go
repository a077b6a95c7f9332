package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// slowMachineRedis (lines of the redis section) and slowMachineRateLimit
// (of the ratelimit section, whose redis_timeout also bounds the Redis
// keystore's calls) give Redis a second, for the tests that do not stop
// it: a loopback read that a loaded test machine stalls past the
// product's 100 ms would make a lookup fail or hand a decision to the
// local fallback, which is not what those tests are about.
const (
	slowMachineRedis     = "  read_timeout: 1s\n  write_timeout: 1s\n"
	slowMachineRateLimit = "  redis_timeout: 1s\n"
)

// replicas starts n gateway processes that share one keystore and one
// Redis-backed limiter, as operators run them behind a load balancer.
// Their Redis calls may take a second: these tests count what Redis
// decides, and a loopback read that the loaded test machine stalls past
// the product's 100 ms would hand a decision to the local fallback.
func replicas(t *testing.T, n int, redisAddr, keystoreBackend, limits string, extra string) []*gateway {
	t.Helper()
	return replicasLimited(t, n, redisAddr, keystoreBackend, limits, extra, "")
}

// outageReplicas is replicas with the product's 100 ms Redis timeouts,
// for the tests that stop or freeze Redis under them.
func outageReplicas(t *testing.T, n int, redisAddr, keystoreBackend, limits string, extra string) []*gateway {
	t.Helper()
	return replicasWith(t, n, redisAddr, keystoreBackend, limits, extra, "", 100*time.Millisecond)
}

// replicasLimited is replicas with more lines for their ratelimit
// section (each indented, ending in a newline).
func replicasLimited(t *testing.T, n int, redisAddr, keystoreBackend, limits, extra, ratelimit string) []*gateway {
	t.Helper()
	return replicasWith(t, n, redisAddr, keystoreBackend, limits, extra, ratelimit, time.Second)
}

func replicasWith(t *testing.T, n int, redisAddr, keystoreBackend, limits, extra, ratelimit string, timeout time.Duration) []*gateway {
	t.Helper()
	shared := t.TempDir() + "/keys.yaml"
	var gs []*gateway
	for i := 0; i < n; i++ {
		g := startGateway(t, gwOpts{
			keystore:   shared,
			limitsYAML: limits,
			extra: fmt.Sprintf(`redis:
  addrs: [%q]
  read_timeout: %[2]s
  write_timeout: %[2]s
  dial_timeout: %[2]s
%[3]s`, redisAddr, timeout, extra),
			skipStart: true,
		})
		// keystore and ratelimit sections are set through extra-less edits:
		g.rewriteConfig(func(c string) string {
			c = strings.Replace(c, "keystore:\n  backend: file", "keystore:\n  backend: "+keystoreBackend+"\n  resync_interval: 2s", 1)
			c = strings.Replace(c, "ratelimit:\n  backend: local", fmt.Sprintf("ratelimit:\n%s  backend: redis\n  replicas: %d\n  breaker_backoff: 500ms\n  redis_timeout: %s", ratelimit, n, timeout), 1)
			return c
		})
		gs = append(gs, g)
	}
	for _, g := range gs {
		g.start()
	}
	return gs
}

// postSmall posts a small /sync upload with key through c, plus headers given
// as name, value pairs, and returns the response and its body, read.
func (g *gateway) postSmall(c *http.Client, key string, hdr ...string) (*http.Response, []byte, error) {
	ct, body := testkit.Form(g.t, testkit.Part{Name: "contextId", Value: ctxA}, testkit.Part{Name: "id", Value: "2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a"}, testkit.Part{Name: "files", Value: "%PDF-1.4 replica"})
	req, _ := http.NewRequest("POST", g.API+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("X-Api-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// send posts a small /sync upload and returns the status and body.
func (g *gateway) send(key string) (int, string) {
	resp, b, err := g.postSmall(g.Client, key)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

// TestReplicasShareOneLimit hammers one key through three replicas for
// 5 s. One limit across all of them admits about burst + rate × elapsed,
// not three times that: with every request decided in Redis, and with
// leases (ratelimit.lease), where a replica admits a busy key's requests
// from cells it took from Redis beforehand.
func TestReplicasShareOneLimit(t *testing.T) {
	for _, c := range []struct {
		name        string
		rate, burst int
		lease       string
	}{
		{"every request in Redis", 5, 5, ""},
		{"leases of 20ms", 100, 100, "  lease: 20ms\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := redistest.Start(t)
			lim := fmt.Sprintf("{ rate: %d, per: 1s, burst: %d }", c.rate, c.burst)
			gs := replicasLimited(t, 3, rs.Addr, "file", "    live: "+lim+"\n    test: "+lim, "", c.lease)
			key := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA)
			waitKey(t, gs, key)

			var admitted, refused, other atomic.Int64
			start := time.Now()
			stop := start.Add(5 * time.Second)
			var wg sync.WaitGroup
			for _, g := range gs {
				for range 3 {
					wg.Go(func() {
						for time.Now().Before(stop) {
							switch s, _ := g.send(key); s {
							case 200:
								admitted.Add(1)
							case 429:
								refused.Add(1)
							default:
								other.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			want := float64(c.burst) + float64(c.rate)*elapsed
			ratio := float64(admitted.Load()) / want
			t.Logf("3 replicas, rate %d/s burst %d, %.2fs: admitted %d, refused %d, expected %.1f: ratio %.3f", c.rate, c.burst, elapsed, admitted.Load(), refused.Load(), want, ratio)
			if other.Load() != 0 {
				t.Errorf("%d answers were neither 200 nor 429", other.Load())
			}
			if refused.Load() == 0 {
				t.Fatal("nothing was refused: the test did not reach the limit")
			}
			if ratio < 0.9 || ratio > 1.1 {
				t.Errorf("admitted/expected = %.3f, want within 10%%", ratio)
			}
			var leased float64
			for _, g := range gs {
				leased += g.metric("keygate_ratelimit_leased_decisions_total")
			}
			if (c.lease != "") != (leased > 0) {
				t.Errorf("%v requests admitted from leases, with lease %q", leased, c.lease)
			}
		})
	}
}

// waitKey waits until every replica knows key, without spending any of
// its rate limit or quota: GET /sync is answered 405 after the key check
// and before the limiter (401 while the key is unknown).
func waitKey(t *testing.T, gs []*gateway, key string) {
	t.Helper()
	for _, g := range gs {
		eventually(t, testkit.HangCheck, func() string {
			req, _ := http.NewRequest("GET", g.API+"/sync", nil)
			req.Header.Set("X-Api-Key", key)
			resp, err := g.Client.Do(req)
			if err != nil {
				return err.Error()
			}
			resp.Body.Close()
			if resp.StatusCode != 405 {
				return fmt.Sprintf("replica %s: %d", g.API, resp.StatusCode)
			}
			return ""
		})
	}
}

// TestQuotaExactAcrossReplicas: a test key's quota of N is N across three
// replicas, then 429 with "quota".
func TestQuotaExactAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	const quota = 30
	gs := replicas(t, 3, rs.Addr, "file", fmt.Sprintf(`    live: { rate: 1000, per: 1s, burst: 1000 }
    test: { rate: 1000, per: 1s, burst: 1000, quota: { requests: %d, per: 24h } }`, quota), "")
	key := gs[0].issue("--product", "extraction", "--env", "test", "--context", ctxA)
	waitKey(t, gs, key)
	var admitted, quotaRefusals atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 3*quota; i++ {
		wg.Add(1)
		go func(g *gateway) {
			defer wg.Done()
			s, body := g.send(key)
			switch {
			case s == 200:
				admitted.Add(1)
			case s == 429 && strings.Contains(body, "quota"):
				quotaRefusals.Add(1)
			default:
				t.Errorf("unexpected %d %s", s, body)
			}
		}(gs[i%3])
	}
	wg.Wait()
	if admitted.Load() != quota || quotaRefusals.Load() != 2*quota {
		t.Errorf("admitted %d, refused for quota %d; want exactly %d and %d", admitted.Load(), quotaRefusals.Load(), quota, 2*quota)
	}
}

func commandCalls(t *testing.T, rs *redistest.Server) (evalsha int, others map[string]int) {
	t.Helper()
	out, err := rs.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	others = map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		name := strings.TrimPrefix(line[:strings.Index(line, ":")], "cmdstat_")
		m := regexp.MustCompile(`calls=(\d+)`).FindStringSubmatch(line)
		n, _ := strconv.Atoi(m[1])
		if name == "evalsha" {
			evalsha = n
		} else if name != "info" {
			others[name] = n
		}
	}
	return evalsha, others
}

// TestOneRedisRoundTripPerAdmittedRequest reads Redis INFO commandstats
// before and after a run: each admitted request cost exactly one EVALSHA
// and nothing else. The usage flushes are counted apart: one pipeline
// (a script call, and ZADDs once a minute) per replica per flush interval, about
// seconds elapsed × replicas, whatever the number of requests.
func TestOneRedisRoundTripPerAdmittedRequest(t *testing.T) {
	rs := redistest.Start(t)
	gs := replicas(t, 3, rs.Addr, "file", "", "")
	key := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA)
	waitKey(t, gs, key)
	for i := 0; i < 6; i++ { // open each replica's Redis connection (HELLO, script) first
		if s, b := gs[i%3].send(key); s != 200 {
			t.Fatalf("warm-up %d: %d %s", i, s, b)
		}
	}
	flushes := func() (n float64) {
		for _, g := range gs {
			n += g.metric("keygate_usage_flushes_total", "outcome", "ok")
		}
		return n
	}
	time.Sleep(1500 * time.Millisecond) // and the usage flush's connection
	flushesBefore := flushes()
	before, othersBefore := commandCalls(t, rs)
	start := time.Now()
	const n = 60
	for i := 0; i < n; i++ {
		if s, b := gs[i%3].send(key); s != 200 {
			t.Fatalf("request %d: %d %s", i, s, b)
		}
		time.Sleep(40 * time.Millisecond) // spread over a few flush intervals
	}
	time.Sleep(1500 * time.Millisecond) // the last flushes
	after, othersAfter := commandCalls(t, rs)
	flushed := int(flushes() - flushesBefore)
	elapsed := time.Since(start).Seconds()
	// The flushes below are scripts too: one call per flush. A flush's
	// metric moves just after Redis ran it, so one at the edge of the run
	// may be subtracted without having been counted: up to one per
	// replica too few, never too many.
	t.Logf("%d admitted requests: %d EVALSHA calls", n, after-before-flushed)
	if d := after - before - flushed; d > n || d < n-len(gs) {
		t.Errorf("EVALSHA calls = %d for %d admitted requests (and %d flushes), want exactly one each", after-before, n, flushed)
	}
	// Redis counts the commands a script runs inside EVALSHA as well; those
	// are no round trips. Anything else sent during the run would be one.
	insideScript := map[string]int{"get": 2, "set": 1, "time": 1, "incrby": 1, "pexpire": 1, "pttl": 1}
	t.Logf("%.1fs, 3 replicas: %d usage flushes", elapsed, flushed)
	if flushed < 1 || float64(flushed) > 3*(elapsed+1) {
		t.Errorf("%d usage flushes in %.1fs on 3 replicas, want between 1 and about one per second per replica", flushed, elapsed)
	}
	// One key, all by API key: each flush is one pipeline of one script
	// call (its HINCRBYs of admitted, bytes_in and the day's api_key count
	// for the migration report, with an EXPIRE only for a field it
	// creates: the warm-up made them). No ZADD: each replica's warm-up
	// flush wrote the key's last uses (last use, last direct API-key use)
	// seconds ago, and a replica writes them again only once they moved
	// by usage.last_used_resolution (a minute). A warm-up flush late
	// enough to fall inside the run is two ZADDs of that replica.
	if d := othersAfter["hincrby"] - othersBefore["hincrby"]; d != 3*flushed {
		t.Errorf("%d hincrby calls for %d flushes, want %d", d, flushed, 3*flushed)
	}
	if d := othersAfter["zadd"] - othersBefore["zadd"]; d > 2*len(gs) {
		t.Errorf("%d zadd calls for %d flushes within a minute of the warm-up's, want none", d, flushed)
	}
	delete(othersAfter, "hincrby")
	delete(othersAfter, "zadd")
	if d := othersAfter["expire"] - othersBefore["expire"]; d > 2*3 { // an hour or a day may turn during the run
		t.Errorf("%d expire calls for %d flushes of keys whose hashes exist", d, flushed)
	}
	delete(othersAfter, "expire")
	// The flusher and a request may each need a connection at the same
	// moment: the pool then dials one more (HELLO, CLIENT SETINFO). That
	// is once per connection, not per request.
	for _, name := range []string{"hello", "client|setinfo"} {
		if d := othersAfter[name] - othersBefore[name]; d > 3*2 {
			t.Errorf("%d %s calls: more new connections than the pool's growth explains", d, name)
		}
		delete(othersAfter, name)
	}
	for name, c := range othersAfter {
		d := c - othersBefore[name]
		if per, ok := insideScript[name]; ok {
			if d > per*n {
				t.Errorf("%d %s calls from %d scripts", d, name, n)
			}
			continue
		}
		if d != 0 {
			t.Errorf("%d extra %s round trips during the run", d, name)
		}
	}
}
