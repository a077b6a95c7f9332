package server_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// TestFailureLimitIsWired: auth.failure_limit from the configuration
// throttles an address after its burst of failed keys, a valid key from it
// included, and the counts are on the admin /metrics.
func TestFailureLimitIsWired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) {
		c.Auth.FailureLimit = ratelimit.FailureLimitConfig{Enabled: true, Rate: 1, Per: time.Hour, Burst: 3, MaxAddresses: 10}
	}})
	for i := 0; i < 3; i++ {
		guess, _ := keystore.Generate(keystore.Live)
		assertError(t, h.sync(keyCred(h.secret(guess)), ctxA), 401, "invalid")
	}
	guess, _ := keystore.Generate(keystore.Live)
	r := h.sync(keyCred(h.secret(guess)), ctxA)
	assertError(t, r, 429, "failed authentications")
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	assertError(t, h.sync(keyCred(h.LiveKey), ctxA), 429, "failed authentications")
	if n := h.Extraction.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	if got := h.metric("keygate_auth_failures_counted_total"); got != 4 {
		t.Errorf("keygate_auth_failures_counted_total = %v, want 4", got)
	}
	if got := h.metric("keygate_auth_throttled_total"); got != 2 {
		t.Errorf("keygate_auth_throttled_total = %v, want 2", got)
	}
}

// TestFailureLimitOff: with auth.failure_limit disabled, failures are only
// 401s and no failure-limit metric is exported.
func TestFailureLimitOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Auth.FailureLimit.Enabled = false }})
	for i := 0; i < 80; i++ {
		guess, _ := keystore.Generate(keystore.Live)
		if r := h.sync(keyCred(h.secret(guess)), ctxA); r.Status != 401 {
			t.Fatalf("guess %d: %d", i, r.Status)
		}
	}
	resp, err := http.Get(h.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "keygate_auth_throttled_total") {
		t.Error("a disabled failure limit exports metrics")
	}
}

// TestBodyIdleTimeoutIsWired: server.body_idle_timeout reaches the request
// path: a body that stops gets 408 and the connection is closed.
func TestBodyIdleTimeoutIsWired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Server.BodyIdleTimeout = 300 * time.Millisecond }})
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.API, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ct, body := syncForm(t, ctxA)
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: localhost\r\nx-api-key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", h.LiveKey, ct, len(body))
	_, _ = conn.Write(body[:len(body)/2])
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, 408, "no request body data")
	if !resp.Close {
		t.Error("connection not closed")
	}
}
