package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/standin"
)

// recordingUpstream is a stand-in that counts the requests it receives and
// records how reading each body ended.
type recordingUpstream struct {
	requests atomic.Int64
	bodyEnd  chan error // one per request: nil or the body's read error
	delay    time.Duration
}

func newRecordingUpstream() *recordingUpstream {
	return &recordingUpstream{bodyEnd: make(chan error, 16)}
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.requests.Add(1)
	_, err := io.Copy(io.Discard, r.Body)
	u.bodyEnd <- err
	if err != nil {
		return
	}
	time.Sleep(u.delay)
	w.WriteHeader(200)
	_, _ = w.Write([]byte(`{"backend":"extraction"}`))
}

// expectAborted checks that the upstream's next request ended before its
// body did (waiting for it up to 5 s).
func (u *recordingUpstream) expectAborted(t *testing.T) {
	t.Helper()
	select {
	case err := <-u.bodyEnd:
		if err == nil {
			t.Error("the upstream read a complete body")
		}
	case <-time.After(testkit.HangCheck):
		t.Error("the upstream request was not aborted (hang check)")
	}
}

// rawSync starts an HTTP/1.1 /sync request over TLS with Content-Length
// length and sends prefix of its body; the caller sends the rest or stalls.
func rawSync(t *testing.T, e *env, key, ct string, length int, prefix []byte) (io.Writer, func() (*http.Response, []byte, error)) {
	t.Helper()
	c := tlsDial(t, e.URL)
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", key, ct, length)
	_, _ = c.Write(prefix)
	return c, func() (*http.Response, []byte, error) {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b, nil
	}
}

// TestBodyIdleTimeout: a body that stops arriving gets 408 with the spec's
// body after server.body_idle_timeout, whether it stalls while the gateway
// looks for the context field or while the rest streams upstream; in the
// latter case the upstream request is aborted. A slow but steady body and
// a slow upstream answer are not cut.
func TestBodyIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	// Larger than the bodies the gateway reads whole before sending
	// (smallBodyMax), so that the context-first body streams upstream.
	file := strings.Repeat("x", 256<<10)
	ctFileFirst, fileFirst := form(t, part{"files", file}, part{"id", "1"}, part{"contextId", ctxA})
	ctCtxFirst, ctxFirst := form(t, part{"contextId", ctxA}, part{"id", "1"}, part{"files", file})

	check408 := func(t *testing.T, resp *http.Response, b []byte, err error, start time.Time) {
		t.Helper()
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, http.StatusRequestTimeout, "no request body data")
		// Never before the idle timeout; the upper bound is a hang check
		// (the figure is logged).
		took := time.Since(start)
		t.Logf("408 after %s with a %s idle timeout", took.Round(time.Millisecond), idle)
		if took < idle || took > testkit.HangCheck {
			t.Errorf("408 after %s; want after %s, and within the hang check of %s", took, idle, testkit.HangCheck)
		}
	}

	t.Run("stall before the context field, HTTP/1.1", func(t *testing.T) {
		t.Parallel()
		up := newRecordingUpstream()
		e := newEnv(t, envOpts{bodyIdle: idle, extractionH: up})
		start := time.Now()
		_, wait := rawSync(t, e, e.LiveKey, ctFileFirst, len(fileFirst), fileFirst[:1000])
		resp, b, err := wait()
		check408(t, resp, b, err, start)
		if !resp.Close {
			t.Error("the connection of a timed-out body is kept open")
		}
		if n := up.requests.Load(); n != 0 {
			t.Errorf("upstream received %d requests", n)
		}
	})

	t.Run("stall while streaming upstream, HTTP/1.1", func(t *testing.T) {
		t.Parallel()
		up := newRecordingUpstream()
		e := newEnv(t, envOpts{bodyIdle: idle, extractionH: up})
		start := time.Now()
		_, wait := rawSync(t, e, e.LiveKey, ctCtxFirst, len(ctxFirst), ctxFirst[:len(ctxFirst)/2])
		resp, b, err := wait()
		check408(t, resp, b, err, start)
		up.expectAborted(t)
	})

	t.Run("stall, HTTP/2", func(t *testing.T) {
		t.Parallel()
		up := newRecordingUpstream()
		e := newEnv(t, envOpts{bodyIdle: idle, extractionH: up})
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write(ctxFirst[:len(ctxFirst)/2]) }()
		start := time.Now()
		r := e.do(e.request("POST", "/sync", e.LiveKey, ctCtxFirst, pr))
		if r.Proto != 2 {
			t.Fatalf("proto %d, want HTTP/2", r.Proto)
		}
		assertError(t, r, http.StatusRequestTimeout, "no request body data")
		took := time.Since(start)
		t.Logf("408 after %s with a %s idle timeout", took.Round(time.Millisecond), idle)
		if took < idle || took > testkit.HangCheck {
			t.Errorf("408 after %s; want after %s, and within the hang check of %s", took, idle, testkit.HangCheck)
		}
		// Only the stream ended: the connection serves the next request.
		if r := e.sync(e.LiveKey, ctxA); r.Status != 200 || r.Proto != 2 {
			t.Errorf("next request on the HTTP/2 client: %d (HTTP/%d)", r.Status, r.Proto)
		}
		up.expectAborted(t)
	})

	t.Run("slow but steady body passes", func(t *testing.T) {
		t.Parallel()
		// A longer idle timeout than the others': the body takes longer
		// than it in all, but no gap between its writes comes near it,
		// even when a loaded machine delays a write.
		const idle = time.Second
		e := newEnv(t, envOpts{bodyIdle: idle})
		ct, body := form(t, part{"contextId", ctxA}, part{"id", "1"}, part{"files", "%PDF-1.4 slow"})
		w, wait := rawSync(t, e, e.LiveKey, ct, len(body), nil)
		step := len(body)/8 + 1
		for i := 0; i < len(body); i += step {
			time.Sleep(idle / 5)
			_, _ = w.Write(body[i:min(i+step, len(body))])
		}
		resp, b, err := wait()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("steady slow body: %v %v %s", err, resp, b)
		}
	})

	t.Run("slow upstream answer after the whole body passes", func(t *testing.T) {
		t.Parallel()
		up := newRecordingUpstream()
		up.delay = 3 * idle
		e := newEnv(t, envOpts{bodyIdle: idle, extractionH: up})
		for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
			var status int
			if proto == "HTTP/2" {
				status = e.sync(e.LiveKey, ctxA).Status
			} else {
				_, wait := rawSync(t, e, e.LiveKey, ctCtxFirst, len(ctxFirst), ctxFirst)
				resp, _, err := wait()
				if err != nil {
					t.Fatal(err)
				}
				status = resp.StatusCode
			}
			if status != 200 {
				t.Errorf("%s: a slow upstream after a complete body got %d", proto, status)
			}
		}
	})
}

