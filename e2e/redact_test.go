package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestRedactKeysInLogs: finding 8. A key in the path, in the method
// position of the request line, and in the header of a failing request
// never reaches keygate's log (debug level, so every line is written), nor
// does a bearer token.
func TestRedactKeysInLogs(t *testing.T) {
	g := startGateway(t, gwOpts{skipStart: true})
	g.rewriteConfig(func(c string) string { return strings.Replace(c, "level: info", "level: debug", 1) })
	g.start()
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	other := g.issue("--product", "registry", "--env", "test")
	waitForKey(t, g, key)
	random := key[len("svc_live_"):]
	const jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlc2VjcmV0"

	do := func(method, path string, hdr ...string) int {
		t.Helper()
		req, err := http.NewRequest(method, g.API+path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := g.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// In the path.
	do("POST", "/"+key)
	do("POST", "/"+key, "X-Api-Key", key)
	do("GET", "/registry/"+key)
	do("GET", "/registry/"+key, "X-Api-Key", other)
	do("GET", "/registry/"+strings.ToUpper(key[:9])+random, "X-Api-Key", other)
	// In a header of a failing request: a key for another product, a key
	// as a bearer token, a JWT.
	do("GET", "/registry/schemas", "X-Api-Key", key)
	do("POST", "/sync", "X-Api-Key", key, "Content-Type", "multipart/form-data; boundary=x")
	do("GET", "/sync", "Authorization", "Bearer "+key)
	do("GET", "/sync", "Authorization", "Bearer "+jwt)
	// In the method position, over raw HTTP/1.1 (net/http accepts any
	// token as a method): with and without the key in its header too.
	for _, req := range []string{
		key + " /sync HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n",
		key + " /sync HTTP/1.1\r\nHost: k\r\nX-Api-Key: " + key + "\r\nConnection: close\r\n\r\n",
		key + " /registry/" + key + " HTTP/1.1\r\nHost: k\r\nX-Api-Key: " + other + "\r\nConnection: close\r\n\r\n",
		// Refused by the framing check, key in path and method.
		key + " /" + key + " HTTP/1.1\r\nHost: k\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		testkit.RawExchange(t, g.apiAddr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}, req)
	}
	// Stop the gateway so that every line is flushed.
	g.signal(syscall.SIGTERM)
	_ = g.wait(10 * time.Second)
	logs := g.logs.String()
	if !strings.Contains(logs, `"msg":"request"`) {
		t.Fatalf("no access log lines:\n%s", logs)
	}
	for _, s := range []string{key, random, random[:12], strings.ToUpper(key[:9]) + random, jwt, "c2lnbmF0dXJlc2VjcmV0", other, other[len("svc_test_"):]} {
		if strings.Contains(logs, s) {
			t.Errorf("the log holds a secret (%d chars)", len(s))
		}
	}
	if testing.Verbose() {
		t.Log(logs)
	}
	if n := strings.Count(logs, "[REDACTED]"); n < 10 {
		t.Errorf("%d redactions in the log, want at least 10:\n%s", n, logs)
	}
	assertNoKeyInLogs(t, g)
}
