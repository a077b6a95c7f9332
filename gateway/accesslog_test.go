package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/redact"
)

// lines is a log sink safe for concurrent writes.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// take returns the lines written so far, sorted, and forgets them.
func (l *lines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := strings.SplitAfter(l.buf.String(), "\n")
	l.buf.Reset()
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	slices.Sort(out)
	return out
}

// scanAll turns every string field back into a plain zap.String, so that
// the redacting core behind it scans them all: the access line as it was
// written before the gateway marked its own values redact.Verbatim.
type scanAll struct{ zapcore.Core }

func plainStrings(fs []zapcore.Field) []zapcore.Field {
	out := slices.Clone(fs)
	for i := range out {
		if out[i].Type == zapcore.StringType {
			out[i] = zap.String(out[i].Key, out[i].String)
		}
	}
	return out
}

func (c scanAll) With(fs []zapcore.Field) zapcore.Core { return scanAll{c.Core.With(plainStrings(fs))} }

func (c scanAll) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c scanAll) Write(e zapcore.Entry, fs []zapcore.Field) error {
	return c.Core.Write(e, plainStrings(fs))
}

// accessPair is a gateway whose every log line is written twice, by the
// deployed logger (got) and by the same logger scanning every string field
// (want), with a file keystore holding key and a real loopback upstream.
type accessPair struct {
	gw        *gateway.Gateway
	key       string
	got, want *lines
}

func newAccessPair(t testing.TB) *accessPair {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"StateText":"OK"}`)
	}))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "keys.yaml")
	admin := &keystore.FileAdmin{Path: path}
	key, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := auth.NewAPIKeys(auth.APIKeysConfig{Store: keystoretest.OpenFile(t, path)})
	p := &accessPair{key: key, got: &lines{}, want: &lines{}}
	got := deployedLogger(p.got).Core()
	want := scanAll{deployedLogger(p.want).Core()}
	cfg := gateway.Config{
		Upstreams:        gateway.UpstreamsConfig{Extraction: gateway.UpstreamConfig{Targets: []string{up.URL}}, Registry: gateway.UpstreamConfig{Targets: []string{up.URL}}},
		MaxBodyBytes:     1 << 20,
		SpoolMemoryBytes: 1 << 10,
		SpoolDir:         t.TempDir(),
		Limits: map[string]policy.Limit{
			"live": {Rate: 1e6, Per: time.Second, Burst: 1e9},
			"test": {Rate: 1e6, Per: time.Second, Burst: 1e9},
		},
	}
	p.gw, err = gateway.New(cfg, gateway.Deps{Auth: keys, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{}), Logger: zap.New(zapcore.NewTee(got, want)).Named("access")})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serve sends r through the gateway and returns the lines each logger
// wrote, after checking that they are the same bytes.
func (p *accessPair) serve(t testing.TB, r *http.Request) []string {
	t.Helper()
	p.gw.ServeHTTP(httptest.NewRecorder(), r)
	got, want := p.got.take(), p.want.take()
	if !slices.Equal(got, want) {
		t.Fatalf("%s %q: the access line differs from the one that scans every field:\n got: %q\nwant: %q", r.Method, r.URL, got, want)
	}
	return got
}

const (
	logKey = "svc_live_4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo"
	logJWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
)

// TestAccessLineIsTheScannedOne: for requests of every outcome, the
// access line with the gateway's own values unscanned is byte for byte
// the line with every field scanned, and holds no credential.
func TestAccessLineIsTheScannedOne(t *testing.T) {
	p := newAccessPair(t)
	ct, small := form(t, part{"contextId", ctxA}, part{"id", "1"}, part{"files", strings.Repeat("x", 256)})
	// The context after a file larger than the parser's 64 KiB window and
	// the 1 KiB of spool memory: the prefix goes to a temp file.
	spilledCT, spilled := form(t, part{"files", strings.Repeat("y", 100<<10)}, part{"contextId", ctxA})
	wrongCT, wrongCtx := form(t, part{"contextId", ctxB}, part{"files", "z"})
	for _, c := range []struct {
		name, method, target, ct string
		body                     []byte
		header                   map[string]string
		remote                   string
		want                     []string // in the line
	}{
		{name: "accepted", method: "POST", target: "/sync", ct: ct, body: small, want: []string{`"route":"sync"`, `"status":200`, `"upstream":"extraction"`, `"auth":"api_key"`, `"method":"POST"`}},
		{name: "spilled", method: "POST", target: "/sync", ct: spilledCT, body: spilled, want: []string{`"spilled":true`}},
		{name: "traceparent continued", method: "POST", target: "/sync", ct: ct, body: small,
			header: map[string]string{"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, want: []string{`"trace_id":"0af7651916cd43dd8448eb211c80319c"`}},
		{name: "traceparent with a key", method: "POST", target: "/sync", ct: ct, body: small,
			header: map[string]string{"Traceparent": "00-" + logKey + "-01"}, want: []string{`"status":200`}},
		{name: "wrong context", method: "POST", target: "/sync", ct: wrongCT, body: wrongCtx, want: []string{`"status":403`}},
		{name: "registry", method: "GET", target: "/registry/contexts", want: []string{`"route":"registry"`}},
		{name: "unknown key", method: "POST", target: "/sync", ct: ct, body: small, header: map[string]string{"X-Api-Key": logKey}, want: []string{`"status":401`}},
		{name: "bearer jwt", method: "GET", target: "/registry/x", header: map[string]string{"X-Api-Key": "", "Authorization": "Bearer " + logJWT}, want: []string{`"status":401`}},
		{name: "key as method", method: logKey, target: "/sync", want: []string{`"method":"svc_live_[REDACTED]"`}},
		{name: "lower-case method", method: "post", target: "/sync", want: []string{`"method":"post"`}},
		{name: "key in path", method: "GET", target: "/registry/" + logKey, want: []string{`"path":"/registry/svc_live_[REDACTED]"`}},
		{name: "jwt in query", method: "GET", target: "/registry/x?t=" + logJWT, want: []string{`"status":`}},
		{name: "no route", method: "GET", target: "/nowhere", want: []string{`"route":"other"`}},
		{name: "key as remote address", method: "GET", target: "/registry/x", remote: "svc_test_AbCdEf123456:1", want: []string{`"remote":"svc_test_[REDACTED]:1"`}},
		{name: "ipv6 remote", method: "GET", target: "/registry/x", remote: "[2001:db8::1]:443", want: []string{`"remote":"2001:db8::1"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", c.target, bytes.NewReader(c.body))
			r.Method = c.method
			if c.ct != "" {
				r.Header.Set("Content-Type", c.ct)
			}
			r.Header.Set("X-Api-Key", p.key)
			for k, v := range c.header {
				if v == "" {
					r.Header.Del(k)
				} else {
					r.Header.Set(k, v)
				}
			}
			if c.remote != "" {
				r.RemoteAddr = c.remote
			}
			got := p.serve(t, r)
			if len(got) == 0 {
				t.Fatal("no access line")
			}
			all := strings.Join(got, "")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("the log lacks %s:\n%s", w, all)
				}
			}
			if redact.Contains(all) || strings.Contains(all, p.key[len("svc_live_"):]) {
				t.Errorf("the log holds a credential:\n%s", all)
			}
		})
	}
}

