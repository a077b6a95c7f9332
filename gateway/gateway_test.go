package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/standin"
)

// TestSpecStatuses drives every refusal of the spec and of the issue
// through real TLS and checks status, body shape, message and trace id.
func TestSpecStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{maxBody: 1 << 20})
	ct, okBody := syncForm(t, ctxA)
	ctB, bodyB := syncForm(t, ctxB)
	notMultipart := "text/plain"
	truncated := okBody[:len(okBody)-20]

	cases := []struct {
		name, method, path, key, ct string
		body                        []byte
		status                      int
		msg                         string
	}{
		{"missing key", "POST", "/sync", "", ct, okBody, 401, "missing"},
		{"invalid key with a valid shape", "POST", "/sync", "svc_live_" + strings.Repeat("a", 36), ct, okBody, 401, "invalid"},
		{"wrong prefix", "POST", "/sync", "svc_prod_" + e.LiveKey[9:], ct, okBody, 401, "invalid"},
		{"key with whitespace", "POST", "/sync", e.LiveKey + " ", ct, okBody, 401, "invalid"},
		{"checksum off by one char", "POST", "/sync", keystoretest.Mistype(e.LiveKey), ct, okBody, 401, "invalid"},
		{"revoked key", "POST", "/sync", e.RevokedKey, ct, okBody, 401, "revoked"},
		{"expired key", "POST", "/sync", e.ExpiredKey, ct, okBody, 401, "expired"},
		{"no key on an unknown path is still 401", "GET", "/nope", "", "", nil, 401, "missing"},
		{"schema key on /sync", "POST", "/sync", e.RegistryKey, ct, okBody, 403, "extraction"},
		{"extraction key on /registry", "GET", "/registry/schemas", e.LiveKey, "", nil, 403, "registry"},
		{"wrong context", "POST", "/sync", e.LiveKey, ctB, bodyB, 403, "Invalid Context"},
		{"missing context", "POST", "/sync", e.LiveKey, formCT(t), formNoContext(t), 400, "contextId"},
		{"not multipart", "POST", "/sync", e.LiveKey, notMultipart, []byte("hello"), 400, "multipart"},
		{"truncated multipart", "POST", "/sync", e.LiveKey, ct, truncated[:len(truncated)/2], 400, ""},
		{"unknown path with a valid key", "GET", "/v2/sync", e.LiveKey, "", nil, 404, ""},
		{"trailing slash is not /sync", "POST", "/sync/", e.LiveKey, ct, okBody, 404, ""},
		{"double slash is not /sync", "POST", "//sync", e.LiveKey, ct, okBody, 404, ""},
		{"dot segments never reach an upstream", "POST", "/registry/../sync", e.RegistryKey, ct, okBody, 400, "more than one way"},
		{"GET /sync", "GET", "/sync", e.LiveKey, "", nil, 405, "POST"},
		{"body over max_body_bytes", "POST", "/sync", e.LiveKey, ct, bytes.Repeat([]byte("x"), 2<<20), 413, "too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var body io.Reader
			if c.body != nil {
				body = bytes.NewReader(c.body)
			}
			r := e.do(e.request(c.method, c.path, c.key, c.ct, body))
			assertError(t, r, c.status, c.msg)
			if c.status == 405 && r.Header.Get("Allow") != "POST" {
				t.Errorf("Allow = %q", r.Header.Get("Allow"))
			}
		})
	}
}

var noCtxCT, noCtxBody = func() (string, []byte) {
	return form(&testing.T{}, part{"files", "x"}, part{"id", "1"})
}()

func formCT(*testing.T) string        { return noCtxCT }
func formNoContext(*testing.T) []byte { return noCtxBody }

func TestSuccessForwardsAndIdentifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ct, body := syncForm(t, ctxA)
	req := e.request("POST", "/sync", e.LiveKey, ct, bytes.NewReader(body))
	req.Header.Set("X-Keygate-Key-Id", "spoofed")
	req.Header.Set("X-Keygate-Context", ctxB)
	req.Header.Set("x-keygate-admin", "true")
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("Authorization", "Basic c2VjcmV0")
	r := e.do(req)
	if r.Status != 200 {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	if r.Echo.SHA256 != sha(body) || r.Echo.Bytes != int64(len(body)) {
		t.Errorf("upstream got %d bytes sha %s, want %d %s", r.Echo.Bytes, r.Echo.SHA256, len(body), sha(body))
	}
	if r.Echo.SawAPIKey || r.Echo.SawAuthz || strings.Contains(string(r.Body), e.LiveKey) {
		t.Error("upstream saw the credential")
	}
	want := map[string]string{"x-keygate-key-id": e.LiveID, "x-keygate-context": ctxA, "x-keygate-env": "live", "x-keygate-product": "extraction"}
	for k, v := range want {
		if r.Echo.Identity[k] != v {
			t.Errorf("upstream %s = %q, want %q", k, r.Echo.Identity[k], v)
		}
	}
	if len(r.Echo.Identity) != len(want) {
		t.Errorf("upstream identity headers = %v", r.Echo.Identity)
	}
	if xff := r.Echo.Forwarded["x-forwarded-for"]; xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the gateway's fresh value", xff)
	}
	if r.Echo.Forwarded["x-forwarded-proto"] != "https" {
		t.Errorf("X-Forwarded-Proto = %q", r.Echo.Forwarded["x-forwarded-proto"])
	}
	tp := r.Echo.Forwarded["traceparent"]
	if !strings.HasPrefix(tp, "00-"+r.Header.Get("X-Trace-Id")+"-") {
		t.Errorf("traceparent %q does not carry trace id %q", tp, r.Header.Get("X-Trace-Id"))
	}
	for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "X-Trace-Id"} {
		if r.Header.Get(h) == "" {
			t.Errorf("response lacks %s", h)
		}
	}
}

func TestHeaderNameCaseAndDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, name := range []string{"x-api-key", "X-API-Key", "X-API-KEY", "x-Api-kEY"} {
		ct, body := syncForm(t, ctxA)
		req := e.request("POST", "/sync", "", ct, bytes.NewReader(body))
		req.Header[name] = []string{e.LiveKey}
		if r := e.do(req); r.Status != 200 {
			t.Errorf("header %q: status %d", name, r.Status)
		}
	}
	ct, body := syncForm(t, ctxA)
	req := e.request("POST", "/sync", "", ct, bytes.NewReader(body))
	req.Header["X-Api-Key"] = []string{e.LiveKey, e.TestKey}
	assertError(t, e.do(req), 401, "more than one")

	req = e.request("POST", "/sync", "", ct, bytes.NewReader(body))
	req.Header["X-Api-Key"] = []string{e.LiveKey, e.LiveKey}
	if r := e.do(req); r.Status != 200 {
		t.Errorf("same key twice: status %d", r.Status)
	}
}

func TestContextIDSpellings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	big := strings.Repeat("z", 300<<10)
	cases := []struct {
		name   string
		parts  []part
		status int
	}{
		{"contextID accepted", []part{{"files", "x"}, {"id", "1"}, {"contextID", ctxA}}, 200},
		{"upper-case UUID matches", []part{{"contextId", strings.ToUpper(ctxA)}, {"files", "x"}}, 200},
		{"both spellings, same value", []part{{"contextId", ctxA}, {"contextID", ctxA}, {"files", "x"}}, 200},
		{"both spellings, different values", []part{{"contextId", ctxA}, {"contextID", ctxB}, {"files", "x"}}, 400},
		{"a second context after a large file", []part{{"contextId", ctxA}, {"files", big}, {"contextID", ctxB}}, 400},
		{"context after a large file", []part{{"files", big}, {"id", "1"}, {"contextId", ctxA}}, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ct, body := form(t, c.parts...)
			r := e.do(e.request("POST", "/sync", e.LiveKey, ct, bytes.NewReader(body)))
			if r.Status != c.status {
				t.Fatalf("status %d, want %d: %.200s", r.Status, c.status, r.Body)
			}
			if c.status == 200 && r.Echo.SHA256 != sha(body) {
				t.Error("body not forwarded byte-exact")
			}
			if c.status != 200 {
				assertError(t, r, c.status, "")
			}
		})
	}
}

