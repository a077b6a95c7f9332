package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// The findings of issue 7 that concern what reaches the upstream, each
// against the real binary with hand-written request bytes where net/http
// would normalise the request: refused with the stated status and the
// spec's JSON body, nothing forwarded, and no key in any log line. A
// request keygate does forward reaches the upstream with none of what the
// client should not be able to say there.

// recordingUpstream counts requests and keeps the last one's headers,
// trailers and raw path.
type recordingUpstream struct {
	hits    atomic.Int64
	mu      sync.Mutex
	header  http.Header
	trailer http.Header
	uri     string
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.hits.Add(1)
	u.mu.Lock()
	u.header, u.trailer, u.uri = r.Header.Clone(), r.Trailer.Clone(), r.RequestURI
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (u *recordingUpstream) last() (http.Header, http.Header, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.header, u.trailer, u.uri
}

// rawResponse sends raw request bytes over a fresh HTTP/1.1 TLS connection
// and reads one response.
func (g *gateway) rawResponse(t *testing.T, req string) (*http.Response, []byte) {
	t.Helper()
	c := g.dialFrom(t, "")
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// rawSyncBody is a well-formed /sync form bound to ctx, delimited by boundary.
func rawSyncBody(boundary, ctx string) string {
	return "--" + boundary + "\r\n" +
		"Content-Disposition: form-data; name=\"files\"; filename=\"doc.pdf\"\r\nContent-Type: application/pdf\r\n\r\n%PDF-1.4 x\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\n2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + ctx + "\r\n" +
		"--" + boundary + "--\r\n"
}

func TestSecurityWhatTheUpstreamReads(t *testing.T) {
	up := &recordingUpstream{}
	g := startGateway(t, gwOpts{upstream: up})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	eventually(t, testkit.HangCheck, func() string {
		if st, b, _ := g.post(key, ctxA, []byte("%PDF-1.4")); st != http.StatusOK {
			return fmt.Sprintf("the new key gets %d: %s", st, b)
		}
		return ""
	})
	host := g.apiAddr()

	refusals := []struct {
		name   string
		req    string
		status int
		msg    string
	}{
		{
			// Finding 1: a part that is not form-data but names the context.
			name: "attachment disposition carries another context", status: 400, msg: "Content-Disposition",
			req: func() string {
				body := "--B\r\nContent-Disposition: attachment; name=\"contextId\"\r\n\r\n" + ctxB + "\r\n" + rawSyncBody("B", ctxA)
				return "POST /sync HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key + "\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
			}(),
		},
		{
			// Finding 2: two Content-Type headers with different boundaries.
			name: "two Content-Type headers", status: 400, msg: "exactly one Content-Type",
			req: func() string {
				body := rawSyncBody("A", ctxA)
				return "POST /sync HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key + "\r\nContent-Type: multipart/form-data; boundary=A\r\nContent-Type: multipart/form-data; boundary=Z\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
			}(),
		},
		{
			// Finding 3: a compressed form (the upstream would decompress
			// and read another one).
			name: "Content-Encoding gzip", status: 415, msg: "Content-Encoding",
			req: func() string {
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				_, _ = zw.Write([]byte(rawSyncBody("A", ctxA)))
				_ = zw.Close()
				body := buf.String()
				return "POST /sync HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key + "\r\nContent-Type: multipart/form-data; boundary=A\r\nContent-Encoding: gzip\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
			}(),
		},
		{
			name: "context in the query string", status: 400, msg: "query string",
			req: func() string {
				body := rawSyncBody("A", ctxA)
				return "POST /sync?contextId=" + ctxB + " HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key + "\r\nContent-Type: multipart/form-data; boundary=A\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
			}(),
		},
	}
	// Finding 7: paths an upstream could read as another route.
	for _, p := range []string{"/%73ync", "/registry%2fx", "/registry/..;/sync", "/registry/%2e%2e/sync", "/registry/a%2Fb", "/sync;x", "/" + key, "/registry/x?k=" + key} {
		body := rawSyncBody("A", ctxA)
		status, msg := 404, "no such endpoint"
		switch {
		case strings.Contains(p, key): // finding 8: a key in the URL
			status, msg = 400, "never in the URL"
		case strings.HasPrefix(p, "/registry/"): // issue 49: read in more than one way
			status, msg = 400, "more than one way"
		}
		refusals = append(refusals, struct {
			name   string
			req    string
			status int
			msg    string
		}{
			name: "path " + strings.ReplaceAll(p, key, "<key>"), status: status, msg: msg,
			req: "POST " + p + " HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key + "\r\nContent-Type: multipart/form-data; boundary=A\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body,
		})
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			before := up.hits.Load()
			resp, b := g.rawResponse(t, c.req)
			specError(t, resp.StatusCode, resp.Header, b, c.status, c.msg)
			if strings.Contains(string(b), key) || strings.Contains(string(b), "%73ync") || strings.Contains(string(b), "registry%2f") {
				t.Errorf("the error body echoes the request: %s", b)
			}
			if n := up.hits.Load() - before; n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
		})
	}

	// Findings 4, 5 and 6: a valid request with trailers, underscore
	// aliases of the key and client IP headers is forwarded without them.
	t.Run("trailers, header aliases and client IP headers are not forwarded", func(t *testing.T) {
		body := rawSyncBody("A", ctxA)
		chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Api-Key: %s\r\nX-Keygate-Context: %s\r\n\r\n", len(body), body, key, ctxB)
		req := "POST /sync HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key +
			"\r\nx_api_key: " + key + "\r\nX-Api_key: " + key +
			"\r\nX-Real-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\nX-Client-IP: 6.6.6.6\r\nX-Cluster-Client-IP: 6.6.6.6\r\nX-Forwarded-For: 6.6.6.6" +
			"\r\nTrailer: X-Api-Key, X-Keygate-Context\r\nContent-Type: multipart/form-data; boundary=A\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
		before := up.hits.Load()
		resp, b := g.rawResponse(t, req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if up.hits.Load()-before != 1 {
			t.Fatal("the request did not reach the upstream")
		}
		h, tr, uri := up.last()
		if len(tr) != 0 {
			t.Errorf("the upstream received trailers %v", tr)
		}
		if uri != "/sync" {
			t.Errorf("the upstream received path %q", uri)
		}
		for k, vs := range h {
			if strings.Contains(k, "_") {
				t.Errorf("header %q reached the upstream", k)
			}
			for _, v := range vs {
				if strings.Contains(v, key) {
					t.Errorf("the key reached the upstream in %s", k)
				}
				if strings.Contains(v, "6.6.6.6") {
					t.Errorf("the client's %s: %s reached the upstream", k, v)
				}
			}
		}
		if got := h.Get("X-Real-Ip"); got != "127.0.0.1" {
			t.Errorf("X-Real-IP = %q, want the client address 127.0.0.1", got)
		}
		if got := h.Get("X-Forwarded-For"); got != "127.0.0.1" {
			t.Errorf("X-Forwarded-For = %q, want 127.0.0.1", got)
		}
		if got := h.Get("X-Keygate-Context"); got != ctxA {
			t.Errorf("X-Keygate-Context = %q, want the key's", got)
		}
	})
	assertNoKeyInLogs(t, g)
}

// TestSecurityPlainHTTPNeverEchoesAKey: a key-less GET with a key in the
// query on the plain-HTTP listener is refused and counted, never
// redirected with the key in Location (finding 8).
func TestSecurityPlainHTTPNeverEchoesAKey(t *testing.T) {
	httpAddr := testkit.FreeAddr(t)
	g := startGateway(t, gwOpts{serverYAML: fmt.Sprintf("  http_listen: %q\n", httpAddr)})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, target := range []string{"/sync?x-api-key=" + key, "/registry?k=" + strings.ToUpper(key[:9]) + key[9:], "/" + key, "/sync?x-api-key=" + strings.ReplaceAll(key, "_", "%5F"), "/registry?access_token=opaque123"} {
		resp, err := client.Get("http://" + httpAddr + target)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		specError(t, resp.StatusCode, resp.Header, b, http.StatusBadRequest, "HTTPS required")
		if loc := resp.Header.Get("Location"); loc != "" {
			t.Errorf("redirected to %q", loc)
		}
		if strings.Contains(string(b), key[9:]) {
			t.Errorf("the body echoes the key: %s", b)
		}
	}
	if got := g.metric("keygate_cleartext_credentials_total", "kind", "url"); got != 5 {
		t.Errorf("keygate_cleartext_credentials_total{kind=url} = %v, want 5", got)
	}
	// A key-less GET without a key still redirects.
	resp, err := client.Get("http://" + httpAddr + "/registry?page=2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Errorf("a key-less GET got %d, want 308", resp.StatusCode)
	}
	assertNoKeyInLogs(t, g)
}
