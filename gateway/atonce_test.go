package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/standin"
)

// answeredAtOnce sends head (a request head that declares a body) on a new
// HTTP/1.1 connection and no body byte, and checks that the answer comes
// without the body, with status and the spec's body, and that the
// connection is then closed (so that a refused client cannot hold it by
// not sending the body it declared).
func answeredAtOnce(t *testing.T, e *env, head string, status int, msgHas string) {
	t.Helper()
	c := tlsDial(t, e.URL)
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(start.Add(testkit.HangCheck))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v without the body (hang check): %v", testkit.HangCheck, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	// The body is never sent, so the read deadline above is the hang
	// check: an answer that waited for the body would not come at all.
	t.Logf("answered after %s without the body", time.Since(start).Round(time.Millisecond))
	assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: body}, status, msgHas)
	if !resp.Close {
		t.Error("the answer does not say Connection: close")
	}
	// The connection is closed, not kept waiting for the body.
	_ = c.SetReadDeadline(time.Now().Add(testkit.HangCheck))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the answer, reading the connection gave %v, want EOF (closed)", err)
	}
}

func postHead(key string, framing string) string {
	return "POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + key +
		"\r\nContent-Type: multipart/form-data; boundary=b\r\n" + framing + "\r\n"
}

// TestRefusalBeforeTheBodyIsAnsweredAtOnce: every refusal made before the
// body is read is answered at once, whatever body size the request
// declares (net/http would otherwise read up to 256 KiB of an unread body
// before writing the answer, and wait for a client that never sends it),
// and the connection is closed after it.
func TestRefusalBeforeTheBodyIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{maxBody: 1 << 20})
	for _, n := range []int{1, 1000, 100000, 200000, 262144, 300000} {
		t.Run(fmt.Sprintf("unknown key, Content-Length %d", n), func(t *testing.T) {
			t.Parallel()
			answeredAtOnce(t, e, postHead("svc_live_"+strings.Repeat("x", 40), fmt.Sprintf("Content-Length: %d\r\n", n)), 401, "")
		})
	}
	cases := []struct {
		name, head string
		status     int
		msg        string
	}{
		{"unknown key, chunked", postHead("svc_live_"+strings.Repeat("x", 40), "Transfer-Encoding: chunked\r\n"), 401, ""},
		{"unknown key, waiting for 100 Continue", postHead("svc_live_"+strings.Repeat("x", 40), "Expect: 100-continue\r\nContent-Length: 100000\r\n"), 401, ""},
		{"no key", postHead("", "Content-Length: 100000\r\n"), 401, ""},
		{"revoked key", postHead(e.RevokedKey, "Content-Length: 100000\r\n"), 401, ""},
		{"wrong product", postHead(e.RegistryKey, "Content-Length: 100000\r\n"), 403, "extraction product"},
		{"no such endpoint", "POST /nowhere HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + e.LiveKey + "\r\nContent-Length: 100000\r\n\r\n", 404, ""},
		{"wrong method on /sync", "PUT /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + e.LiveKey + "\r\nContent-Length: 100000\r\n\r\n", 405, ""},
		{"declared length over the cap", postHead(e.LiveKey, "Content-Length: 2000000\r\n"), 413, "too large"},
		{"two Content-Types", "POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + e.LiveKey + "\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n", 400, "Content-Type"},
		{"credential in the URL", "POST /sync?key=" + e.LiveKey + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n", 400, "never in the URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			answeredAtOnce(t, e, c.head, c.status, c.msg)
		})
	}
	t.Run("wrong context in the part sent, the rest never sent", func(t *testing.T) {
		t.Parallel()
		ct, body := form(t, part{"contextId", ctxB}, part{"id", "1"}, part{"files", strings.Repeat("x", 100000)})
		prefix := body[:bytes.Index(body, []byte("xxxx"))]
		head := fmt.Sprintf("POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", e.LiveKey, ct, len(body), prefix)
		answeredAtOnce(t, e, head, 403, "Invalid Context")
	})
	t.Run("HTTP/2, unknown key, Content-Length 100000", func(t *testing.T) {
		t.Parallel()
		pr, pw := io.Pipe()
		defer pw.Close()
		req := e.request("POST", "/sync", "svc_live_"+strings.Repeat("x", 40), "multipart/form-data; boundary=b", pr)
		req.ContentLength = 100000
		// The body is never sent: an answer that waited for it would
		// not come before the client's timeout, the hang check.
		start := time.Now()
		r := e.do(req)
		t.Logf("answered after %s without the body", time.Since(start).Round(time.Millisecond))
		if r.Proto != 2 {
			t.Errorf("HTTP/%d, want HTTP/2", r.Proto)
		}
		assertError(t, r, 401, "")
	})
}

// TestLimitRefusalIsAnsweredAtOnce: a key past its rate or quota, or past
// its concurrency cap, gets 429 at once with no body byte sent.
func TestLimitRefusalIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("past its rate", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{limits: map[string]policy.Limit{
			"live": {Rate: 1, Per: time.Hour, Burst: 1},
			"test": {Rate: 1, Per: time.Hour, Burst: 10, Quota: policy.Quota{Requests: 1, Per: time.Hour}},
		}})
		for _, key := range []string{e.LiveKey, e.TestKey} {
			if r := e.sync(key, ctxA); r.Status != 200 {
				t.Fatalf("first request: %d", r.Status)
			}
		}
		for _, n := range []int{1000, 100000, 200000} {
			answeredAtOnce(t, e, postHead(e.LiveKey, fmt.Sprintf("Content-Length: %d\r\n", n)), 429, "too many requests")
			answeredAtOnce(t, e, postHead(e.TestKey, fmt.Sprintf("Content-Length: %d\r\n", n)), 429, "quota")
		}
		answeredAtOnce(t, e, postHead(e.LiveKey, "Transfer-Encoding: chunked\r\n"), 429, "too many requests")
	})
	t.Run("an address past the failure limit", func(t *testing.T) {
		t.Parallel()
		f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: ratelimit.FailureLimitConfig{Enabled: true, Rate: 1, Per: time.Hour, Burst: 1, MaxAddresses: 100}})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOpts{failures: f})
		unknown := "svc_live_" + strings.Repeat("x", 40)
		assertError(t, e.sync(unknown, ctxA), 401, "")
		answeredAtOnce(t, e, postHead(unknown, "Content-Length: 100000\r\n"), 429, "failed authentications")
		answeredAtOnce(t, e, postHead(e.LiveKey, "Content-Length: 100000\r\n"), 429, "failed authentications")
	})
	t.Run("past its concurrency cap", func(t *testing.T) {
		t.Parallel()
		up := testkit.NewHoldingUpstream(standin.Handler{Name: "extraction"})
		defer up.Release()
		e := newEnv(t, envOpts{concurrent: 1, extractionH: up})
		up.Hold(e.LiveID)
		wait := testkit.InFlight(t, 1, func() int { return e.sync(e.LiveKey, ctxA).Status })
		testkit.Eventually(t, testkit.HangCheck, "a request at the upstream", func() error {
			return testkit.True(up.Held() >= 1, "%d at the upstream", up.Held())
		})
		for _, n := range []int{1000, 100000, 200000} {
			answeredAtOnce(t, e, postHead(e.LiveKey, fmt.Sprintf("Content-Length: %d\r\n", n)), 429, "concurrent requests")
		}
		up.Release()
		wait()
	})
}

