package adminapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/keystoretest"

	"github.com/keygate/keygate/internal/testsupport/audittest"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// The fixture's ids: they are the ids the OpenAPI document's examples
// use, so that its examples run against the fixture as written.
const (
	ctxA        = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"
	conAcme     = "con_0a1b2c3d4e5f6071"
	conEmpty    = "con_1b2c3d4e5f607182"
	keyAcme     = "key_3c4d5e6f708192a3"
	keyRegistry = "key_4d5e6f708192a3b4"
)

// tokens is an in-test TokenAuthenticator: token → principal.
type tokens map[string]adminapi.Principal

func (t tokens) Authenticate(_ context.Context, token string) (adminapi.Principal, bool, error) {
	p, ok := t[token]
	return p, ok, nil
}

// Tokens of the tests: one per scope, one with all, one with none.
const allToken = "kga_all"

func testTokens() tokens {
	t := tokens{allToken: {ID: "tok_all", Scopes: adminapi.AllScopes}, "kga_none": {ID: "tok_none"}}
	for _, s := range adminapi.AllScopes {
		t["kga_"+s] = adminapi.Principal{ID: "tok_" + s, Scopes: []string{s}}
	}
	return t
}

// portalLinks stands in for the portal in this package's tests (the real
// one is tested in package portal and end to end): it checks the consumer
// as the portal does and answers a link of its own.
type portalLinks struct {
	ops *keyops.Service
	mu  sync.Mutex
	n   int
	by  []keyops.Actor
}

func (p *portalLinks) SessionLink(ctx context.Context, by keyops.Actor, consumer, subject string) (string, time.Time, error) {
	if _, err := p.ops.ShowConsumer(ctx, consumer); err != nil {
		return "", time.Time{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.by = append(p.by, by)
	return fmt.Sprintf("https://portal.example.com/session/link%02dsecret", p.n), time.Now().Add(15 * time.Minute), nil
}

type fixture struct {
	api   *adminapi.API
	srv   *httptest.Server
	store *keystore.FileAdmin
	audit *audittest.Recorder
}

// writeKeystore writes the fixture's consumers and keys to path.
func writeKeystore(t testing.TB, path string) {
	t.Helper()
	created := time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)
	consumers := []keystore.Consumer{
		{ID: conAcme, Name: "Acme Corp", Metadata: map[string]string{"crm": "A-1042"}, Plan: "pro", CreatedAt: created},
		{ID: conEmpty, Name: "Globex", CreatedAt: created.Add(time.Hour)},
	}
	keys := []keystore.Record{
		{ID: keyAcme, Name: "acme-prod", Hash: keystore.HashKey("svc_live_fixture1"), Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, CreatedAt: created, Status: keystore.Active, Consumer: conAcme},
		{ID: keyRegistry, Name: "ci", Hash: keystore.HashKey("svc_test_fixture2"), Product: keystore.Registry, Env: keystore.Test, CreatedAt: created.Add(time.Minute), Status: keystore.Active},
	}
	keystoretest.WriteFile(t, path, keys, consumers)
}

func newOps(t testing.TB, path string, auditor keyops.Auditor) *keyops.Service {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.Plans = map[string]policy.Plan{
		"pro": {Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: 24 * time.Hour}}},
	}
	res, err := cfg.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	ops, err := keyops.New(keyops.Config{Store: &keystore.FileAdmin{Path: path}, Limits: res, Auditor: auditor})
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// newFixture serves the API over a keystore with the fixture's records,
// plain HTTP, with the test tokens.
func newFixture(t testing.TB, mod func(*adminapi.Config, *adminapi.Deps)) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeystore(t, path)
	f := &fixture{store: &keystore.FileAdmin{Path: path}, audit: &audittest.Recorder{}}
	cfg := adminapi.DefaultConfig()
	cfg.Enabled, cfg.TLS = true, adminapi.TLSOff
	ops := newOps(t, path, f.audit)
	deps := adminapi.Deps{Ops: ops, Tokens: testTokens(), Portal: &portalLinks{ops: ops}}
	if mod != nil {
		mod(&cfg, &deps)
	}
	api, err := adminapi.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
	f.srv = httptest.NewServer(api.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

// do sends method path with body (JSON unless empty) and the bearer
// token, with more headers as "Name: value" pairs.
func (f *fixture) do(t *testing.T, token, method, path, body string, headers ...string) result {
	t.Helper()
	return do(t, f.srv.Client(), f.srv.URL, token, method, path, body, headers...)
}

func do(t *testing.T, c *http.Client, base, token, method, path, body string, headers ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, bytes.TrimSpace(b)}
}

// checkProblem checks that r is an RFC 9457 problem with status.
func checkProblem(t *testing.T, r result, status int) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	p := r.json(t)
	if typ, _ := p["type"].(string); !strings.HasPrefix(typ, adminapi.ProblemTypePrefix) {
		t.Errorf("type = %v", p["type"])
	}
	if p["title"] == "" || p["title"] == nil {
		t.Errorf("no title: %s", r.body)
	}
	if s, _ := p["status"].(float64); int(s) != status {
		t.Errorf("status member = %v, want %d", p["status"], status)
	}
	if _, ok := p["instance"].(string); !ok {
		t.Errorf("no instance: %s", r.body)
	}
	return p
}
