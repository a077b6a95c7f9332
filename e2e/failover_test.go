package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// The failover tests run two keygate replicas on a Redis keystore and the
// Redis limiter, under steady load of valid requests and churn (issues
// and revocations through the admin API), and then make Redis fail the
// way a fleet's Redis fails: a Sentinel primary that dies with
// replication lag, a Cluster primary SIGKILLed. They check what keygate
// promises (docs: the replicas guide's guarantees table).

// failoverTimeout bounds each Redis call of the replicas: the product's
// default is 100 ms; this leaves room for a loaded test machine (under
// -race, beside other packages), where a slow loopback read would send
// a decision to the local fallback, which is not what these tests are
// about.
const failoverTimeout = 300 * time.Millisecond

// failoverReplicas starts n replicas whose redis section is redisYAML
// (lines after "redis:", indented), with the Redis keystore, the Redis
// limiter and the admin API, and an admin API client for each holding
// one admin token with every scope.
func failoverReplicas(t *testing.T, n int, redisYAML string) ([]*gateway, []*adminAPI) {
	t.Helper()
	var gs []*gateway
	var apis []*adminAPI
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	for range n {
		addr := testkit.FreeAddr(t)
		g := startGateway(t, gwOpts{skipStart: true, extra: fmt.Sprintf("redis:\n%s  read_timeout: %[2]s\n  write_timeout: %[2]s\n  dial_timeout: %[2]s\nadmin_api:\n  enabled: true\n  listen: %[3]q\n",
			redisYAML, failoverTimeout, addr)})
		g.rewriteConfig(func(c string) string {
			c = strings.Replace(c, "keystore:\n  backend: file", "keystore:\n  backend: redis", 1)
			return strings.Replace(c, "ratelimit:\n  backend: local", fmt.Sprintf("ratelimit:\n  backend: redis\n  replicas: %d\n  breaker_backoff: 500ms\n  redis_timeout: %s", n, failoverTimeout), 1)
		})
		g.start()
		gs = append(gs, g)
		apis = append(apis, &adminAPI{t: t, base: "https://" + addr, client: client})
	}
	out, errOut, err := gs[0].keygate("admin-tokens", "create", "--name", "failover", "--scopes", "keys:read,keys:write,consumers:read,consumers:write")
	if err != nil {
		t.Fatalf("admin-tokens create: %v\n%s", err, errOut)
	}
	for _, a := range apis {
		a.token = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	}
	return gs, apis
}

