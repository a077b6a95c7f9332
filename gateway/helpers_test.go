package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/standin"
	"go.uber.org/zap"
)

const (
	ctxA = "11111111-2222-4333-8444-555555555555"
	ctxB = "99999999-8888-4777-8666-555555555555"
)

// env is a gateway behind real loopback TLS, with stand-in upstreams and a
// file keystore holding keys of every kind.
type env struct {
	t          *testing.T
	URL        string
	Client     *http.Client
	Extraction *httptest.Server
	Registry   *httptest.Server
	Admin      *keystore.FileAdmin
	Store      *keystore.FileStore
	Gateway    *gateway.Gateway

	LiveKey, TestKey, RegistryKey, RevokedKey, ExpiredKey string
	LiveID                                                string
}

type envOpts struct {
	limits      map[string]policy.Limit
	maxBody     int64
	extraction  []string // override targets
	registry    []string
	timeout     time.Duration
	rlStatus    int
	deprecation gateway.Deprecation
	extractionH http.Handler
	hsts        string
	spoolMemory int
	spoolDir    string
	bodyIdle    time.Duration
	concurrent  int
	failures    gateway.FailureLimiter
	usage       gateway.UsageRecorder
	minRate     gateway.MinBodyRate
	limiter     gateway.Limiter // nil: a Local limiter
	store       auth.KeyLookup  // nil: the file keystore holding the keys below
	logger      *zap.Logger
	registryH   http.Handler            // nil: the registry stand-in
	resolver    *policy.Resolver        // resolves keys' limits and permissions; nil: none
	ops         *policy.Operations      // the operations (also the resolver's); nil: the built-in ones
	trusted     clientip.TrustedProxies // server.trusted_proxies
	setup       func(e *env)            // changes the keystore file before the store opens
	endpoints   []gateway.Endpoint
	rateHeaders []string // ratelimit.headers; nil: both forms
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{t: t}
	eh := o.extractionH
	if eh == nil {
		eh = standin.Handler{Name: "extraction"}
	}
	e.Extraction = httptest.NewServer(eh)
	t.Cleanup(e.Extraction.Close)
	var rh http.Handler = standin.Handler{Name: "registry"}
	if o.registryH != nil {
		rh = o.registryH
	}
	e.Registry = httptest.NewServer(rh)
	t.Cleanup(e.Registry.Close)

	path := filepath.Join(t.TempDir(), "keys.yaml")
	e.Admin = &keystore.FileAdmin{Path: path}
	ctx := context.Background()
	issue := func(p keystore.Product, en keystore.Env, c string, exp time.Duration) (string, keystore.Record) {
		k, rec, err := e.Admin.Issue(ctx, keystore.IssueRequest{Product: p, Env: en, Context: c, Name: t.Name(), ExpiresIn: exp})
		if err != nil {
			t.Fatal(err)
		}
		return k, rec
	}
	var rec keystore.Record
	var err error
	e.LiveKey, rec = issue(keystore.Extraction, keystore.Live, ctxA, 0)
	e.LiveID = rec.ID
	e.TestKey, _ = issue(keystore.Extraction, keystore.Test, ctxA, 0)
	e.RegistryKey, _ = issue(keystore.Registry, keystore.Live, "", 0)
	e.RevokedKey, rec = issue(keystore.Extraction, keystore.Live, ctxA, 0)
	if _, err := e.Admin.Revoke(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	e.ExpiredKey, rec = issue(keystore.Extraction, keystore.Live, ctxA, 0)
	if _, err := e.Admin.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) {
		r.ExpiresAt = time.Now().Add(-time.Hour) // expired an hour ago
		return r, nil
	}); err != nil {
		t.Fatal(err)
	}

	if o.setup != nil {
		o.setup(e)
	}
	var store *keystore.FileStore
	if o.resolver != nil {
		if store, err = keystore.OpenFile(keystore.FileConfig{Path: path, Limits: o.resolver}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
	} else {
		store = keystoretest.OpenFile(t, path)
	}
	e.Store = store
	var lookup auth.KeyLookup = store
	if o.store != nil {
		lookup = o.store
	}
	keys, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: lookup})
	if err != nil {
		t.Fatal(err)
	}
	limits := o.limits
	if limits == nil {
		limits = map[string]policy.Limit{
			"live": {Rate: 1000, Per: time.Second, Burst: 1000},
			"test": {Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 1000, Per: 24 * time.Hour}},
		}
	}
	if o.maxBody == 0 {
		o.maxBody = 100 << 20
	}
	ext := o.extraction
	if ext == nil {
		ext = []string{e.Extraction.URL}
	}
	reg := o.registry
	if reg == nil {
		reg = []string{e.Registry.URL}
	}
	limiter := o.limiter
	if limiter == nil {
		limiter = ratelimit.NewLocal(ratelimit.LocalConfig{})
	}
	gw, err := gateway.New(gateway.Config{
		Upstreams: gateway.UpstreamsConfig{
			Extraction: gateway.UpstreamConfig{Targets: ext, Timeout: o.timeout},
			Registry:   gateway.UpstreamConfig{Targets: reg, Timeout: o.timeout},
		},
		MaxBodyBytes:     o.maxBody,
		SpoolMemoryBytes: o.spoolMemory,
		SpoolDir:         spoolDir(t, o.spoolDir),
		Limits:           limits,
		RateLimitStatus:  o.rlStatus,
		Deprecation:      o.deprecation,
		HSTS:             o.hsts,
		BodyIdleTimeout:  o.bodyIdle,
		MaxConcurrent:    o.concurrent,
		MinBodyRate:      o.minRate,
		TrustedProxies:   o.trusted,
		Endpoints:        o.endpoints,
		Operations:       o.ops,
		RateLimitHeaders: o.rateHeaders,
	}, gateway.Deps{Auth: keys, Limiter: limiter, Failures: o.failures, Usage: o.usage, Logger: o.logger})
	if err != nil {
		t.Fatal(err)
	}
	e.Gateway = gw
	srv := httptest.NewUnstartedServer(gw)
	srv.EnableHTTP2 = true
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	e.Client = srv.Client()
	e.Client.Timeout = 60 * time.Second
	return e
}