// FuzzAccessLine: for any method, target, trace context, remote address
// and key, the access line is byte for byte the line with every field
// scanned.
func FuzzAccessLine(f *testing.F) {
	f.Add("POST", "/sync", "", "192.0.2.1:1234", true, "")
	f.Add("GET", "/registry/"+logKey, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "[::1]:80", true, "")
	f.Add(logKey, "/sync?x=1", "00-"+logJWT, "kga_x:1", false, "Bearer "+logJWT)
	f.Add("DELETE", "/registry/a%2fb", "junk", "10.0.0.1:1", true, "Bearer abc")
	f.Add("OPTIONS", "/nowhere/svc_test_x", "", "", false, "")
	var p *accessPair
	var ct string
	var body []byte
	f.Fuzz(func(t *testing.T, method, target, traceparent, remote string, withKey bool, authz string) {
		if p == nil {
			p = newAccessPair(t)
			ct, body = form(t, part{"contextId", ctxA}, part{"files", strings.Repeat("x", 256)})
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || method == "" {
			return
		}
		r := httptest.NewRequest("POST", "/sync", bytes.NewReader(body))
		r.Method, r.URL, r.RequestURI, r.RemoteAddr = method, u, target, remote
		r.Header.Set("Content-Type", ct)
		if withKey {
			r.Header.Set("X-Api-Key", p.key)
		}
		if traceparent != "" {
			r.Header.Set("Traceparent", traceparent)
		}
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		p.serve(t, r)
	})
}
