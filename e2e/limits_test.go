package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/standin"
)

// The limits of issue 7 (findings 10 to 12) against the real binary: slow
// and stuck bodies, the per-credential concurrency cap, the brute-force
// limit per source address (also shared through Redis), and reload safety
// of the keys file. Every refusal is checked for its status, the spec's
// JSON body, nothing reaching the upstream, and no key in any log line.

// keyShaped matches anything that looks like an API key.
var keyShaped = regexp.MustCompile(`svc_(live|test)_[0-9A-Za-z]{8,}`)

// assertNoKeyInLogs fails if any log line of g holds something key-shaped.
func assertNoKeyInLogs(t *testing.T, gs ...*gateway) {
	t.Helper()
	for _, g := range gs {
		if m := keyShaped.FindString(g.logs.String()); m != "" {
			t.Errorf("a key-shaped value (%d chars) appears in the log of %s", len(m), g.API)
		}
	}
}

// specError checks a refusal: status, the spec's JSON body and trace id.
func specError(t *testing.T, status int, h http.Header, body []byte, want int, msgHas string) {
	t.Helper()
	testkit.AssertSpecError(t, status, h, body, want, msgHas)
}

// apiAddr is the host:port of g's API listener.
func (g *gateway) apiAddr() string { return strings.TrimPrefix(g.API, "https://") }

