package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// rateLimitHeader posts a small /sync upload and returns the status and
// the RateLimit-Limit header: the burst, or the quota when the quota is
// the tighter constraint.
func (g *gateway) rateLimitHeader(key string) (int, string) {
	resp, _, err := g.postSmall(g.Client, key)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, resp.Header.Get("RateLimit-Limit")
}

// allReplicas waits, with one deadline for all of them, until every
// replica reports want as key's RateLimit-Limit, and returns how long
// that took.
func allReplicas(t *testing.T, gs []*gateway, key, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	pending := map[int]bool{}
	for i := range gs {
		pending[i] = true
	}
	eventually(t, within, func() string {
		for i := range pending {
			if s, got := gs[i].rateLimitHeader(key); s == 200 && got == want {
				delete(pending, i)
			}
		}
		if len(pending) > 0 {
			return fmt.Sprintf("%d replicas do not report RateLimit-Limit %s yet", len(pending), want)
		}
		return ""
	})
	return time.Since(start)
}

// same checks that every replica reports want for key now.
func same(t *testing.T, gs []*gateway, key, want, what string) {
	t.Helper()
	for i, g := range gs {
		if s, got := g.rateLimitHeader(key); s != 200 || got != want {
			t.Errorf("%s: replica %d: %d with RateLimit-Limit %q, want 200 with %q", what, i, s, got, want)
		}
	}
}