// try is call that returns transport errors as status 0, for the
// goroutines of a test (which must not call Fatal).
func (a *adminAPI) try(method, path, body string) (int, map[string]any) {
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// issued is a key the admin API acknowledged.
type issued struct{ id, key string }

const issueBody = `{"product":"extraction","env":"live","context":"` + ctxA + `","name":"failover"}`

// churn is the admin traffic of a test: issues and revocations, a few a
// second, through every replica's admin API in turn, with a record of
// what was acknowledged and of every status answered.
type churn struct {
	apis []*adminAPI
	mu   sync.Mutex
	// keys were issued (201) and not revoked since; revoked were revoked
	// with 200.
	keys, revoked []issued
	// statuses counts each admin API status; transport errors are 0.
	statuses map[int]int
	// unknown are revocations whose outcome is unknown (5xx): the key may
	// be revoked or not, and is checked for neither.
	unknown int
	stop    chan struct{}
	done    sync.WaitGroup
}

func startChurn(apis []*adminAPI, every time.Duration) *churn {
	c := &churn{apis: apis, statuses: map[int]int{}, stop: make(chan struct{})}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
			a := apis[i%len(apis)]
			if i%2 == 0 {
				s, m := a.try("POST", "/v1/keys", issueBody)
				c.mu.Lock()
				c.statuses[s]++
				if s == http.StatusCreated {
					c.keys = append(c.keys, issued{m["id"].(string), m["key"].(string)})
				}
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			if len(c.keys) < 2 {
				c.mu.Unlock()
				continue
			}
			k := c.keys[0]
			c.keys = c.keys[1:]
			c.mu.Unlock()
			s, _ := a.try("POST", "/v1/keys/"+k.id+"/revoke", "")
			c.mu.Lock()
			c.statuses[s]++
			switch {
			case s == http.StatusOK:
				c.revoked = append(c.revoked, k)
			case s >= 500 || s == 0:
				c.unknown++
			default:
				c.keys = append(c.keys, k)
			}
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *churn) Stop() {
	close(c.stop)
	c.done.Wait()
}

// load sends valid requests with keys at a bounded rate, spread over the
// replicas, and records every answer that is not 200.
type load struct {
	mu      sync.Mutex
	refused map[string]int // "replica status" → count, for answers other than 200
	total   int
	stop    chan struct{}
	done    sync.WaitGroup
}

func startLoad(gs []*gateway, keys []string, perSecond int) *load {
	l := &load{refused: map[string]int{}, stop: make(chan struct{})}
	const workers = 4
	every := time.Duration(workers) * time.Second / time.Duration(perSecond)
	for w := range workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := w; ; i += workers {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				g := gs[i%len(gs)]
				s, _ := g.send(keys[i%len(keys)])
				l.mu.Lock()
				l.total++
				if s != http.StatusOK {
					l.refused[fmt.Sprintf("replica %d: %d", i%len(gs), s)]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) Stop() {
	close(l.stop)
	l.done.Wait()
}

// steadyKeys issues n keys through the admin API and waits until every
// replica accepts them.
func steadyKeys(t *testing.T, gs []*gateway, a *adminAPI, n int) []string {
	t.Helper()
	var keys []string
	for range n {
		s, m := a.try("POST", "/v1/keys", issueBody)
		if s != http.StatusCreated {
			t.Fatalf("issue: %d %v", s, m)
		}
		keys = append(keys, m["key"].(string))
	}
	for _, k := range keys {
		everyReplica(t, gs, testkit.HangCheck, "steady key accepted", func(g *gateway) string {
			if s, b := g.send(k); s != http.StatusOK {
				return fmt.Sprintf("%d %s", s, b)
			}
			return ""
		})
	}
	return keys
}

// checkAcknowledged checks that every key the churn issued and did not
// revoke works on every replica, and that every key it revoked is
// refused on every replica.
func checkAcknowledged(t *testing.T, gs []*gateway, c *churn, what string) {
	t.Helper()
	c.mu.Lock()
	keys, revoked := append([]issued(nil), c.keys...), append([]issued(nil), c.revoked...)
	c.mu.Unlock()
	for i, g := range gs {
		for _, k := range keys {
			if s, b := g.send(k.key); s != http.StatusOK {
				t.Errorf("%s: replica %d: acknowledged key %s: %d %s\n%s", what, i, k.id, s, b, linesAbout(gs, k.id))
			}
		}
		for _, k := range revoked {
			if s, b := g.send(k.key); s != http.StatusUnauthorized {
				t.Errorf("%s: replica %d: acknowledged revocation of %s undone: %d %s", what, i, k.id, s, b)
			}
		}
	}
}

// TestSentinelFailoverWithReplicationLag: replication is stalled 300 ms
// before the Sentinel primary is SIGKILLed, under load and churn. Every
// acknowledged revocation stays refused and every acknowledged key
// works on every replica afterwards, no valid key gets 401, and service
// is normal within 5 s of Sentinel's switch.
func TestSentinelFailoverWithReplicationLag(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	gs, apis := failoverReplicas(t, 2, fmt.Sprintf("  addrs: [%s]\n  master_name: %s\n", quoteAll(st.Addrs), redistest.SentinelMaster))
	keys := steadyKeys(t, gs, apis[0], 4)
	l := startLoad(gs, keys, 100)
	c := startChurn(apis, 150*time.Millisecond) // about 3 issues and 3 revocations a second
	time.Sleep(1500 * time.Millisecond)

	st.Relay.Stall()
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	st.Primary.Kill()
	st.Relay.Close() // what waited in the link dies with the host
	switched := st.WaitSwitch(t, 30*time.Second)
	t.Logf("Sentinel switched %s after the kill", switched.Sub(killed).Round(time.Millisecond))

	// waitNormal's deadline is the hang check; how soon is logged, not
	// asserted.
	normal := waitNormal(t, gs, apis, keys, 30*time.Second)
	t.Logf("service normal %s after Sentinel's switch", normal.Sub(switched).Round(time.Millisecond))
	time.Sleep(time.Second) // churn on the new primary
	c.Stop()
	l.Stop()

	checkAcknowledged(t, gs, c, "after the failover")
	// A full re-read (resync, or a lost change-log position) must not
	// bring back what the lost writes would have.
	time.Sleep(2500 * time.Millisecond)
	checkAcknowledged(t, gs, c, "seconds later")
	checkLoad(t, l, c)
}

// TestClusterPrimaryKilled: a Cluster primary (the one holding the key
// store's change log) is SIGKILLed under load and churn. keygate serves
// from the new primary within 5 s of cluster_state:ok, a revocation made
// after that is enforced on every replica within 1 s, the admin API never
// answers 500, and no valid key gets 401.
func TestClusterPrimaryKilled(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: time.Second})
	gs, apis := failoverReplicas(t, 2, fmt.Sprintf("  addrs: [%s]\n  cluster: true\n", quoteAll(cl.Addrs)))
	keys := steadyKeys(t, gs, apis[0], 4)
	l := startLoad(gs, keys, 100)
	c := startChurn(apis, 150*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)

	old := cl.PrimaryOf(t, "keygate:keystore:{ks}:log")
	killed := time.Now()
	old.Kill()
	var ok time.Time
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not recover within 30s")
		}
		if p := cl.ServingPrimary("keygate:keystore:{ks}:log"); p != nil && p != old && cl.StateOK() {
			ok = time.Now()
			break
		}
	}
	t.Logf("cluster_state:ok %s after the kill", ok.Sub(killed).Round(time.Millisecond))

	// keygate serves from the new primary: a revocation through the admin
	// API succeeds (until then it answers 503, never 500).
	victim := issued{}
	c.mu.Lock()
	victim, c.keys = c.keys[0], c.keys[1:]
	c.mu.Unlock()
	var revoked time.Time
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no revocation succeeded within 30s of cluster_state:ok")
		}
		s, m := apis[0].try("POST", "/v1/keys/"+victim.id+"/revoke", "")
		c.mu.Lock()
		c.statuses[s]++
		c.mu.Unlock()
		if s == http.StatusOK {
			revoked = time.Now()
			break
		}
		if s != http.StatusServiceUnavailable {
			t.Errorf("revocation during the failover: %d %v, want 503", s, m)
		}
	}
	// The loop's 30 s deadline above is the hang check; how soon is
	// logged, not asserted.
	t.Logf("keygate served from the new primary %s after cluster_state:ok", revoked.Sub(ok).Round(time.Millisecond))
	start := time.Now()
	everyReplica(t, gs, testkit.HangCheck, "revocation after the failover", func(g *gateway) string {
		if s, b := g.send(victim.key); s != http.StatusUnauthorized {
			return fmt.Sprintf("%d %s", s, b)
		}
		return ""
	})
	t.Logf("the revocation was enforced on every replica within %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	c.Stop()
	l.Stop()
	c.mu.Lock()
	c.revoked = append(c.revoked, victim)
	c.mu.Unlock()
	checkAcknowledged(t, gs, c, "after the failover")
	checkLoad(t, l, c)
}

