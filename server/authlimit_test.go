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
// path: a body that stops gets 408 and the connection is closed, however
// little of it is missing (a body whose every byte arrived with its head
// is read without a timer: framing.BodyBuffered), on the connection's
// first request or a later one, with Content-Length or chunked; a whole
// body is served.
func TestBodyIdleTimeoutIsWired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Server.BodyIdleTimeout = 300 * time.Millisecond }})
	ct, body := syncForm(t, ctxA)
	head := fmt.Sprintf("POST /sync HTTP/1.1\r\nHost: localhost\r\nx-api-key: %s\r\nContent-Type: %s\r\n", h.LiveKey, ct)
	whole := head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + string(body)
	chunked := head + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	for _, tc := range []struct {
		name string
		sent string // then nothing more
		want []int  // the statuses, in order
	}{
		{"half the body", whole[:len(whole)-len(body)/2], []int{408}},
		{"all but the body's last byte", whole[:len(whole)-1], []int{408}},
		{"a chunked body but its last CRLF", chunked[:len(chunked)-2], []int{408}},
		{"a whole body, then a second request all but its last byte", whole + whole[:len(whole)-1], []int{200, 408}},
		{"a whole body", whole, []int{200}},
		{"a whole chunked body", chunked, []int{200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", strings.TrimPrefix(h.API, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.sent); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			for _, want := range tc.want {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want == 200 {
					if resp.StatusCode != 200 {
						t.Fatalf("status %d, want 200: %s", resp.StatusCode, b)
					}
					continue
				}
				assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, 408, "no request body data")
				if !resp.Close {
					t.Error("connection not closed")
				}
			}
		})
	}
}