// TestSupportRaisesOneKeysLimit: with three replicas sharing a Redis
// keystore and limiter, one `keys update` raises one key's limit and
// quota on every replica within a second and leaves the other key alone;
// a temporary grant falls back by itself when it expires.
func TestSupportRaisesOneKeysLimit(t *testing.T) {
	rs := redistest.Start(t)
	// The quota (40) is the tighter constraint by default, so
	// RateLimit-Limit shows it; a grant with a burst over its quota shows
	// the new quota, which proves both were raised.
	gs := replicas(t, 3, rs.Addr, "redis", `    live: { rate: 1000, per: 1s, burst: 1000, quota: { requests: 40, per: 24h } }
    test: { rate: 1000, per: 1s, burst: 1000 }`, "")
	keyA := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "customer-a")
	keyB := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "customer-b")
	waitKey(t, gs, keyA)
	waitKey(t, gs, keyB)
	same(t, gs, keyA, "40", "before")
	same(t, gs, keyB, "40", "before")
	idOf := func(name string) string {
		for _, r := range gs[0].list() {
			if r.Name == name {
				return r.ID
			}
		}
		t.Fatalf("no key named %s", name)
		return ""
	}
	idA, idB := idOf("customer-a"), idOf("customer-b")

	// One command raises A's limit and quota.
	if out, errOut, err := gs[1].keygate("keys", "update", idA, "--rate", "2000", "--burst", "100000", "--quota", "50000/24h"); err != nil {
		t.Fatalf("keys update: %v\n%s%s", err, out, errOut)
	}
	took := allReplicas(t, gs, keyA, "50000", time.Second)
	t.Logf("raised limit live on 3 replicas after %s", took.Round(time.Millisecond))
	same(t, gs, keyB, "40", "the other key after the raise")
	out, _, err := gs[2].keygate("keys", "show", idA)
	if err != nil || !strings.Contains(out, "key override") || !strings.Contains(out, "50000/24h0m0s") {
		t.Errorf("keys show: %v\n%s", err, out)
	}

	// A temporary grant for B: a couple of seconds, then back by itself.
	until := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	if out, errOut, err := gs[2].keygate("keys", "update", idB, "--burst", "100000", "--quota", "60000/24h", "--until", until.Format(time.RFC3339)); err != nil {
		t.Fatalf("keys update --until: %v\n%s%s", err, out, errOut)
	}
	allReplicas(t, gs, keyB, "60000", time.Second)
	same(t, gs, keyA, "50000", "the other key during the grant")
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
	// The fallback needs no change message: each replica compares the
	// time with the grant's end on the request path.
	took = allReplicas(t, gs, keyB, "40", time.Second)
	t.Logf("grant expired on 3 replicas %s after its end", took.Round(time.Millisecond))
	same(t, gs, keyA, "50000", "the other key after the grant")

	// A resolved limit costs the request path no Redis call of its own:
	// still exactly one EVALSHA per admitted request. The Redis keystore's
	// background work (the change log's polls, a paged resync every resync_interval) and pub/sub pings
	// are not on the request path and do not grow with requests.
	flushes := func() (n float64) {
		for _, g := range gs {
			n += g.metric("keygate_usage_flushes_total", "outcome", "ok")
		}
		return n
	}
	// A full pass of the keystore (every resync_interval, 2s here, per
	// replica) reads every bucket: it counts by the passes that ended
	// during the run, and one per replica that may straddle either edge.
	passes := func() (n float64) {
		for _, g := range gs {
			n += g.metric("keygate_keystore_reloads_total", "result", "ok")
		}
		return n
	}
	flushesBefore, passesBefore := flushes(), passes()
	before, othersBefore := commandCalls(t, rs)
	began := time.Now()
	const n = 30
	for i := 0; i < n; i++ {
		if s, _ := gs[i%3].rateLimitHeader(keyA); s != 200 {
			t.Fatalf("request %d: %d", i, s)
		}
	}
	after, othersAfter := commandCalls(t, rs)
	// A usage flush is a script call too (one per replica per second that
	// had requests), not on the request path. Its metric moves just after
	// Redis ran it, so a flush at the edge of the run may be subtracted
	// without having been counted: up to one per replica too few, never
	// too many.
	after -= int(flushes() - flushesBefore)
	// The keystore polls its change log (XRANGE) every 500 ms per replica
	// when no message wakes it: background work that grows with time, not
	// with requests.
	polls := len(gs) * (int(time.Since(began)/(500*time.Millisecond)) + 2)
	fullPasses := int(passes()-passesBefore) + 2*len(gs)
	// What one full pass sends: an HSCAN page of each of the 256 record
	// and 256 consumer buckets (and the previous layout's two hashes; a
	// few keys here, one page each), the change log's last entry
	// (XREVRANGE, and XADD to start an empty log), the layout's three
	// EXISTS and the epoch's GET (counted with the scripts' GETs above).
	perPass := map[string]int{"hscan": 2*256 + 2, "xrevrange": 1, "xadd": 1, "exists": 3}
	t.Logf("%d requests in %s: %.0f full passes of the keystore ended meanwhile, %d HSCAN calls",
		n, time.Since(began).Round(time.Millisecond), passes()-passesBefore, othersAfter["hscan"]-othersBefore["hscan"])
	if d := after - before; d > n || d < n-len(gs) {
		t.Errorf("EVALSHA calls = %d for %d admitted requests, want exactly one each", d, n)
	}
	insideScript := map[string]int{"get": 2, "set": 1, "time": 1, "incrby": 1, "pexpire": 1, "pttl": 1}
	for name, c := range othersAfter {
		d := c - othersBefore[name]
		switch per, ok := insideScript[name]; {
		case ok:
			// A full pass also reads the keystore's epoch (GET).
			if name == "get" {
				d -= fullPasses
			}
			if d > per*n {
				t.Errorf("%d %s calls from %d scripts", d, name, n)
			}
		case name == "xrange":
			if d > polls {
				t.Errorf("%d xrange calls during %d requests: more than the change log's polls (%d)", d, n, polls)
			}
		case name == "hgetall" || name == "ping":
			if d > 2*len(gs) {
				t.Errorf("%d %s calls during %d requests: more than background work", d, name, n)
			}
		case perPass[name] > 0:
			if d > perPass[name]*fullPasses {
				t.Errorf("%d %s calls during %d requests: more than %d full passes of the keystore", d, name, n, fullPasses)
			}
		case name == "hincrby" || name == "expire" || name == "zadd":
			// The usage flush: one pipeline per replica per second,
			// whatever the number of requests (TestOneRedisRoundTrip…
			// checks its batching); this run lasts a second or two.
			if d > 8*len(gs)*3 {
				t.Errorf("%d %s calls during %d requests: more than the usage flushes", d, name, n)
			}
		case name == "hello" || name == "client":
			// A new pooled connection's setup, when a flush and a request
			// need one at the same moment.
		case d != 0:
			t.Errorf("%d extra %s round trips during the run", d, name)
		}
	}
}

