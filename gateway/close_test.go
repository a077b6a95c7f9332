package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// connUpstream is an upstream on loopback that counts its open
// connections. Requests carrying X-Hold wait in the handler until hold is
// closed; inHandler counts those waiting.
type connUpstream struct {
	srv       *httptest.Server
	open      atomic.Int64
	dialed    atomic.Int64
	inHandler atomic.Int64
	hold      chan struct{}
}

func newConnUpstream(t *testing.T) *connUpstream {
	t.Helper()
	u := &connUpstream{hold: make(chan struct{})}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Hold") != "" {
			u.inHandler.Add(1)
			<-u.hold
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"read":`+strconv.FormatInt(n, 10)+`}`)
	}))
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.open.Add(1)
			u.dialed.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.open.Add(-1)
		}
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	return u
}

// closeEnv is a gateway in front of one counting upstream (both routes go
// to it), with an extraction key and a registry key.
type closeEnv struct {
	gw                 *gateway.Gateway
	url                string
	up                 *connUpstream
	liveKey, regKey    string
	client             *http.Client
	smallCT, bigCT     string
	smallBody, bigBody []byte
}

func newCloseEnv(t *testing.T, idle time.Duration) *closeEnv {
	t.Helper()
	e := &closeEnv{up: newConnUpstream(t)}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	admin := &keystore.FileAdmin{Path: path}
	ctx := context.Background()
	var err error
	if e.liveKey, _, err = admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "close"}); err != nil {
		t.Fatal(err)
	}
	if e.regKey, _, err = admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live, Name: "close"}); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: keystoretest.OpenFile(t, path)})
	if err != nil {
		t.Fatal(err)
	}
	lim := policy.Limit{Rate: 1e6, Per: time.Second, Burst: 1e6}
	up := gateway.UpstreamConfig{Targets: []string{e.up.srv.URL}, IdleTimeout: idle}
	e.gw, err = gateway.New(gateway.Config{
		Upstreams:    gateway.UpstreamsConfig{Extraction: up, Registry: up},
		MaxBodyBytes: 10 << 20,
		SpoolDir:     t.TempDir(),
		Limits:       map[string]policy.Limit{"live": lim, "test": lim},
	}, gateway.Deps{Auth: keys, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(e.gw)
	t.Cleanup(front.Close)
	e.url, e.client = front.URL, front.Client()
	e.client.Timeout = 60 * time.Second // a hang check
	// A small body is held whole before it goes upstream; one past
	// 128 KiB streams.
	e.smallCT, e.smallBody = testkit.Form(t, testkit.Part{Name: "contextId", Value: ctxA}, testkit.Part{Name: "files", Value: "%PDF-1.4 small"})
	e.bigCT, e.bigBody = testkit.Form(t, testkit.Part{Name: "contextId", Value: ctxA}, testkit.Part{Name: "files", Value: strings.Repeat("z", 300<<10)})
	return e
}

// send makes one request of each kind the gateway forwards (no body, a
// small body held whole, a large body streamed), held at the upstream
// until it is released when hold is set, and checks each answer.
func (e *closeEnv) send(t *testing.T, hold bool) {
	t.Helper()
	reqs := []*http.Request{
		e.request(t, "GET", "/registry/schemas", e.regKey, "", nil),
		e.request(t, "POST", "/sync", e.liveKey, e.smallCT, e.smallBody),
		e.request(t, "POST", "/sync", e.liveKey, e.bigCT, e.bigBody),
	}
	var wg sync.WaitGroup
	for _, req := range reqs {
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		wg.Go(func() {
			resp, err := e.client.Do(req)
			if err != nil {
				t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte(`{"read":`)) {
				t.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
			}
		})
	}
	if hold {
		waitUntil(t, "the held requests reach the upstream", func() bool { return e.up.inHandler.Load() == int64(len(reqs)) })
		if err := e.gw.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		close(e.up.hold)
	}
	wg.Wait()
}

func (e *closeEnv) request(t *testing.T, method, path, key, ct string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	return req
}

// waitUntil polls cond under testkit's hang check.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, testkit.HangCheck, what, func() error { return testkit.True(cond(), "not yet") })
}

// TestUpstreamConnectionsReleased: the upstream connections keygate keeps
// (those of bodiless requests, of small bodies held whole and of streamed
// uploads) are closed once idle for upstreams.*.idle_timeout with no
// later request, and all at Gateway.Close: the idle ones at once, those
// in use when their requests end.
func TestUpstreamConnectionsReleased(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		idle time.Duration
		// run sends requests and ends with nothing left open at the
		// upstream
		run func(t *testing.T, e *closeEnv)
	}{
		{"idle past the idle timeout", 200 * time.Millisecond, func(t *testing.T, e *closeEnv) {
			e.send(t, false)
			start := time.Now()
			waitUntil(t, "idle connections closed", func() bool { return e.up.open.Load() == 0 })
			t.Logf("%d connections dialed; all closed %s after the last answer (idle timeout 200ms)",
				e.up.dialed.Load(), time.Since(start).Round(time.Millisecond))
		}},
		{"idle at Close", time.Hour, func(t *testing.T, e *closeEnv) {
			e.send(t, false)
			e.send(t, false)
			if n := e.up.open.Load(); n == 0 {
				t.Fatal("no upstream connection was kept")
			}
			if d := e.up.dialed.Load(); d > 3 {
				t.Errorf("%d connections dialed for two rounds of 3 requests, want the second round on kept ones", d)
			}
			if err := e.gw.Close(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "connections closed by Close", func() bool { return e.up.open.Load() == 0 })
		}},
		{"in use at Close", time.Hour, func(t *testing.T, e *closeEnv) {
			e.send(t, true) // Close while all three are at the upstream
			waitUntil(t, "connections closed when their requests ended", func() bool { return e.up.open.Load() == 0 })
		}},
		{"sent after Close", time.Hour, func(t *testing.T, e *closeEnv) {
			if err := e.gw.Close(); err != nil {
				t.Fatal(err)
			}
			e.send(t, false)
			e.send(t, false)
			waitUntil(t, "connections closed after their requests", func() bool { return e.up.open.Load() == 0 })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newCloseEnv(t, tt.idle)
			tt.run(t, e)
		})
	}
}