// TestRefusalAfterAWholeBodyKeepsTheConnection: a refusal of a request
// whose small body arrived with it (a 401 for an unknown key, before the
// body is looked at) or was read to its end (403 Invalid Context) leaves
// the connection open: the requests pipelined after it are served.
func TestRefusalAfterAWholeBodyKeepsTheConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ct, body := syncForm(t, ctxB)
	ctGood, good := syncForm(t, ctxA)
	req := func(key, ct string, b []byte) string {
		return fmt.Sprintf("POST /sync HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", key, ct, len(b), b)
	}
	unknown := "svc_live_" + strings.Repeat("x", 40)
	c := tlsDial(t, e.URL)
	defer c.Close()
	_, _ = io.WriteString(c, req(unknown, ct, body)+req(e.LiveKey, ct, body)+req(unknown, ct, body)+req(e.LiveKey, ctGood, good))
	br := bufio.NewReader(c)
	for i, want := range []int{401, 403, 401, 200} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != want || resp.Close {
			t.Fatalf("response %d: %d (close %v), want %d on the same connection", i, resp.StatusCode, resp.Close, want)
		}
	}
}

// TestTooLargeChunkedBodyClosesTheConnection: a chunked body outside /sync
// that goes past max_body_bytes gets 413 and the connection is closed
// rather than read on.
func TestTooLargeChunkedBodyClosesTheConnection(t *testing.T) {
	t.Parallel()
	up := newRecordingUpstream()
	reg := httptest.NewServer(up)
	t.Cleanup(reg.Close)
	e := newEnv(t, envOpts{maxBody: 1000, registry: []string{reg.URL}})
	c := tlsDial(t, e.URL)
	defer c.Close()
	fmt.Fprintf(c, "POST /registry/schemas HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nTransfer-Encoding: chunked\r\n\r\n", e.RegistryKey)
	chunk := strings.Repeat("z", 600)
	for range 3 {
		fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, 413, "too large")
	if !resp.Close {
		t.Error("the 413 does not say Connection: close")
	}
	_ = c.SetReadDeadline(time.Now().Add(testkit.HangCheck))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after the 413, reading the connection gave %v, want it closed", err)
	}
	up.expectAborted(t)
}

// TestRefusedUploadReachesAClientStillSending: a client that sends a
// large body as it goes (as Go's, curl's and browsers' clients do) and is
// refused before keygate reads it gets the refusal, not a reset
// connection. net/http half-closes such a connection and waits before
// closing it only when it finds its own body in the request; keygate puts
// it back after wrapping it.
func TestRefusedUploadReachesAClientStillSending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{maxBody: 8 << 20})
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: e.Client.Transport.(*http.Transport).TLSClientConfig,
		// HTTP/1.1: an HTTP/2 refusal ends only its stream.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
	ct, body := form(t, part{"files", strings.Repeat("x", 1<<20)}, part{"id", "1"}, part{"contextId", ctxA})
	cases := []struct {
		name, key, ct string
		status        int
		msg           string
	}{
		{"unknown key", "svc_live_" + strings.Repeat("x", 40), ct, 401, ""},
		{"wrong product", e.RegistryKey, ct, 403, "extraction product"},
		{"boundary parameter in capitals", e.LiveKey, strings.Replace(ct, "boundary=", "BOUNDARY=", 1), 400, "multipart/form-data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 20 {
				req := e.request("POST", "/sync", c.key, c.ct, bytes.NewReader(body))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("the client got no answer: %v", err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("reading the answer: %v", err)
				}
				assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, c.status, c.msg)
			}
		})
	}
}
