package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/standin"
)

const (
	ctxA = "11111111-2222-4333-8444-555555555555"
	ctxB = "99999999-8888-4777-8666-555555555555"

	testIssuer = "https://issuer.test/"
	docID      = "5e0e5f3a-1b2c-4d3e-8f40-5a6b7c8d9e0f"
)

// upstream is a stand-in backend that counts the requests reaching it.
type upstream struct {
	*httptest.Server
	hits atomic.Int64
}

func newUpstream(t *testing.T, name string) *upstream {
	u := &upstream{}
	h := standin.Handler{Name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// setup says how to build one server.
type setup struct {
	// mod changes the configuration the harness made.
	mod func(*config.Config)
	// roots are what the client trusts; nil means the self-signed
	// certificate the server wrote.
	roots *x509.CertPool
	// serverName is the client's SNI and verified name; empty means none
	// (the URL's IP address is verified).
	serverName string
	// deps changes the server's Deps (the admin API's token store).
	deps func(*server.Deps)
}

// harness is one real keygate server on loopback with stand-in upstreams,
// a file keystore holding an extraction key and a registry key, and a
// logger writing JSON into Logs.
type harness struct {
	t      *testing.T
	Server *server.Server
	Cfg    config.Config
	// API is https://127.0.0.1:PORT, Admin and Plain http://127.0.0.1:PORT.
	API, Admin, Plain string
	Client            *http.Client
	Logs              *testkit.SyncBuffer

	Extraction, Registry *upstream
	Keys                 *keystore.FileAdmin

	LiveKey, LiveID         string // extraction, live, ctxA
	LiveKey2                string // another one like it
	RegistryKey, RegistryID string

	mu      sync.Mutex
	secrets []string
}

// redisTestTimeout bounds each Redis call in the tests that do not test a
// Redis timeout. keygate's 100 ms is for a server under a gateway's load; a
// test machine running many suites on two cores stalls a loopback round
// trip that long now and then, and a 503 for that reason says nothing
// about what these tests check.
const redisTestTimeout = 5 * time.Second

// useRedis points c at the Redis at addrs with redisTestTimeout for the
// client and for the limiter's and the keystore's calls.
func useRedis(c *config.Config, addrs ...string) {
	c.Redis.Addrs = addrs
	c.Redis.DialTimeout, c.Redis.ReadTimeout, c.Redis.WriteTimeout = redisTestTimeout, redisTestTimeout, redisTestTimeout
	c.RateLimit.RedisTimeout = redisTestTimeout
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	h := &harness{t: t, Logs: &testkit.SyncBuffer{}}
	dir := t.TempDir()
	h.Extraction = newUpstream(t, "extraction")
	h.Registry = newUpstream(t, "registry")
	h.Keys = &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}
	var rec keystore.Record
	h.LiveKey, rec = h.issue(keystore.Extraction, ctxA)
	h.LiveID = rec.ID
	h.LiveKey2, _ = h.issue(keystore.Extraction, ctxA)
	h.RegistryKey, rec = h.issue(keystore.Registry, "")
	h.RegistryID = rec.ID

	cfg := config.Default()
	// Port 0: the kernel picks, so parallel tests never race for a port.
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminListen = "127.0.0.1:0"
	cfg.Server.SpoolDir = dir
	cfg.Server.DrainTimeout = 5 * time.Second
	cfg.TLS.SelfSignedDir = filepath.Join(dir, "tls")
	cfg.TLS.StoragePath = filepath.Join(dir, "certmagic")
	cfg.Upstreams.Extraction.Targets = []string{h.Extraction.URL}
	cfg.Upstreams.Registry.Targets = []string{h.Registry.URL}
	cfg.Keystore.File = h.Keys.Path
	cfg.RateLimit.Limits = map[string]policy.Limit{
		"live": {Rate: 1000, Per: time.Second, Burst: 1000},
		"test": {Rate: 1000, Per: time.Second, Burst: 1000},
	}
	cfg.Log.Level = "debug"
	if s.mod != nil {
		s.mod(&cfg)
	}
	h.Cfg = cfg

	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(h.Logs), zap.DebugLevel))
	// Registered first, so it runs last: after shutdown, nothing secret
	// may be anywhere in the log.
	t.Cleanup(func() {
		logs := h.Logs.String()
		h.mu.Lock()
		defer h.mu.Unlock()
		for i, sec := range h.secrets {
			if strings.Contains(logs, sec) {
				t.Errorf("credential #%d (never printed) appears in the log", i)
			}
		}
		if strings.Contains(logs, "Bearer ey") {
			t.Error("an Authorization value appears in the log")
		}
	})
	deps := server.Deps{Logger: logger}
	if s.deps != nil {
		s.deps(&deps)
	}
	srv, err := server.New(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	h.Server = srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	scheme := "https://"
	if cfg.TLS.Mode == "off" {
		scheme = "http://"
	}
	h.API = scheme + srv.APIAddr().String()
	h.Admin = "http://" + srv.AdminAddr().String()
	if a := srv.HTTPAddr(); a != nil {
		h.Plain = "http://" + a.String()
	}

	roots := s.roots
	if roots == nil && cfg.TLS.Mode == "self_signed" {
		roots = poolFromFile(t, filepath.Join(cfg.TLS.SelfSignedDir, "cert.pem"))
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: s.serverName},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	h.Client = &http.Client{
		Transport:     tr,
		Timeout:       20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return h
}

// issue adds a live key to the keystore and remembers it as a secret.
func (h *harness) issue(p keystore.Product, contextID string) (string, keystore.Record) {
	h.t.Helper()
	k, rec, err := h.Keys.Issue(context.Background(), keystore.IssueRequest{Product: p, Env: keystore.Live, Context: contextID, Name: h.t.Name()})
	if err != nil {
		h.t.Fatal(err)
	}
	h.secret(k)
	return k, rec
}

// secret records a credential that must never reach the log.
func (h *harness) secret(s string) string {
	h.mu.Lock()
	h.secrets = append(h.secrets, s)
	h.mu.Unlock()
	return s
}

func poolFromFile(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", path)
	}
	return pool
}