// dialFrom opens an HTTP/1.1 TLS connection to g from localIP ("" = any).
func (g *gateway) dialFrom(t *testing.T, localIP string) *tls.Conn {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	c, err := tls.DialWithDialer(d, "tcp", g.apiAddr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientFrom is an HTTP client (HTTP/2 when offered) whose connections
// come from localIP.
func clientFrom(t *testing.T, localIP string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
	tr := &http.Transport{
		DialContext:       d.DialContext,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// syncWith posts a small /sync upload with key through c, plus headers.
func (g *gateway) syncWith(c *http.Client, key string, hdr ...string) (int, http.Header, []byte) {
	g.t.Helper()
	resp, b, err := g.postSmall(c, key, hdr...)
	if err != nil {
		g.t.Fatalf("POST /sync: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// metric sums the samples of name on g's admin /metrics whose labels
// include every name="value" pair given.
func (g *gateway) metric(name string, labels ...string) float64 {
	g.t.Helper()
	return testkit.Metric(g.t, g.Admin+"/metrics", name, labels...)
}

// cpuTime is the user+system CPU time of process pid so far.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// slowUpstream is the extraction stand-in of the slow-body test: it counts
// the requests that reach it, how many connections are busy with one, and
// how reading each body ended.
type slowUpstream struct {
	requests, aborted, completed atomic.Int64
	mu                           sync.Mutex
	active                       map[net.Conn]bool
}

func (u *slowUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.requests.Add(1)
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		u.aborted.Add(1)
		return
	}
	u.completed.Add(1)
	standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
}

func (u *slowUpstream) connState(c net.Conn, s http.ConnState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch s {
	case http.StateActive:
		u.active[c] = true
	default:
		delete(u.active, c)
	}
}

func (u *slowUpstream) busy() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.active)
}

// TestLimitsSlowBody: clients with a valid key that send their body at 1
// byte/s, or stop sending it, get 408 with the spec's body after
// server.body_idle_timeout (500ms here, so that a 1 s gap exceeds it),
// whether the gateway is still looking for the context field or already
// streaming to the upstream; the upstream requests are aborted and no
// upstream connection stays busy. A steady upload still works.
func TestLimitsSlowBody(t *testing.T) {
	up := &slowUpstream{active: map[net.Conn]bool{}}
	g := startGateway(t, gwOpts{upstream: up, upstreamConnState: up.connState, serverYAML: "  body_idle_timeout: 500ms\n"})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(key, ctxA, []byte("%PDF-1.4 warm")); s != 200 {
			return fmt.Sprintf("key not served yet: %d", s)
		}
		return ""
	})
	base := up.completed.Load()

	// Larger than the /sync bodies keygate reads whole before it sends them
	// (128 KiB), so that a body whose context comes first streams upstream.
	file := bytes.Repeat([]byte("%PDF-1.4 slow "), 12<<10)
	build := func(contextFirst bool) (string, []byte) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if contextFirst {
			_ = mw.WriteField("contextId", ctxA)
		}
		w, _ := mw.CreateFormFile("files", "doc.pdf")
		_, _ = w.Write(file)
		if !contextFirst {
			_ = mw.WriteField("contextId", ctxA)
		}
		_ = mw.Close()
		return mw.FormDataContentType(), buf.Bytes()
	}

	type client struct {
		name        string
		reachesUp   bool // the context comes first, so the upstream is engaged
		perSecond   bool // 1 byte/s after the prefix; else nothing more
		status      int
		hdr         http.Header
		body        []byte
		err         error
		elapsedLast time.Duration // from the last byte sent to the answer
	}
	clients := []*client{
		{name: "1 byte/s before the context field", perSecond: true},
		{name: "stalled before the context field"},
		{name: "1 byte/s while streaming upstream", reachesUp: true, perSecond: true},
		{name: "stalled while streaming upstream", reachesUp: true},
		{name: "1 byte/s while streaming upstream (2)", reachesUp: true, perSecond: true},
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ct, body := build(c.reachesUp)
			conn := g.dialFrom(t, "")
			fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", key, ct, len(body))
			prefix := 300 // within the file part, or just past the context part
			// Each byte's time is taken before it is written: the gateway
			// cannot read it sooner, so a sender held up by a busy machine
			// only makes the wait measured below longer, never shorter.
			var last atomic.Int64
			last.Store(time.Now().UnixNano())
			_, _ = conn.Write(body[:prefix])
			done := make(chan struct{})
			if c.perSecond {
				go func() {
					for i := prefix; i < len(body); i++ {
						select {
						case <-done:
							return
						case <-time.After(time.Second):
						}
						sent := time.Now().UnixNano()
						if _, err := conn.Write(body[i : i+1]); err != nil {
							return
						}
						last.Store(sent)
					}
				}()
			}
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			close(done)
			if err != nil {
				c.err = err
				return
			}
			c.elapsedLast = time.Since(time.Unix(0, last.Load()))
			c.status, c.hdr = resp.StatusCode, resp.Header
			c.body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			// The gateway closes the connection after a 408.
			_ = conn.SetReadDeadline(time.Now().Add(testkit.HangCheck))
			if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				c.err = fmt.Errorf("connection not closed after the 408: %w", err)
			}
		}()
	}
	wg.Wait()
	engaged := 0
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			if c.err != nil {
				t.Fatal(c.err)
			}
			specError(t, c.status, c.hdr, c.body, http.StatusRequestTimeout, "no request body data")
			// Never well before the idle timeout; the upper bound is a hang
			// check (the figure is logged).
			t.Logf("408 came %s after the last byte, with a 500ms idle timeout", c.elapsedLast.Round(time.Millisecond))
			if c.elapsedLast < 400*time.Millisecond || c.elapsedLast > testkit.HangCheck {
				t.Errorf("408 came %s after the last byte; want after the 500ms idle timeout, within the hang check of %s", c.elapsedLast, testkit.HangCheck)
			}
		})
		if c.reachesUp {
			engaged++
		}
	}
	eventually(t, testkit.HangCheck, func() string {
		if a := up.aborted.Load(); a != int64(engaged) {
			return fmt.Sprintf("upstream saw %d aborted requests, want %d", a, engaged)
		}
		if b := up.busy(); b != 0 {
			return fmt.Sprintf("%d upstream connections still busy", b)
		}
		return ""
	})
	if n := up.completed.Load() - base; n != 0 {
		t.Errorf("the upstream received %d complete slow bodies", n)
	}
	if n := up.requests.Load() - base; n != int64(engaged) {
		t.Errorf("the upstream received %d requests, want only the %d whose context came first", n, engaged)
	}

	// A steady upload is not cut, however long it takes in total.
	ct, body := build(true)
	conn := g.dialFrom(t, "")
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", key, ct, len(body))
	chunk := len(body)/10 + 1
	for i := 0; i < len(body); i += chunk {
		time.Sleep(200 * time.Millisecond)
		_, _ = conn.Write(body[i:min(i+chunk, len(body))])
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("steady 2 s upload: %v %v", err, resp)
	}
	resp.Body.Close()
	assertNoKeyInLogs(t, g)
}