// TestByteExactLargeUploads streams uploads through the gateway without
// holding them in the test: the upstream's sha256 must equal the sha256 of
// what the client sent.
func TestByteExactLargeUploads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{maxBody: 100 << 20})
	for _, c := range []struct {
		name         string
		size         int64
		contextFirst bool
	}{
		{"1 MiB, context first", 1 << 20, true},
		{"64 MiB, context after the file", 64 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ct, body, sum, n := streamingForm(c.size, c.contextFirst)
			req := e.request("POST", "/sync", e.LiveKey, ct, body)
			req.ContentLength = n
			r := e.do(req)
			if r.Status != 200 {
				t.Fatalf("status %d: %.300s", r.Status, r.Body)
			}
			if r.Echo.Bytes != n || r.Echo.SHA256 != sum {
				t.Fatalf("upstream got %d bytes sha %s; sent %d sha %s", r.Echo.Bytes, r.Echo.SHA256, n, sum)
			}
		})
	}
}

// streamingForm returns a multipart body of about size bytes produced on the
// fly, with its sha256 and exact length computed up front by a dry run.
func streamingForm(size int64, contextFirst bool) (ct string, body io.Reader, sum string, n int64) {
	const boundary = "keygateTestBoundary7MA4YWxkTrZu0gW"
	head := func(name, file string) string {
		h := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\""
		if file != "" {
			h += "; filename=\"" + file + "\"\r\nContent-Type: application/pdf"
		}
		return h + "\r\n\r\n"
	}
	ctxPart := head("contextId", "") + ctxA + "\r\n"
	idPart := head("id", "") + "0f8fad5b-d9cb-469f-a165-70867728950e\r\n"
	fileHead := head("files", "big.pdf")
	tail := "\r\n--" + boundary + "--\r\n"
	gen := func() io.Reader {
		chunk := bytes.Repeat([]byte("%PDF-1.7 keygate payload 0123456789abcdef\n"), 1024)
		file := io.LimitReader(&repeatReader{chunk: chunk}, size)
		var rs []io.Reader
		if contextFirst {
			rs = []io.Reader{strings.NewReader(ctxPart + idPart + fileHead), file, strings.NewReader(tail[:2] + "--" + boundary + "--\r\n")}
		} else {
			rs = []io.Reader{strings.NewReader(idPart + fileHead), file, strings.NewReader("\r\n" + ctxPart + "--" + boundary + "--\r\n")}
		}
		return io.MultiReader(rs...)
	}
	h := sha256.New()
	n, _ = io.Copy(h, gen())
	return "multipart/form-data; boundary=" + boundary, gen(), hex.EncodeToString(h.Sum(nil)), n
}

// repeatReader yields its chunk over and over; what it yields does not
// depend on the sizes of the reads.
type repeatReader struct {
	chunk []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.chunk[r.off:])
		n += c
		r.off = (r.off + c) % len(r.chunk)
	}
	return n, nil
}

// TestInvalidKeyBeforeBody sends only headers that declare a 50 MB body
// and reads the 401 without sending a body byte and without 100 Continue.
func TestInvalidKeyBeforeBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, c := range []struct{ name, key, expect string }{
		{"invalid key", "svc_live_" + strings.Repeat("Q", 36), ""},
		{"invalid key with Expect: 100-continue", "svc_live_" + strings.Repeat("Q", 36), "Expect: 100-continue\r\n"},
		{"no key", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := tlsDial(t, e.URL)
			defer conn.Close()
			keyLine := ""
			if c.key != "" {
				keyLine = "x-api-key: " + c.key + "\r\n"
			}
			fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: localhost\r\n%s%sContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 50000000\r\n\r\n", keyLine, c.expect)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no response before the body was sent: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Fatalf("status %d, want 401 (a 100 Continue would mean the body was asked for)", resp.StatusCode)
			}
		})
	}
}