// cred is what a request authenticates with: a key, a bearer token, both
// or neither.
type cred struct{ key, token string }

func keyCred(k string) cred { return cred{key: k} }
func tokCred(t string) cred { return cred{token: t} }
func (c cred) apply(r *http.Request) {
	if c.key != "" {
		r.Header.Set("X-Api-Key", c.key)
	}
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// result is a response read whole.
type result = testkit.Result

func (h *harness) do(req *http.Request) result {
	h.t.Helper()
	return testkit.Do(h.t, h.Client, req)
}

func (h *harness) get(base, path string, c cred) result {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	c.apply(req)
	return h.do(req)
}

// sync posts a /sync form for contextID with credentials c to base; it
// returns the result and the body sent.
func (h *harness) syncTo(base string, c cred, contextID string) (result, []byte) {
	h.t.Helper()
	ct, body := syncForm(h.t, contextID)
	req, err := http.NewRequest(http.MethodPost, base+"/sync", bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	c.apply(req)
	return h.do(req), body
}

func (h *harness) sync(c cred, contextID string) result {
	h.t.Helper()
	r, _ := h.syncTo(h.API, c, contextID)
	return r
}

func syncForm(t testing.TB, contextID string) (string, []byte) {
	return testkit.Form(t, testkit.Part{Name: "files", Value: "%PDF-1.4 hello keygate"}, testkit.Part{Name: "id", Value: docID}, testkit.Part{Name: "contextId", Value: contextID})
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// assertError checks the status and the spec's error body: exactly
// StateText ERROR, a TraceId matching X-Trace-Id, and Messages mentioning
// msgHas.
func assertError(t *testing.T, r result, status int, msgHas string) {
	t.Helper()
	testkit.AssertSpecError(t, r.Status, r.Header, r.Body, status, msgHas)
}

// metric returns the sum of the samples of name whose labels include every
// pair in labels, read from the admin /metrics.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	return testkit.Metric(h.t, h.Admin+"/metrics", name, labels...)
}

// --- certificates ---

// writeFileAtomic replaces path by renaming a temporary file over it, as
// certificate tooling does.
func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// --- OAuth 2.0 issuer ---

// rsaSigner and ecSigner return signers over the i-th shared test key
// (RSA keys are slow to make under -race), named kid.
func rsaSigner(t *testing.T, i int, kid string) oauth2test.Signer {
	return oauth2test.RSA(t, i, kid)
}

func ecSigner(t *testing.T, i int, kid string) oauth2test.Signer {
	return oauth2test.EC(t, i, kid)
}

// withOAuth turns bearer tokens on against is, trusting its CA through
// auth.oauth2.ca_root given inline.
func withOAuth(is *oauth2test.Issuer) func(*config.Config) {
	return func(c *config.Config) {
		c.Auth.OAuth2.Enabled = true
		c.Auth.OAuth2.Issuer = testIssuer
		c.Auth.OAuth2.JWKSURL = is.JWKSURL()
		c.Auth.OAuth2.CARoot = string(is.CAPEM())
	}
}

// claims returns the claims of a good token for client, bound to ctxA,
// with scope; tests change them.
func claims(client, scope string) map[string]any {
	now := time.Now()
	return map[string]any{
		jwt.IssuerKey:     testIssuer,
		jwt.SubjectKey:    "user-1",
		"client_id":       client,
		jwt.AudienceKey:   []string{"keygate"},
		jwt.IssuedAtKey:   now.Add(-time.Minute),
		jwt.NotBeforeKey:  now.Add(-time.Minute),
		jwt.ExpirationKey: now.Add(10 * time.Minute),
		"scope":           scope,
		"context":         ctxA,
	}
}

func with(c map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

// mint signs c with s and records the token as a secret of h.
func (h *harness) mint(s oauth2test.Signer, c map[string]any) string {
	h.t.Helper()
	return h.secret(oauth2test.Mint(h.t, s, c))
}