// TestLimitsConcurrencyCap: past ratelimit.max_concurrent requests in
// flight for one key the next gets 429 with Retry-After and the spec's
// body and reaches no upstream; another key is not affected.
func TestLimitsConcurrencyCap(t *testing.T) {
	up := testkit.NewHoldingUpstream(standin.Handler{Name: "extraction"})
	g := startGateway(t, gwOpts{upstream: up, maxConcurrent: 3})
	defer up.Release()
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "busy")
	other := g.issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "other")
	waitKey(t, []*gateway{g}, key)
	waitKey(t, []*gateway{g}, other)
	for _, r := range g.list() {
		if r.Name == "busy" {
			up.Hold(r.ID)
		}
	}

	wait := testkit.InFlight(t, 3, func() int { s, _ := g.send(key); return s })
	eventually(t, testkit.HangCheck, func() string {
		if n := up.Held(); n < 3 {
			return fmt.Sprintf("%d of 3 requests in flight", n)
		}
		return ""
	})
	before := up.Hits()
	for i := 0; i < 2; i++ {
		s, h, b := g.syncWith(g.Client, key)
		specError(t, s, h, b, http.StatusTooManyRequests, "concurrent requests")
		if h.Get("Retry-After") == "" {
			t.Error("no Retry-After on the 429")
		}
	}
	if n := up.Hits() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
	if s, _ := g.send(other); s != 200 {
		t.Errorf("another key got %d while the first was at its cap", s)
	}
	up.Release()
	wait()
	if s, _ := g.send(key); s != 200 {
		t.Errorf("after its requests ended the key got %d", s)
	}
	if n := g.metric("keygate_ratelimited_total", "reason", "concurrency"); n != 2 {
		t.Errorf("keygate_ratelimited_total{reason=concurrency} = %v, want 2", n)
	}
	assertNoKeyInLogs(t, g)
}

// defaultFailureLimit is auth.failure_limit at its defaults.
const defaultFailureLimit = "auth:\n  failure_limit: { enabled: true, rate: 30, per: 1m, burst: 60 }\n"

// TestLimitsBruteForce: 2,000 guessed keys with valid checksums from one
// address: after the burst (60) of 401s the address gets 429 with
// Retry-After and the spec's body, and so does a valid key from it, before
// any lookup; nothing refused reaches the upstream; another address
// (127.0.0.2) is not affected. The gateway's CPU time for the flood is
// logged.
func TestLimitsBruteForce(t *testing.T) {
	var hits atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
	})
	g := startGateway(t, gwOpts{upstream: up, authYAML: defaultFailureLimit})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	// Wait for the key from the second address, so that no 401 of the
	// wait counts against the flooding one.
	second := clientFrom(t, "127.0.0.2")
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.syncWith(second, key); s != 200 {
			return fmt.Sprintf("key not served yet: %d", s)
		}
		return ""
	})
	guesses := make([]string, 2000)
	for i := range guesses {
		guesses[i], _ = keystore.Generate(keystore.Live)
		if _, err := keystore.Parse(guesses[i]); err != nil {
			t.Fatal("a guess has a bad checksum:", err)
		}
	}
	first := clientFrom(t, "127.0.0.1")
	hitsBefore := hits.Load()
	pid := g.cmd.Process.Pid
	cpuBefore := cpuTime(t, pid)
	start := time.Now()

	const workers = 8
	var unauthorized, throttled, other atomic.Int64
	var firstThrottled atomic.Int64
	firstThrottled.Store(-1)
	var sample struct {
		once   sync.Once
		status int
		h      http.Header
		b      []byte
	}
	var seq atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := seq.Add(1) - 1
				if i >= int64(len(guesses)) {
					return
				}
				s, h, b := g.syncWith(first, guesses[i])
				switch s {
				case 401:
					unauthorized.Add(1)
				case 429:
					if throttled.Add(1) == 1 {
						firstThrottled.Store(i)
					}
					sample.once.Do(func() { sample.status, sample.h, sample.b = s, h, b })
					if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 {
						t.Errorf("Retry-After = %q", h.Get("Retry-After"))
					}
				default:
					other.Add(1)
					t.Errorf("guess %d: %d %s", i, s, b)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(t, pid) - cpuBefore
	t.Logf("flood of %d guessed keys from one address: %s wall, gateway CPU (utime+stime) %s; %d answered 401, %d answered 429 (first at guess #%d)",
		len(guesses), elapsed.Round(time.Millisecond), cpu, unauthorized.Load(), throttled.Load(), firstThrottled.Load())

	if throttled.Load() > 0 {
		specError(t, sample.status, sample.h, sample.b, 429, "failed authentications")
	}
	// The burst, plus one failure per 2 s (30/min) while the flood lasts.
	maxAdmitted := int64(60 + elapsed/(2*time.Second) + 1)
	if u := unauthorized.Load(); u < 60 || u > maxAdmitted {
		t.Errorf("%d guesses were answered 401; want between 60 and %d", u, maxAdmitted)
	}
	if th := throttled.Load(); th < int64(len(guesses))-maxAdmitted {
		t.Errorf("only %d guesses were throttled", th)
	}
	if n := hits.Load() - hitsBefore; n != 0 {
		t.Errorf("the upstream received %d requests during the flood", n)
	}

	// A valid key from the flooding address is refused too, before its
	// lookup; from another address it works.
	s, h, b := g.syncWith(first, key)
	specError(t, s, h, b, 429, "failed authentications")
	if h.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if n := hits.Load() - hitsBefore; n != 0 {
		t.Error("the valid key from the throttled address reached the upstream")
	}
	if s, _, b := g.syncWith(second, key); s != 200 {
		t.Errorf("a valid key from 127.0.0.2 got %d %s", s, b)
	}
	if s, h, b := g.syncWith(second, guesses[0]); s != 401 {
		t.Errorf("a wrong key from 127.0.0.2 got %d %s; its failures are its own", s, b)
	} else {
		specError(t, s, h, b, 401, "invalid")
	}

	if n := g.metric("keygate_auth_throttled_total"); n < float64(throttled.Load()+1) {
		t.Errorf("keygate_auth_throttled_total = %v, want at least %d", n, throttled.Load()+1)
	}
	if n := g.metric("keygate_auth_failures_counted_total"); n < float64(unauthorized.Load()) {
		t.Errorf("keygate_auth_failures_counted_total = %v, want at least %d", n, unauthorized.Load())
	}
	assertNoKeyInLogs(t, g)
}

