package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/standin"
)

// These tests count goroutines, so they do not run in parallel: other
// tests' goroutines would come and go during the count. (Parallel tests
// of the package wait, paused, until the sequential ones are done.)

// leakDeadline bounds how long closed components may take to end their
// goroutines and connections: a hang check, not a timing bound.
const leakDeadline = 20 * time.Second

// TestStopLeavesNothingBehind: a server built from a Redis-backed
// configuration (keystore, rate limiter, auth failure limit, usage, audit
// log, token endpoint keys and admin API idempotency in Redis; TLS and
// HTTP/2 on the API listener) serves requests, and after Close, or after
// Shutdown, no goroutine it started is left, Redis holds no connection of
// its, and the upstream no connection from it.
func TestStopLeavesNothingBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*server.Server) error
	}{
		{"Close", (*server.Server).Close},
		{"Shutdown", func(s *server.Server) error {
			ctx, cancel := context.WithTimeout(context.Background(), leakDeadline)
			defer cancel()
			return s.Shutdown(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { stopLeavesNothingBehind(t, tc.stop) })
	}
}

func stopLeavesNothingBehind(t *testing.T, stop func(*server.Server) error) {
	rs := redistest.Start(t)
	key := redisKey(t, rs)
	up, upConns := connCountedUpstream(t)
	base := goroutines()

	srv, cfg := newRedisServer(t, rs, up.URL, "127.0.0.1:0")
	t.Cleanup(func() { _ = srv.Close() }) // when the test fails before it stops
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()

	client := tlsClient(t, filepath.Join(cfg.TLS.SelfSignedDir, "cert.pem"))
	api := "https://" + srv.APIAddr().String()
	ct, body := syncForm(t, ctxA)
	for range 3 { // over one HTTP/2 connection
		req, err := http.NewRequest(http.MethodPost, api+"/sync", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		req.Header.Set("X-Api-Key", key)
		if r := testkit.Do(t, client, req); r.Status != http.StatusOK || r.Proto != 2 {
			t.Fatalf("sync: %d over HTTP/%d: %s", r.Status, r.Proto, r.Body)
		}
	}
	if r := testkit.Do(t, client, mustRequest(t, http.MethodGet, "http://"+srv.AdminAPIAddr().String()+"/v1/keys", nil)); r.Status != http.StatusUnauthorized {
		t.Fatalf("admin API without a token: %d, want 401", r.Status)
	}
	// The count sees this server's connections, so that its being zero
	// below means something.
	if n := len(redisClients(t, rs)); n == 0 {
		t.Fatal("Redis lists no connection of the running server")
	} else {
		t.Logf("Redis connections while serving: %d", n)
	}
	if n := upConns(); n == 0 {
		t.Fatal("the upstream holds no connection from the running server")
	}

	start := time.Now()
	if err := stop(srv); err != nil {
		t.Errorf("stop: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after the stop: %v", err)
	}
	t.Logf("the stop took %v", time.Since(start))
	client.CloseIdleConnections()

	waitFor(t, "Redis connections closed", func() []string { return redisClients(t, rs) })
	// The gateway's pooled upstream connections are released by
	// Gateway.Close.
	waitFor(t, "upstream connections closed", func() []string { return make([]string, upConns()) })
	up.Close()
	waitFor(t, "goroutines ended", func() []string { return leftover(base) })
	// A second stop, of either kind, does nothing.
	if err := srv.Close(); err != nil {
		t.Errorf("Close after the stop: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after the stop: %v", err)
	}
}

// TestNewClosesWhatItBuiltWhenAStepFails: when a late step of New fails
// (the admin API's address is taken), the components the steps before it
// built (the Redis client, the keystore's subscription, the usage
// flusher, the token issuer, TLS, the listeners) are closed again.
func TestNewClosesWhatItBuiltWhenAStepFails(t *testing.T) {
	rs := redistest.Start(t)
	redisKey(t, rs)
	up, _ := connCountedUpstream(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	base := goroutines()

	srv, err := server.New(context.Background(), redisConfig(t, rs, up.URL, taken.Addr().String()), server.Deps{Logger: zap.NewNop()})
	if err == nil {
		_ = srv.Close()
		t.Fatal("New succeeded on a taken admin_api.listen address")
	}
	if !strings.Contains(err.Error(), "admin_api.listen") {
		t.Errorf("New: %v, want an error naming admin_api.listen", err)
	}
	waitFor(t, "Redis connections closed", func() []string { return redisClients(t, rs) })
	up.Close()
	waitFor(t, "goroutines ended", func() []string { return leftover(base) })
}

// redisKey issues a live extraction key for ctxA into the Redis keystore
// of rs, with a client closed before it returns.
func redisKey(t *testing.T, rs *redistest.Server) string {
	t.Helper()
	c := rs.Client(t)
	key, _ := redisIssuer(t, &keystore.RedisAdmin{Client: c})()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return key
}

// connCountedUpstream is a stand-in extraction backend and a count of the
// connections open to it.
func connCountedUpstream(t *testing.T) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	up := httptest.NewUnstartedServer(standin.Handler{Name: "extraction"})
	up.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	return up, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(open)
	}
}

// redisConfig keeps everything it can in the Redis of rs, with the token
// endpoint and the admin API (on adminAPI) on.
func redisConfig(t *testing.T, rs *redistest.Server, upstream, adminAPI string) config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminListen = "127.0.0.1:0"
	cfg.Server.SpoolDir = dir
	cfg.TLS.SelfSignedDir = filepath.Join(dir, "tls")
	cfg.TLS.StoragePath = filepath.Join(dir, "certmagic")
	cfg.Upstreams.Extraction.Targets = []string{upstream}
	cfg.Upstreams.Registry.Targets = []string{upstream}
	cfg.Redis.Addrs = []string{rs.Addr}
	cfg.Keystore.Backend = "redis"
	// The audit file sits beside it; the default is under the working
	// directory.
	cfg.Keystore.File = filepath.Join(dir, "keys.yaml")
	cfg.RateLimit.Backend = "redis"
	cfg.RateLimit.Limits = map[string]policy.Limit{
		"live": {Rate: 1000, Per: time.Second, Burst: 1000},
		"test": {Rate: 1000, Per: time.Second, Burst: 1000},
	}
	cfg.Auth.TokenEndpoint.Enabled = true
	cfg.Auth.TokenEndpoint.Issuer = ownIssuer
	cfg.AdminAPI.Enabled, cfg.AdminAPI.Listen, cfg.AdminAPI.TLS = true, adminAPI, adminapi.TLSOff
	return cfg
}