func TestRateLimitAndQuota(t *testing.T) {
	t.Parallel()
	for _, status := range []int{429, 403} {
		t.Run(fmt.Sprint("status ", status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{rlStatus: status, limits: map[string]policy.Limit{
				"live": {Rate: 1, Per: time.Hour, Burst: 2},
				"test": {Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 3, Per: time.Hour}},
			}})
			for i := 0; i < 2; i++ {
				r := e.sync(e.LiveKey, ctxA)
				if r.Status != 200 {
					t.Fatalf("request %d: %d", i, r.Status)
				}
				if got := r.Header.Get("RateLimit-Remaining"); got != fmt.Sprint(1-i) {
					t.Errorf("RateLimit-Remaining = %s, want %d", got, 1-i)
				}
			}
			r := e.sync(e.LiveKey, ctxA)
			assertError(t, r, status, "rate limit")
			if r.Header.Get("Retry-After") == "" || r.Header.Get("RateLimit-Remaining") != "0" {
				t.Errorf("Retry-After %q RateLimit-Remaining %q", r.Header.Get("Retry-After"), r.Header.Get("RateLimit-Remaining"))
			}
			for i := 0; i < 3; i++ {
				if r := e.sync(e.TestKey, ctxA); r.Status != 200 {
					t.Fatalf("quota request %d: %d", i, r.Status)
				}
			}
			assertError(t, e.sync(e.TestKey, ctxA), status, "quota")
		})
	}
}

func TestRegistryRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, c := range []struct{ method, path, query string }{
		{"GET", "/registry", ""},
		{"GET", "/registry/schemas/invoice", "version=3&x=%20y"},
		{"PUT", "/registry/schemas/invoice", ""},
		{"DELETE", "/registry/schemas/invoice", ""},
	} {
		url := c.path
		if c.query != "" {
			url += "?" + c.query
		}
		r := e.do(e.request(c.method, url, e.RegistryKey, "application/json", strings.NewReader(`{"a":1}`)))
		if r.Status != 200 || r.Echo.Backend != "registry" || r.Echo.Path != c.path || r.Echo.RawQuery != c.query || r.Echo.Method != c.method {
			t.Errorf("%s %s: status %d echo %+v", c.method, url, r.Status, r.Echo)
		}
		if r.Echo.Identity["x-keygate-product"] != "registry" {
			t.Errorf("identity %v", r.Echo.Identity)
		}
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	t.Run("unreachable is 502", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{extraction: []string{closedPortURL(t)}})
		assertError(t, e.sync(e.LiveKey, ctxA), 502, "upstream")
	})
	t.Run("timeout is 504", func(t *testing.T) {
		t.Parallel()
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		e := newEnv(t, envOpts{extractionH: slow, timeout: 200 * time.Millisecond})
		assertError(t, e.sync(e.LiveKey, ctxA), 504, "timed out")
	})
	t.Run("round robin skips a refusing target", func(t *testing.T) {
		t.Parallel()
		r1 := httptest.NewServer(standin.Handler{Name: "r1"})
		defer r1.Close()
		r2 := httptest.NewServer(standin.Handler{Name: "r2"})
		defer r2.Close()
		e := newEnv(t, envOpts{registry: []string{r1.URL, closedPortURL(t), r2.URL}})
		seen := map[string]int{}
		for i := 0; i < 12; i++ {
			r := e.do(e.request("GET", "/registry/x", e.RegistryKey, "", nil))
			if r.Status != 200 {
				t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
			}
			seen[r.Echo.Backend]++
		}
		if seen["r1"] < 3 || seen["r2"] < 3 {
			t.Errorf("requests per target = %v, want both live targets used", seen)
		}
	})
}