// TestLimitsBruteForceBehindTrustedProxy: with server.trusted_proxies, the
// address limited is the client's from X-Forwarded-For (its right-most
// untrusted hop), not the proxy's.
func TestLimitsBruteForceBehindTrustedProxy(t *testing.T) {
	var hits atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
	})
	g := startGateway(t, gwOpts{
		upstream:   up,
		serverYAML: "  trusted_proxies: [\"127.0.0.1/32\"]\n",
		authYAML:   "auth:\n  failure_limit: { enabled: true, rate: 1, per: 1h, burst: 5 }\n",
	})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	proxy := clientFrom(t, "127.0.0.1")     // trusted
	untrusted := clientFrom(t, "127.0.0.2") // not a proxy
	const attacker, victim = "203.0.113.5", "203.0.113.6"
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.syncWith(proxy, key, "X-Forwarded-For", victim); s != 200 {
			return fmt.Sprintf("key not served yet: %d", s)
		}
		return ""
	})
	before := hits.Load()
	for i := 0; i < 5; i++ {
		guess, _ := keystore.Generate(keystore.Live)
		if s, _, b := g.syncWith(proxy, guess, "X-Forwarded-For", attacker); s != 401 {
			t.Fatalf("guess %d: %d %s", i, s, b)
		}
	}
	guess, _ := keystore.Generate(keystore.Live)
	s, h, b := g.syncWith(proxy, guess, "X-Forwarded-For", attacker)
	specError(t, s, h, b, 429, "failed authentications")
	// The attacker is limited whatever it puts left of its address, and
	// with a valid key; the proxy's other clients are not.
	s, h, b = g.syncWith(proxy, key, "X-Forwarded-For", "198.51.100.1, "+attacker)
	specError(t, s, h, b, 429, "failed authentications")
	if s, _, b := g.syncWith(proxy, key, "X-Forwarded-For", victim); s != 200 {
		t.Errorf("another client behind the proxy got %d %s", s, b)
	}
	if n := hits.Load() - before; n != 1 {
		t.Errorf("the upstream received %d requests, want only the victim's", n)
	}
	// X-Forwarded-For from a peer that is not a trusted proxy is ignored:
	// its failures count against the peer, not against the claimed client.
	for i := 0; i < 6; i++ {
		guess, _ := keystore.Generate(keystore.Live)
		g.syncWith(untrusted, guess, "X-Forwarded-For", victim)
	}
	if s, _, b := g.syncWith(proxy, key, "X-Forwarded-For", victim); s != 200 {
		t.Errorf("an untrusted peer spoofing X-Forwarded-For got the victim throttled: %d %s", s, b)
	}
	if s, _, _ := g.syncWith(untrusted, key); s != 429 {
		t.Errorf("the untrusted peer itself is not throttled: %d", s)
	}
	assertNoKeyInLogs(t, g)
}