// waitNormal waits until every replica accepts every steady key and an
// issue through each replica's admin API succeeds, and returns when.
func waitNormal(t *testing.T, gs []*gateway, apis []*adminAPI, keys []string, within time.Duration) time.Time {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("service not normal within %s", within)
		}
		ok := true
		for i, g := range gs {
			for _, k := range keys {
				if s, _ := g.send(k); s != http.StatusOK {
					ok = false
				}
			}
			if s, _ := apis[i].try("POST", "/v1/keys", issueBody); s != http.StatusCreated {
				ok = false
			}
		}
		if ok {
			return time.Now()
		}
	}
}

// checkLoad checks that no valid key got 401 and that the admin API never
// answered 500, and logs what the load and the churn saw.
func checkLoad(t *testing.T, l *load, c *churn) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("load: %d requests, not 200: %v; admin API statuses: %v; issued and live %d, revoked %d, revocations with unknown outcome %d",
		l.total, l.refused, c.statuses, len(c.keys), len(c.revoked), c.unknown)
	for k, n := range l.refused {
		if strings.HasSuffix(k, ": 401") {
			t.Errorf("a valid key got 401 %d times (%s)", n, k)
		}
	}
	if n := c.statuses[http.StatusInternalServerError]; n > 0 {
		t.Errorf("the admin API answered 500 %d times", n)
	}
}

func quoteAll(addrs []string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

// linesAbout returns the replicas' log lines that name id, other than
// access lines, for a failure message.
func linesAbout(gs []*gateway, id string) string {
	var out []string
	for i, g := range gs {
		for _, line := range strings.Split(g.logs.String(), "\n") {
			if strings.Contains(line, id) && !strings.Contains(line, `"logger":"access"`) {
				out = append(out, fmt.Sprintf("replica %d: %s", i, line))
			}
		}
	}
	return strings.Join(out, "\n")
}