// TestConsumerScopeSharesOneQuota: two keys of one consumer on a plan
// with scope consumer share one quota exactly across three replicas.
func TestConsumerScopeSharesOneQuota(t *testing.T) {
	rs := redistest.Start(t)
	const quota = 30
	gs := replicas(t, 3, rs.Addr, "redis", fmt.Sprintf(`    live: { rate: 1000, per: 1s, burst: 1000 }
    test: { rate: 1000, per: 1s, burst: 1000 }
  plans:
    team: { rate: 1000, per: 1s, burst: 1000, quota: { requests: %d, per: 24h }, scope: consumer }`, quota), "")
	out, errOut, err := gs[0].keygate("consumers", "create", "--name", "Acme", "--plan", "team", "--context", ctxA)
	if err != nil {
		t.Fatalf("consumers create: %v\n%s", err, errOut)
	}
	con := strings.TrimSpace(out)
	keys := []string{
		gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--consumer", con),
		gs[1].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--consumer", con),
	}
	for _, k := range keys {
		waitKey(t, gs, k)
	}
	var admitted, quotaRefusals atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 3*quota; i++ {
		wg.Add(1)
		go func(g *gateway, key string) {
			defer wg.Done()
			s, body := g.send(key)
			switch {
			case s == 200:
				admitted.Add(1)
			case s == 429 && strings.Contains(body, "quota") && strings.Contains(body, "consumer"):
				quotaRefusals.Add(1)
			default:
				t.Errorf("unexpected %d %s", s, body)
			}
		}(gs[i%3], keys[i%2])
	}
	wg.Wait()
	if admitted.Load() != quota || quotaRefusals.Load() != 2*quota {
		t.Errorf("two keys of one consumer: admitted %d, refused for quota %d; want exactly %d and %d", admitted.Load(), quotaRefusals.Load(), quota, 2*quota)
	}
	// A key outside the consumer keeps its own (unlimited) quota.
	other := gs[2].issue("--product", "extraction", "--env", "live", "--context", ctxA)
	waitKey(t, gs, other)
	if s, body := gs[0].send(other); s != 200 {
		t.Errorf("a key of no consumer: %d %s", s, body)
	}
}

// TestSupportRaisesOneKeysLimitThroughTheAPI: the same grant as above,
// made with one admin-API call (PATCH /v1/keys/{id} with an admin token)
// on one of three replicas sharing a Redis keystore, reaches every replica
// within a second, leaves the other key alone, and falls back by itself
// when its --until passes.
func TestSupportRaisesOneKeysLimitThroughTheAPI(t *testing.T) {
	rs := redistest.Start(t)
	gs := replicas(t, 3, rs.Addr, "redis", `    live: { rate: 1000, per: 1s, burst: 1000, quota: { requests: 40, per: 24h } }
    test: { rate: 1000, per: 1s, burst: 1000 }`, "")
	// Replica 0 also serves the admin API: restart it with the section.
	adminAddr := testkit.FreeAddr(t)
	gs[0].signal(syscall.SIGTERM)
	if err := gs[0].wait(30 * time.Second); err != nil {
		t.Fatalf("stopping replica 0: %v", err)
	}
	gs[0].rewriteConfig(func(c string) string {
		return c + fmt.Sprintf("admin_api:\n  enabled: true\n  listen: %q\n", adminAddr)
	})
	gs[0].start()

	keyA := gs[1].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "customer-a")
	keyB := gs[1].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "customer-b")
	waitKey(t, gs, keyA)
	waitKey(t, gs, keyB)
	same(t, gs, keyA, "40", "before")
	var idA string
	for _, r := range gs[1].list() {
		if r.Name == "customer-a" {
			idA = r.ID
		}
	}
	out, errOut, err := gs[1].keygate("admin-tokens", "create", "--name", "support", "--scopes", "keys:read,keys:write")
	if err != nil {
		t.Fatalf("admin-tokens create: %v\n%s", err, errOut)
	}
	api := &adminAPI{t: t, base: "https://" + adminAddr, token: strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}

	until := time.Now().Add(4 * time.Second).UTC().Truncate(time.Second)
	body := fmt.Sprintf(`{"override":{"burst":100000,"quota":"50000/24h","until":%q}}`, until.Format(time.RFC3339))
	if status, rec, _ := api.call("PATCH", "/v1/keys/"+idA, body); status != http.StatusOK {
		t.Fatalf("PATCH /v1/keys/%s: %d %v", idA, status, rec)
	}
	took := allReplicas(t, gs, keyA, "50000", time.Second)
	t.Logf("raised through the API, live on 3 replicas after %s", took.Round(time.Millisecond))
	same(t, gs, keyB, "40", "the other key after the raise")
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
	allReplicas(t, gs, keyA, "40", time.Second)
	same(t, gs, keyB, "40", "the other key after the grant")
	assertNoKeyInLogs(t, gs...)
}