// TestLimitsBruteForceSharedAcrossReplicas: with ratelimit.backend redis,
// two replicas count one address's failures together; a replica that
// learns the address is over the limit refuses it, a valid key included.
func TestLimitsBruteForceSharedAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	shared := filepath.Join(t.TempDir(), "keys.yaml")
	var hits atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
	})
	var gs []*gateway
	for i := 0; i < 2; i++ {
		g := startGateway(t, gwOpts{
			upstream:  up,
			keystore:  shared,
			authYAML:  "auth:\n  failure_limit: { enabled: true, rate: 1, per: 1h, burst: 10 }\n",
			extra:     fmt.Sprintf("redis:\n  addrs: [%q]\n  key_prefix: \"kgtest:\"\n"+slowMachineRedis, rs.Addr),
			skipStart: true,
		})
		g.rewriteConfig(func(c string) string {
			return strings.Replace(c, "ratelimit:\n  backend: local", "ratelimit:\n  backend: redis\n  replicas: 2\n"+slowMachineRateLimit, 1)
		})
		gs = append(gs, g)
	}
	for _, g := range gs {
		g.start()
	}
	a, b := gs[0], gs[1]
	key := a.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	// Wait for the key from another address: a 401 while a replica does
	// not know it yet would count against 127.0.0.1.
	waiter := clientFrom(t, "127.0.0.2")
	for _, g := range gs {
		eventually(t, testkit.HangCheck, func() string {
			req, _ := http.NewRequest("GET", g.API+"/sync", nil)
			req.Header.Set("X-Api-Key", key)
			resp, err := waiter.Do(req)
			if err != nil {
				return err.Error()
			}
			resp.Body.Close()
			if resp.StatusCode != 405 {
				return fmt.Sprintf("key not served yet: %d", resp.StatusCode)
			}
			return ""
		})
	}
	// Successes cost no Redis call for the failure limit: one EVALSHA
	// each, the rate limiter's.
	for i := 0; i < 4; i++ { // warm up each replica's Redis connection
		if s, _, body := gs[i%2].syncWith(waiter, key); s != 200 {
			t.Fatalf("warm-up: %d %s", s, body)
		}
	}
	evalBefore, _ := commandCalls(t, rs)
	for i := 0; i < 6; i++ {
		if s, _, body := gs[i%2].syncWith(waiter, key); s != 200 {
			t.Fatalf("success %d: %d %s", i, s, body)
		}
	}
	evalAfter, _ := commandCalls(t, rs)
	if d := evalAfter - evalBefore; d != 6 {
		t.Errorf("6 admitted requests cost %d EVALSHA calls; want 6 (none for the failure limit)", d)
	}
	before := hits.Load()
	evalBefore = evalAfter
	for i := 0; i < 10; i++ {
		g := gs[i%2]
		guess, _ := keystore.Generate(keystore.Live)
		if s, _, body := g.syncWith(g.Client, guess); s != 401 {
			t.Fatalf("guess %d via replica %d: %d %s", i, i%2, s, body)
		}
	}
	evalAfter, _ = commandCalls(t, rs)
	if d := evalAfter - evalBefore; d != 10 {
		t.Errorf("10 failures cost %d EVALSHA calls; want one each", d)
	}
	evalBefore = evalAfter
	// Five failures on each replica: the burst of ten is spent across
	// both. The next failure on either is refused.
	guess, _ := keystore.Generate(keystore.Live)
	s, h, body := a.syncWith(a.Client, guess)
	specError(t, s, h, body, 429, "failed authentications")
	guess, _ = keystore.Generate(keystore.Live)
	s, h, body = b.syncWith(b.Client, guess)
	specError(t, s, h, body, 429, "failed authentications")
	for i, g := range gs {
		s, h, body := g.syncWith(g.Client, key)
		if s != 429 {
			t.Errorf("replica %d: a valid key from the throttled address got %d", i, s)
		} else {
			specError(t, s, h, body, 429, "failed authentications")
		}
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("the upstream received %d requests", n)
	}
	// Two failures asked Redis (and were refused); the valid keys after
	// them were refused locally.
	if evalAfter, _ = commandCalls(t, rs); evalAfter-evalBefore != 2 {
		t.Errorf("the refusals cost %d EVALSHA calls; want 2 (the two failures), none for a locally blocked address", evalAfter-evalBefore)
	}
	if got, _ := rs.Do("EXISTS", "kgtest:authfail:rl:{127.0.0.1}"); !strings.Contains(got, "1") {
		t.Errorf("EXISTS kgtest:authfail:rl:{127.0.0.1} = %q; the count is not in Redis under redis.key_prefix", got)
	}
	assertNoKeyInLogs(t, gs...)
}