func spoolDir(t *testing.T, dir string) string {
	if dir != "" {
		return dir
	}
	return t.TempDir()
}

// form builds a multipart body with the given parts in order (see
// testkit.Form).
type part struct{ name, value string }

func form(t testing.TB, parts ...part) (string, []byte) {
	ps := make([]testkit.Part, len(parts))
	for i, p := range parts {
		ps[i] = testkit.Part{Name: p.name, Value: p.value}
	}
	return testkit.Form(t, ps...)
}

func syncForm(t testing.TB, contextID string) (string, []byte) {
	return form(t, part{"files", "%PDF-1.4 hello"}, part{"id", "5e0e5f3a-1b2c-4d3e-8f40-5a6b7c8d9e0f"}, part{"contextId", contextID})
}

type result = testkit.Result

func (e *env) do(req *http.Request) result {
	e.t.Helper()
	return testkit.Do(e.t, e.Client, req)
}

func (e *env) request(method, path, key string, ct string, body io.Reader) *http.Request {
	req, err := http.NewRequest(method, e.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	return req
}

func (e *env) sync(key, contextID string) result {
	ct, body := syncForm(e.t, contextID)
	return e.do(e.request("POST", "/sync", key, ct, bytes.NewReader(body)))
}

// assertError checks the spec's error shape, the JSON content type and the
// trace id header.
func assertError(t *testing.T, r result, status int, msgHas string) {
	t.Helper()
	testkit.AssertSpecError(t, r.Status, r.Header, r.Body, status, msgHas)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func closedPortURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func tlsDial(t *testing.T, u string) *tls.Conn {
	host := strings.TrimPrefix(u, "https://")
	c, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
