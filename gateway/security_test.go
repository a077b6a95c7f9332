package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/standin"
)

// headerUpstream counts what reaches the extraction stand-in and keeps
// the last request's headers and trailers.
type headerUpstream struct {
	hits     atomic.Int64
	mu       sync.Mutex
	header   http.Header
	trailer  http.Header
	rawPaths []string
}

func (u *headerUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.header, u.trailer = r.Header.Clone(), r.Trailer.Clone()
	u.rawPaths = append(u.rawPaths, r.RequestURI)
	u.mu.Unlock()
	standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
}

// raw sends hand-written request bytes over TLS (HTTP/1.1) and reads one
// response.
func raw(t *testing.T, e *env, req string) testkit.Result {
	t.Helper()
	c := tlsDial(t, e.URL)
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return testkit.Result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func syncRequest(t *testing.T, key, extraHeaders string, chunked bool) string {
	ct, body := syncForm(t, ctxA)
	var b strings.Builder
	fmt.Fprintf(&b, "POST /sync HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Type: %s\r\n%s", key, ct, extraHeaders)
	if chunked {
		fmt.Fprintf(&b, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n", len(body), body)
		return b.String()
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

func TestSecurityHeadersRefused(t *testing.T) {
	t.Parallel()
	up := &headerUpstream{}
	e := newEnv(t, envOpts{extractionH: up})
	for _, c := range []struct {
		name, extra string
		status      int
	}{
		{"two content types", "Content-Type: multipart/form-data; boundary=other\r\n", 400},
		{"gzip", "Content-Encoding: gzip\r\n", 415},
		{"identity then gzip", "Content-Encoding: identity, gzip\r\n", 415},
	} {
		r := raw(t, e, syncRequest(t, e.LiveKey, c.extra, false))
		testkit.AssertSpecError(t, r.Status, r.Header, r.Body, c.status, "")
	}
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
	r := raw(t, e, syncRequest(t, e.LiveKey, "Content-Encoding: identity\r\n", false))
	if r.Status != 200 {
		t.Fatalf("identity: %d %s", r.Status, r.Body)
	}
}

func TestSecurityHeadersScrubbed(t *testing.T) {
	t.Parallel()
	up := &headerUpstream{}
	e := newEnv(t, envOpts{extractionH: up})
	extra := "x_api_key: " + e.LiveKey + "\r\nX-Api_key: " + e.LiveKey + "\r\n" +
		"X-Real-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\nX-Client-IP: 6.6.6.6\r\nX-Cluster-Client-IP: 6.6.6.6\r\n" +
		"Trailer: X-Api-Key, X-Keygate-Context, X-Evil\r\n"
	req := syncRequest(t, e.LiveKey, extra, true) + "X-Api-Key: " + e.LiveKey + "\r\nX-Keygate-Context: " + ctxB + "\r\nX-Evil: 1\r\n\r\n"
	r := raw(t, e, req)
	if r.Status != 200 {
		t.Fatalf("status %d %s", r.Status, r.Body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for k, v := range up.header {
		if strings.Contains(k, "_") || strings.Contains(strings.Join(v, ","), e.LiveKey) {
			t.Errorf("upstream saw %s: %v", k, v)
		}
	}
	for _, k := range []string{"True-Client-Ip", "Cf-Connecting-Ip", "X-Client-Ip", "X-Cluster-Client-Ip", "Trailer"} {
		if v, ok := up.header[k]; ok {
			t.Errorf("upstream saw %s: %v", k, v)
		}
	}
	if got := up.header.Get("X-Real-Ip"); got != "127.0.0.1" {
		t.Errorf("X-Real-IP = %q", got)
	}
	if len(up.trailer) != 0 {
		t.Errorf("upstream saw trailers %v", up.trailer)
	}
	if got := up.header.Get("X-Keygate-Context"); got != ctxA {
		t.Errorf("context %q", got)
	}
}

func TestSecurityTrailerKeyDoesNotAuthenticate(t *testing.T) {
	t.Parallel()
	up := &headerUpstream{}
	e := newEnv(t, envOpts{extractionH: up})
	ct, body := syncForm(t, ctxA)
	req := fmt.Sprintf("POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nTrailer: X-Api-Key\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\nX-Api-Key: %s\r\n\r\n", ct, len(body), body, e.LiveKey)
	r := raw(t, e, req)
	testkit.AssertSpecError(t, r.Status, r.Header, r.Body, 401, "")
	if up.hits.Load() != 0 {
		t.Fatal("forwarded")
	}
}

func TestSecurityPaths(t *testing.T) {
	t.Parallel()
	up := &headerUpstream{}
	e := newEnv(t, envOpts{extractionH: up})
	for _, p := range []string{"/%73ync", "/sync;x", "/sync%2f", "/registry%2fx", "/registry/..;/sync", "/registry/%2e%2e/sync", "/registry/a%2Fb", "/registry/a;b", "/%2fsync"} {
		key := e.LiveKey
		if strings.HasPrefix(p, "/registry") {
			key = e.RegistryKey
		}
		r := raw(t, e, "GET "+p+" HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+key+"\r\n\r\n")
		if r.Status != 404 && r.Status != 400 {
			t.Errorf("%s: status %d", p, r.Status)
		}
		if bytes.Contains(r.Body, []byte(p)) {
			t.Errorf("%s: body echoes the path: %s", p, r.Body)
		}
	}
	if up.hits.Load() != 0 {
		t.Fatalf("forwarded %v", up.rawPaths)
	}
	// A registry path is forwarded byte for byte.
	r := raw(t, e, "GET /registry/a%20b/c HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+e.RegistryKey+"\r\n\r\n")
	var echo standin.Echo
	if err := json.Unmarshal(r.Body, &echo); err != nil || r.Status != 200 || echo.Path != "/registry/a%20b/c" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}

func TestSecurityNotFoundDoesNotEchoPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.do(e.request("GET", "/no/such/<script>", e.LiveKey, "", nil))
	assertError(t, r, 404, "no such endpoint")
	if bytes.Contains(r.Body, []byte("script")) || bytes.Contains(r.Body, []byte("such/")) {
		t.Fatalf("body echoes the path: %s", r.Body)
	}
}

// TestSecurityCredentialInURL: a key-shaped value or a bearer token in the
// path or query is refused with 400 before anything else, never forwarded
// and never echoed; so is a method that is not HTTP's (a key pasted into
// the method position).
func TestSecurityCredentialInURL(t *testing.T) {
	t.Parallel()
	up := &headerUpstream{}
	e := newEnv(t, envOpts{extractionH: up})
	for _, target := range []string{"/svc_live_notakey1", "/registry/" + e.RegistryKey, "/registry?k=" + e.RegistryKey, "/sync?token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln", "/registry/SVC_TEST_abc"} {
		r := e.do(e.request("GET", target, e.RegistryKey, "", nil))
		assertError(t, r, 400, "never in the URL")
		if bytes.Contains(r.Body, []byte("svc_")) || bytes.Contains(r.Body, []byte("SVC_")) {
			t.Fatalf("%s: the body echoes it: %s", target, r.Body)
		}
	}
	c := tlsDial(t, e.URL)
	defer c.Close()
	_, _ = c.Write([]byte("SVC_LIVE_ABCDEF123 /registry/x HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + e.RegistryKey + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, 405, "method not allowed")
	if bytes.Contains(b, []byte("SVC_")) {
		t.Fatalf("the body echoes the method: %s", b)
	}
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}