func TestDeprecationHeaders(t *testing.T) {
	t.Parallel()
	sunset := time.Date(2027, 6, 30, 0, 0, 0, 0, time.UTC)
	e := newEnv(t, envOpts{deprecation: gateway.Deprecation{Date: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Sunset: sunset, Link: "https://docs.example/migrate"}})
	r := e.sync(e.LiveKey, ctxA)
	if r.Header.Get("Deprecation") != "@1796083200" || r.Header.Get("Sunset") != sunset.Format(http.TimeFormat) || !strings.Contains(r.Header.Get("Link"), "deprecation") {
		t.Errorf("Deprecation %q Sunset %q Link %q", r.Header.Get("Deprecation"), r.Header.Get("Sunset"), r.Header.Get("Link"))
	}
}

// TestSpoolFailureIsNotTheClientsFault: when the temp file for a late
// context field cannot be written, the client gets 503, not a 400.
func TestSpoolFailureIsNotTheClientsFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{spoolMemory: 1024, spoolDir: "/nonexistent-keygate-spool"})
	ct, body := form(t, part{"files", strings.Repeat("z", 64<<10)}, part{"contextId", ctxA})
	assertError(t, e.do(e.request("POST", "/sync", e.LiveKey, ct, bytes.NewReader(body))), 503, "try again")
}

type brokenAuth struct{}

func (brokenAuth) Authenticate(*http.Request) (auth.Verdict, error) {
	return auth.Verdict{}, errors.New("redis: i/o timeout")
}

type okAuth struct{}

func (okAuth) Authenticate(*http.Request) (auth.Verdict, error) {
	return auth.Verdict{OK: true, Principal: auth.Principal{ID: "key_1", Products: []string{"extraction"}, Env: "live", Context: ctxA}}, nil
}

type brokenLimiter struct{}

func (brokenLimiter) Allow(context.Context, string, policy.Limit) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, ratelimit.ErrUnavailable
}

// TestBackendFailuresAre503: a failing key store or limiter (Redis down,
// failure_mode closed) is a 503 with Retry-After and the spec's body,
// never a 401 or a 500, and nothing is forwarded.
func TestBackendFailuresAre503(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	limits := map[string]policy.Limit{"live": {Rate: 1, Per: time.Second, Burst: 1}, "test": {Rate: 1, Per: time.Second, Burst: 1}}
	for _, c := range []struct {
		name    string
		auth    gateway.Authenticator
		limiter gateway.Limiter
		msg     string
	}{
		{"key store down", brokenAuth{}, ratelimit.NewLocal(ratelimit.LocalConfig{}), "key store unavailable"},
		{"limiter down, failure_mode closed", okAuth{}, brokenLimiter{}, "rate limiter unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw, err := gateway.New(gateway.Config{
				Upstreams:    gateway.UpstreamsConfig{Extraction: gateway.UpstreamConfig{Targets: []string{up.URL}}, Registry: gateway.UpstreamConfig{Targets: []string{up.URL}}},
				MaxBodyBytes: 1 << 20, Limits: limits,
			}, gateway.Deps{Auth: c.auth, Limiter: c.limiter})
			if err != nil {
				t.Fatal(err)
			}
			ct, body := syncForm(t, ctxA)
			req := httptest.NewRequest("POST", "/sync", bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-Api-Key", "svc_live_x")
			w := httptest.NewRecorder()
			gw.ServeHTTP(w, req)
			r := result{Status: w.Code, Header: w.Header(), Body: w.Body.Bytes()}
			_ = json.Unmarshal(r.Body, &r.Err)
			assertError(t, r, 503, c.msg)
			if w.Header().Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
		})
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests were forwarded", hits.Load())
	}
}