// TestConcurrencyCap: past max_concurrent requests in flight for one
// credential the next gets 429 with the spec's body and Retry-After, and
// reaches no upstream; other credentials are not affected; a slot frees
// when a request ends.
func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	up := testkit.NewHoldingUpstream(standin.Handler{Name: "extraction"})
	defer up.Release()
	e := newEnv(t, envOpts{concurrent: 2, extractionH: up})
	up.Hold(e.LiveID)

	wait := testkit.InFlight(t, 2, func() int { return e.sync(e.LiveKey, ctxA).Status })
	testkit.Eventually(t, testkit.HangCheck, "two requests at the upstream", func() error {
		return testkit.True(up.Held() >= 2, "%d at the upstream", up.Held())
	})
	before := up.Hits()
	r := e.sync(e.LiveKey, ctxA)
	assertError(t, r, http.StatusTooManyRequests, "concurrent requests")
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if up.Hits() != before {
		t.Error("the refused request reached the upstream")
	}
	if r := e.sync(e.TestKey, ctxA); r.Status != 200 {
		t.Errorf("another credential got %d while the first was at its cap", r.Status)
	}
	up.Release()
	wait()
	if r := e.sync(e.LiveKey, ctxA); r.Status != 200 {
		t.Errorf("after the requests ended: %d", r.Status)
	}
}

// TestFailureLimit: past the failure limit an address gets 429 with
// Retry-After and the spec's body before any key lookup, even for a valid
// key; another address is not affected; requests without a key do not
// count.
func TestFailureLimit(t *testing.T) {
	t.Parallel()
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: ratelimit.FailureLimitConfig{Enabled: true, Rate: 1, Per: time.Hour, Burst: 3, MaxAddresses: 100}})
	if err != nil {
		t.Fatal(err)
	}
	up := newRecordingUpstream()
	e := newEnv(t, envOpts{failures: f, extractionH: up})
	serve := func(remote, key string) result {
		ct, body := syncForm(t, ctxA)
		req := httptest.NewRequest("POST", "/sync", bytes.NewReader(body))
		req.RemoteAddr = remote
		req.Header.Set("Content-Type", ct)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		w := httptest.NewRecorder()
		e.Gateway.ServeHTTP(w, req)
		return result{Status: w.Code, Header: w.Header(), Body: w.Body.Bytes()}
	}
	const attacker, other = "198.51.100.7:40000", "198.51.100.8:40000"
	for i := 0; i < 10; i++ {
		if r := serve(attacker, ""); r.Status != 401 {
			t.Fatalf("missing key: %d", r.Status)
		}
	}
	for i := 0; i < 3; i++ {
		guess, _ := keystore.Generate(keystore.Live)
		assertError(t, serve(attacker, guess), 401, "invalid")
	}
	guess, _ := keystore.Generate(keystore.Live)
	r := serve(attacker, guess)
	assertError(t, r, 429, "failed authentications")
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After = %q", ra)
	}
	r = serve(attacker, e.LiveKey)
	assertError(t, r, 429, "failed authentications")
	if bytes.Contains(r.Body, []byte(e.LiveKey)) {
		t.Error("the body echoes the key")
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("the upstream received %d requests from the throttled address", n)
	}
	if r := serve(other, e.LiveKey); r.Status != 200 {
		t.Errorf("another address with a valid key: %d %s", r.Status, r.Body)
	}
	if _, blocked := f.Blocked(netip.MustParseAddr("198.51.100.8")); blocked {
		t.Error("the other address is blocked")
	}
	if st := f.Stats(); st.Counted != 4 || st.Throttled != 2 {
		t.Errorf("stats = %+v; want 4 failures counted (missing keys are not), 2 throttled", st)
	}
}

// BenchmarkRequestPathLimits is BenchmarkRequestPath with every limit of
// this file on (idle timeout, concurrency cap, failure limit), to show what
// they cost on an accepted request.
func BenchmarkRequestPathLimits(b *testing.B) {
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: ratelimit.DefaultFailureLimitConfig()})
	if err != nil {
		b.Fatal(err)
	}
	gw, key := benchGatewayWith(b, func(c *gatewayConfig, d *gatewayDeps) {
		c.BodyIdleTimeout = 30 * time.Second
		c.MaxConcurrent = 16
		d.Failures = f
	})
	benchSync(b, gw, key)
}