// TestLimitsKeystoreFileVanishes: the keys file emptied in place,
// truncated, reduced to no keys, or deleted while serving: the keys keep
// working, the failed reload is logged at error and counted in
// keygate_keystore_reloads_total{result="error"}; a good file is picked
// up again.
func TestLimitsKeystoreFileVanishes(t *testing.T) {
	g := startGateway(t, gwOpts{})
	path := filepath.Join(g.dir, "keys.yaml")
	k1 := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	k2 := g.issue("--product", "extraction", "--env", "test", "--context", ctxA)
	serves := func() string {
		for _, k := range []string{k1, k2} {
			if s, b, _ := g.post(k, ctxA, []byte("%PDF-1.4 ks")); s != 200 {
				return fmt.Sprintf("a key got %d %s", s, b)
			}
		}
		return ""
	}
	eventually(t, testkit.HangCheck, serves)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inPlace := func(b []byte) func() error { return func() error { return os.WriteFile(path, b, 0o600) } }
	cases := []struct {
		name   string
		change func() error
	}{
		{"emptied", inPlace(nil)},
		{"whitespace only", inPlace([]byte("\n  \n"))},
		{"truncated to half", inPlace(good[:len(good)/2])},
		{"no keys", inPlace([]byte("version: 1\nkeys: []\n"))},
		{"deleted", func() error { return os.Remove(path) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errorsBefore := g.metric("keygate_keystore_reloads_total", "result", "error")
			logLen := len(g.logs.String())
			if err := c.change(); err != nil {
				t.Fatal(err)
			}
			// The count and the log line are two writes of keygate's:
			// the line may reach the test's pipe after the count is
			// scraped.
			loggedAtError := func() string {
				for _, line := range strings.Split(g.logs.String()[logLen:], "\n") {
					if strings.Contains(line, `"level":"error"`) && strings.Contains(line, "reload failed") {
						return ""
					}
				}
				return "the failed reload is not logged at error:\n" + g.logs.String()[logLen:]
			}
			eventually(t, testkit.HangCheck, func() string {
				if n := g.metric("keygate_keystore_reloads_total", "result", "error"); n <= errorsBefore {
					return "no failed reload counted"
				}
				return loggedAtError()
			})
			if msg := serves(); msg != "" {
				t.Errorf("after the file was %s: %s", c.name, msg)
			}
			if n := g.metric("keygate_keystore_keys"); n != 2 {
				t.Errorf("keygate_keystore_keys = %v, want the last good 2", n)
			}
			// Put the good file back (atomically, as the CLI writes it).
			okBefore := g.metric("keygate_keystore_reloads_total", "result", "ok")
			tmp := path + ".restore"
			if err := os.WriteFile(tmp, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			eventually(t, testkit.HangCheck, func() string {
				if g.metric("keygate_keystore_reloads_total", "result", "ok") <= okBefore {
					return "good file not reloaded"
				}
				return ""
			})
		})
	}
	// And the keystore still changes normally afterwards.
	k3 := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(k3, ctxA, []byte("%PDF-1.4 ks")); s != 200 {
			return fmt.Sprintf("a key issued after the failures got %d", s)
		}
		return ""
	})
	assertNoKeyInLogs(t, g)
}