func newRedisServer(t *testing.T, rs *redistest.Server, upstream, adminAPI string) (*server.Server, config.Config) {
	t.Helper()
	cfg := redisConfig(t, rs, upstream, adminAPI)
	srv, err := server.New(context.Background(), cfg, server.Deps{Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	return srv, cfg
}

// tlsClient trusts the certificate in certFile and speaks HTTP/2 to it.
func tlsClient(t *testing.T, certFile string) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: poolFromFile(t, certFile)}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func mustRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// redisClients are the connections Redis holds, but for the one asking.
func redisClients(t *testing.T, rs *redistest.Server) []string {
	t.Helper()
	list, err := rs.Do("CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(line, "cmd=client|list") {
			out = append(out, line)
		}
	}
	return out
}

// goroutines are the stacks of every goroutine, by their header line
// ("goroutine 7 [running]:" without its state).
func goroutines() map[string]string {
	buf := testkit.Stacks()
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		out[head] = g
	}
	return out
}

// leftover are the stacks of the goroutines that were not in base.
func leftover(base map[string]string) []string {
	var out []string
	for id, stack := range goroutines() {
		if _, ok := base[id]; !ok {
			out = append(out, stack)
		}
	}
	return out
}

// waitFor waits, up to leakDeadline, until left returns nothing, and
// fails with what it last returned.
func waitFor(t *testing.T, what string, left func() []string) {
	t.Helper()
	start := time.Now()
	for {
		l := left()
		if len(l) == 0 {
			t.Logf("%s after %v", what, time.Since(start))
			return
		}
		if time.Since(start) > leakDeadline {
			t.Fatalf("%s: still %d after %v:\n%s", what, len(l), leakDeadline, strings.Join(l, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
