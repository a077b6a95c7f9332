package adminapi_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/audittest"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keyops"
)

// TestScopes: every route refuses a missing or wrong credential with 401
// and a credential without the route's scope with 403, and admits one
// with it.
func TestScopes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, rt := range f.api.Routes() {
		path := strings.ReplaceAll(rt.Pattern, "{id}", "key_ffffffffffffffff")
		cases := []struct {
			name   string
			auth   string
			status int
		}{
			{"no credential", "", http.StatusUnauthorized},
			{"unknown token", "Bearer kga_nosuchtoken", http.StatusUnauthorized},
			{"not an admin token", "Bearer svc_live_abc", http.StatusUnauthorized},
			{"basic scheme", "Basic a2dhX2FsbDo=", http.StatusUnauthorized},
			{"no scope", "Bearer kga_none", http.StatusForbidden},
		}
		for _, s := range adminapi.AllScopes {
			want := http.StatusForbidden
			if rt.Scope == "" || s == rt.Scope {
				want = 0 // anything but 401 and 403
			}
			cases = append(cases, struct {
				name   string
				auth   string
				status int
			}{"scope " + s, "Bearer kga_" + s, want})
		}
		if rt.Scope == "" {
			cases[len(cases)-len(adminapi.AllScopes)-1].status = http.StatusOK
		}
		for _, c := range cases {
			t.Run(rt.Method+" "+rt.Pattern+" "+c.name, func(t *testing.T) {
				token := strings.TrimPrefix(c.auth, "Bearer ")
				var r result
				if strings.HasPrefix(c.auth, "Bearer ") || c.auth == "" {
					r = f.do(t, token, rt.Method, path, "")
				} else {
					r = f.do(t, "", rt.Method, path, "", "Authorization: "+c.auth)
				}
				switch c.status {
				case 0:
					if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
						t.Fatalf("status %d, want the scope to admit it: %s", r.status, r.body)
					}
				case http.StatusUnauthorized:
					checkProblem(t, r, c.status)
					if r.header.Get("WWW-Authenticate") == "" {
						t.Error("401 without WWW-Authenticate")
					}
				case http.StatusForbidden:
					if p := checkProblem(t, r, c.status); !strings.Contains(p["detail"].(string), rt.Scope) {
						t.Errorf("detail %q does not name the scope %s", p["detail"], rt.Scope)
					}
				default:
					if r.status != c.status {
						t.Fatalf("status %d, want %d", r.status, c.status)
					}
				}
			})
		}
	}
}

// failingTokens is a token store that is down.
type failingTokens struct{}

func (failingTokens) Authenticate(context.Context, string) (adminapi.Principal, bool, error) {
	return adminapi.Principal{}, false, errors.New("redis: connection refused")
}

func TestTokenStoreDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *adminapi.Config, d *adminapi.Deps) { d.Tokens = failingTokens{} })
	p := checkProblem(t, f.do(t, allToken, "GET", "/v1/keys", ""), http.StatusServiceUnavailable)
	if strings.Contains(p["detail"].(string), "redis") {
		t.Errorf("detail leaks the cause: %v", p["detail"])
	}
}

func TestNoTokenAuthenticator(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *adminapi.Config, d *adminapi.Deps) { d.Tokens = nil })
	checkProblem(t, f.do(t, allToken, "GET", "/v1/keys", ""), http.StatusUnauthorized)
}

// keyCount is the number of keys in the fixture's store.
func (f *fixture) keyCount(t *testing.T) int {
	t.Helper()
	recs, err := f.store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

func TestIdempotentIssue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	body := `{"product":"extraction","env":"live","context":"` + ctxA + `","name":"retry-me"}`
	before := f.keyCount(t)
	first := f.do(t, allToken, "POST", "/v1/keys", body, "Idempotency-Key: 7c0e-retry")
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	fj := first.json(t)
	key, _ := fj["key"].(string)
	if !strings.HasPrefix(key, "svc_live_") {
		t.Fatalf("first response has no key: %s", first.body)
	}
	if cc := first.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", cc)
	}
	for i := 0; i < 3; i++ {
		again := f.do(t, allToken, "POST", "/v1/keys", body, "Idempotency-Key: 7c0e-retry")
		if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %v %s", again.status, again.header, again.body)
		}
		aj := again.json(t)
		if aj["id"] != fj["id"] || again.header.Get("Location") != first.header.Get("Location") {
			t.Errorf("retry answers %v, first %v", aj["id"], fj["id"])
		}
		if _, ok := aj["key"]; ok || strings.Contains(string(again.body), key) {
			t.Errorf("the replay shows the key again: %s", again.body)
		}
		if !strings.Contains(aj["note"].(string), "shown once") {
			t.Errorf("note = %v", aj["note"])
		}
	}
	if n := f.keyCount(t); n != before+1 {
		t.Fatalf("the store holds %d keys, want %d: a retry issued another", n, before+1)
	}
	// The same key for another body is refused, and issues nothing.
	r := f.do(t, allToken, "POST", "/v1/keys", strings.Replace(body, "retry-me", "other", 1), "Idempotency-Key: 7c0e-retry")
	checkProblem(t, r, http.StatusUnprocessableEntity)
	// Another path with the same key is another request too.
	checkProblem(t, f.do(t, allToken, "POST", "/v1/consumers", `{"name":"x"}`, "Idempotency-Key: 7c0e-retry"), http.StatusUnprocessableEntity)
	// Idempotency-Keys are per caller: another token's same key issues.
	if r := f.do(t, "kga_keys:write", "POST", "/v1/keys", body, "Idempotency-Key: 7c0e-retry"); r.status != http.StatusCreated || r.json(t)["key"] == nil {
		t.Fatalf("another caller's key: %d %s", r.status, r.body)
	}
	// Without the header every call issues.
	f.do(t, allToken, "POST", "/v1/keys", body)
	if n := f.keyCount(t); n != before+3 {
		t.Fatalf("the store holds %d keys, want %d", n, before+3)
	}
	checkProblem(t, f.do(t, allToken, "POST", "/v1/keys", body, "Idempotency-Key: "+strings.Repeat("x", 256)), http.StatusBadRequest)
}

// TestIdempotentConcurrent: retries racing the first attempt get 409 or
// the replay, and only one key is issued.
func TestIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	before := f.keyCount(t)
	body := `{"product":"registry","env":"test"}`
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = f.do(t, allToken, "POST", "/v1/keys", body, "Idempotency-Key: race").status
		}()
	}
	wg.Wait()
	for _, s := range statuses {
		if s != http.StatusCreated && s != http.StatusConflict {
			t.Errorf("status %d", s)
		}
	}
	if n := f.keyCount(t); n != before+1 {
		t.Fatalf("%d keys issued, want 1", n-before)
	}
}

func TestIdempotencyExpiresAndIsCapped(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFixture(t, func(c *adminapi.Config, d *adminapi.Deps) {
		c.IdempotencyTTL, c.IdempotencyMaxEntries, d.Now = time.Hour, 2, clock
	})
	body := `{"name":"Hooli"}`
	count := func() int {
		cons, _ := f.store.ListConsumers(context.Background())
		return len(cons)
	}
	n0 := count()
	f.do(t, allToken, "POST", "/v1/consumers", body, "Idempotency-Key: a")
	f.do(t, allToken, "POST", "/v1/consumers", body, "Idempotency-Key: a")
	if count() != n0+1 {
		t.Fatal("replay created a consumer")
	}
	mu.Lock()
	now = now.Add(time.Hour + time.Second)
	mu.Unlock()
	f.do(t, allToken, "POST", "/v1/consumers", body, "Idempotency-Key: a")
	if count() != n0+2 {
		t.Fatal("an expired Idempotency-Key still replayed")
	}
	// Over the cap the oldest is forgotten.
	f.do(t, allToken, "POST", "/v1/consumers", body, "Idempotency-Key: b")
	f.do(t, allToken, "POST", "/v1/consumers", body, "Idempotency-Key: c")
	f.do(t, allToken, "POST", "/v1/consumers", body, "Idempotency-Key: a")
	if count() != n0+5 {
		t.Fatalf("consumers %d, want %d", count(), n0+5)
	}
}

func TestPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for i := 0; i < 5; i++ {
		if r := f.do(t, allToken, "POST", "/v1/keys", `{"product":"registry","env":"test"}`); r.status != http.StatusCreated {
			t.Fatal(r.status, string(r.body))
		}
	}
	want := f.keyCount(t) // 7
	for _, limit := range []string{"1", "2", "3", "1000"} {
		t.Run("limit "+limit, func(t *testing.T) {
			seen := map[string]bool{}
			cursor, pages := "", 0
			for {
				path := "/v1/keys?limit=" + limit
				if cursor != "" {
					path += "&cursor=" + cursor
				}
				r := f.do(t, "kga_keys:read", "GET", path, "")
				if r.status != http.StatusOK {
					t.Fatal(r.status, string(r.body))
				}
				var page struct {
					Items []struct {
						ID string `json:"id"`
					} `json:"items"`
					NextCursor string `json:"next_cursor"`
				}
				if err := json.Unmarshal(r.body, &page); err != nil {
					t.Fatal(err)
				}
				pages++
				for _, it := range page.Items {
					if seen[it.ID] {
						t.Fatalf("%s on two pages", it.ID)
					}
					seen[it.ID] = true
				}
				if page.NextCursor == "" {
					break
				}
				cursor = page.NextCursor
				if pages > 10 {
					t.Fatal("no end")
				}
			}
			if len(seen) != want {
				t.Fatalf("saw %d keys over %d pages, want %d", len(seen), pages, want)
			}
		})
	}
	// Filters combine with pages.
	r := f.do(t, allToken, "GET", "/v1/keys?product=registry&env=test&status=active&limit=100", "")
	if n := len(r.json(t)["items"].([]any)); n != 6 {
		t.Errorf("registry test keys: %d, want 6", n)
	}
	r = f.do(t, allToken, "GET", "/v1/keys?consumer="+conAcme, "")
	if n := len(r.json(t)["items"].([]any)); n != 1 {
		t.Errorf("Acme's keys: %d, want 1", n)
	}
	// A deleted consumer does not shift the pages after it.
	r = f.do(t, allToken, "GET", "/v1/consumers?limit=1", "")
	next := r.json(t)["next_cursor"].(string)
	if r := f.do(t, allToken, "DELETE", "/v1/consumers/"+conAcme, ""); r.status != http.StatusConflict {
		t.Fatal(r.status)
	}
	f.do(t, allToken, "POST", "/v1/keys/"+keyAcme+"/revoke", "")
	if r := f.do(t, allToken, "DELETE", "/v1/consumers/"+conAcme, ""); r.status != http.StatusNoContent {
		t.Fatal(r.status, string(r.body))
	}
	r = f.do(t, allToken, "GET", "/v1/consumers?limit=1&cursor="+next, "")
	if items := r.json(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != conEmpty {
		t.Fatalf("page after a deleted consumer: %s", r.body)
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		slug                     string
	}{
		{"bad limit", "GET", "/v1/keys?limit=0", "", nil, 400, "invalid-request"},
		{"bad cursor", "GET", "/v1/consumers?cursor=bm90LWpzb24", "", nil, 400, "invalid-request"},
		{"bad status filter", "GET", "/v1/keys?status=rotated", "", nil, 400, "invalid-request"},
		{"unknown key", "GET", "/v1/keys/key_ffffffffffffffff", "", nil, 404, "not-found"},
		{"unknown consumer", "PATCH", "/v1/consumers/con_ffffffffffffffff", `{"name":"x"}`, nil, 404, "not-found"},
		{"unknown path", "GET", "/v1/nothing", "", nil, 404, "not-found"},
		{"wrong method", "PUT", "/v1/keys/" + keyAcme, `{}`, nil, 405, "method-not-allowed"},
		{"unknown field", "POST", "/v1/keys", `{"product":"registry","env":"test","secret":1}`, nil, 400, "invalid-request"},
		{"not JSON", "POST", "/v1/keys", `product=registry`, nil, 400, "invalid-request"},
		{"wrong media type", "POST", "/v1/consumers", `{"name":"x"}`, []string{"Content-Type: text/plain"}, 415, "unsupported-media-type"},
		{"bad env", "POST", "/v1/keys", `{"product":"registry","env":"prod"}`, nil, 400, "invalid-request"},
		{"consumer of another context", "POST", "/v1/consumers", `{"name":"x","contexts":["not-a-uuid"]}`, nil, 400, "invalid-request"},
		{"unknown plan", "PATCH", "/v1/keys/" + keyAcme, `{"plan":"platinum"}`, nil, 400, "invalid-request"},
		{"empty patch", "PATCH", "/v1/keys/" + keyAcme, `{}`, nil, 400, "invalid-request"},
		{"patch unknown field", "PATCH", "/v1/keys/" + keyAcme, `{"hash":"x"}`, nil, 400, "invalid-request"},
		{"bad quota", "PATCH", "/v1/keys/" + keyAcme, `{"override":{"quota":"lots"}}`, nil, 400, "invalid-request"},
		{"until in the past", "PATCH", "/v1/keys/" + keyAcme, `{"override":{"rate":9,"until":"2001-01-01T00:00:00Z"}}`, nil, 400, "invalid-request"},
		{"bad grace", "POST", "/v1/keys/" + keyAcme + "/rotate", `{"grace":"a day"}`, nil, 400, "invalid-request"},
		{"consumer in use", "DELETE", "/v1/consumers/" + conAcme, "", nil, 409, "conflict"},
		{"too large", "POST", "/v1/consumers", `{"name":"` + strings.Repeat("x", 70<<10) + `"}`, nil, 413, "too-large"},
		{"usage not configured", "GET", "/v1/keys/" + keyAcme + "/usage", "", nil, 501, "not-configured"},
		{"audit not configured", "GET", "/v1/audit-events", "", nil, 501, "not-configured"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.do(t, allToken, c.method, c.path, c.body, c.headers...)
			p := checkProblem(t, r, c.status)
			if p["type"] != adminapi.ProblemTypePrefix+c.slug {
				t.Errorf("type = %v, want %s", p["type"], c.slug)
			}
		})
	}
	// Revoking twice is a conflict.
	f.do(t, allToken, "POST", "/v1/keys/"+keyRegistry+"/revoke", "")
	checkProblem(t, f.do(t, allToken, "POST", "/v1/keys/"+keyRegistry+"/revoke", ""), http.StatusConflict)
}

// TestActorsReachTheAudit: each write passes the token id and the
// client address to keyops, and no audit event holds the key.
func TestActorsReachTheAudit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	r := f.do(t, allToken, "POST", "/v1/keys", `{"product":"registry","env":"test"}`)
	key := r.json(t)["key"].(string)
	f.do(t, allToken, "PATCH", "/v1/keys/"+keyAcme, `{"name":"renamed"}`)
	f.do(t, allToken, "POST", "/v1/keys/"+keyAcme+"/rotate", `{"grace":"1h"}`)
	f.do(t, allToken, "POST", "/v1/keys/"+keyRegistry+"/revoke", "")
	ev := f.audit.Events()
	if len(ev) != 4 {
		t.Fatalf("%d events, want 4", len(ev))
	}
	for _, e := range ev {
		if e.Actor.ID != "tok_all" || !strings.HasPrefix(e.Actor.Addr, "127.0.0.1:") {
			t.Errorf("%s: actor %+v", e.Action, e.Actor)
		}
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), key) || strings.Contains(string(b), "svc_") {
			t.Errorf("event holds a key: %s", b)
		}
	}
}

// TestKeyLifecycle: issue, show, grant a temporary override, rotate
// with grace, revoke.
func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	r := f.do(t, allToken, "POST", "/v1/keys", `{"product":"extraction","env":"live","context":"`+ctxA+`","consumer":"`+conAcme+`"}`)
	if r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	id := r.json(t)["id"].(string)
	if loc := r.header.Get("Location"); loc != "/v1/keys/"+id {
		t.Errorf("Location = %q", loc)
	}
	r = f.do(t, allToken, "PATCH", "/v1/keys/"+id, `{"override":{"rate":1000,"burst":2000,"quota":{"requests":100000,"per":"24h"},"until":"2030-01-01T00:00:00Z"},"expires_at":"2031-01-01T00:00:00Z","name":"big"}`)
	if r.status != http.StatusOK {
		t.Fatal(r.status, string(r.body))
	}
	lim := r.json(t)["effective_limit"].(map[string]any)
	if lim["rate"] != 1000.0 || lim["burst"] != 2000.0 || lim["quota"] != "100000/24h0m0s" || lim["until"] != "2030-01-01T00:00:00Z" {
		t.Errorf("limit after the grant: %v", lim)
	}
	rec, err := f.store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range rec {
		if k.ID == id && (k.Override == nil || k.Override.Rate != 1000 || k.Name != "big" || !k.ExpiresAt.Equal(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))) {
			t.Errorf("stored: %+v", k)
		}
	}
	r = f.do(t, allToken, "PATCH", "/v1/keys/"+id, `{"override":null,"expires_at":null}`)
	if j := r.json(t); j["override"] != nil || j["expires_at"] != nil {
		t.Errorf("after clearing: %s", r.body)
	}
	r = f.do(t, allToken, "POST", "/v1/keys/"+id+"/rotate", `{"grace":"24h"}`)
	if r.status != http.StatusCreated || r.json(t)["key"] == nil {
		t.Fatal(r.status, string(r.body))
	}
	r = f.do(t, allToken, "GET", "/v1/keys/"+id, "")
	if j := r.json(t); j["stored_status"] != "rotated" || j["status"] != "active" {
		t.Errorf("old key after rotation: %s", r.body)
	}
	r = f.do(t, allToken, "POST", "/v1/keys/"+id+"/revoke", "")
	if r.json(t)["status"] != "revoked" {
		t.Errorf("after revoke: %s", r.body)
	}
	r = f.do(t, allToken, "PATCH", "/v1/consumers/"+conAcme, `{"metadata":{"crm":null,"tier":"gold"},"plan":null}`)
	if j := r.json(t); j["plan"] != nil || j["metadata"].(map[string]any)["tier"] != "gold" || j["metadata"].(map[string]any)["crm"] != nil {
		t.Errorf("consumer after patch: %s", r.body)
	}
}

// usage and audit readers of the tests.
type usageStub struct{}

func (usageStub) KeyUsage(_ context.Context, id string, since time.Duration) (any, error) {
	return map[string]any{"key": id, "admitted": 3, "since": since.String()}, nil
}

type auditStub struct{ q adminapi.AuditQuery }

func (a *auditStub) ReadAudit(_ context.Context, q adminapi.AuditQuery) (adminapi.AuditPage, error) {
	a.q = q
	if q.Cursor == "bad" {
		return adminapi.AuditPage{}, errors.Join(keyops.ErrInvalid, errors.New("cursor: not ours"))
	}
	return adminapi.AuditPage{Items: []map[string]string{{"action": "key.issue"}}, NextCursor: "n2"}, nil
}

func TestUsageAndAuditReaders(t *testing.T) {
	t.Parallel()
	audit := &auditStub{}
	f := newFixture(t, func(_ *adminapi.Config, d *adminapi.Deps) { d.Usage, d.Audit = usageStub{}, audit })
	r := f.do(t, "kga_usage:read", "GET", "/v1/keys/"+keyAcme+"/usage?since=24h", "")
	if r.status != 200 || r.json(t)["since"] != "24h0m0s" {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	checkProblem(t, f.do(t, "kga_usage:read", "GET", "/v1/keys/key_ffffffffffffffff/usage", ""), 404)
	r = f.do(t, "kga_audit:read", "GET", "/v1/audit-events?limit=5&target="+keyAcme+"&since=1h", "")
	if r.status != 200 || r.json(t)["next_cursor"] != "n2" || audit.q.Limit != 5 || audit.q.Target != keyAcme || audit.q.Since.IsZero() {
		t.Fatalf("audit: %d %s %+v", r.status, r.body, audit.q)
	}
	checkProblem(t, f.do(t, "kga_audit:read", "GET", "/v1/audit-events?cursor=bad", ""), 400)
}

// TestClientCertificates: a certificate from the configured CA gets its
// CN's scopes; one from another CA, or none, is 401; an unmapped CN has
// no scope (403). The actor is "cert:" and the subject.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	serverCA, clientCA, otherCA := testkit.NewCA(t, "server CA"), testkit.NewCA(t, "ops CA"), testkit.NewCA(t, "rogue CA")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, clientCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeystore(t, path)
	audit := &audittest.Recorder{}
	cfg := adminapi.DefaultConfig()
	cfg.Enabled, cfg.Listen, cfg.ClientCAFile = true, "127.0.0.1:0", caFile
	cfg.ClientCertScopes = map[string][]string{"support": {adminapi.ScopeKeysRead, adminapi.ScopeKeysWrite}, "auditor": {adminapi.ScopeAuditRead}}
	api, err := adminapi.New(cfg, adminapi.Deps{Ops: newOps(t, path, audit), Tokens: testTokens()})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := api.TLSConfig(&tls.Config{Certificates: []tls.Certificate{serverCA.TLSLeaf(t, 2)}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.TLS = tc
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := func(cert *tls.Certificate) *http.Client {
		c := &tls.Config{RootCAs: serverCA.Pool}
		if cert != nil {
			c.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c}}
	}
	support, auditor, stranger, rogue := clientCA.ClientCert(t, "support"), clientCA.ClientCert(t, "auditor"), clientCA.ClientCert(t, "stranger"), otherCA.ClientCert(t, "support")
	cases := []struct {
		name         string
		cert         *tls.Certificate
		token        string
		method, path string
		status       int
	}{
		{"support lists keys", &support, "", "GET", "/v1/keys", 200},
		{"support issues a key", &support, "", "POST", "/v1/keys", 201},
		{"support reads no consumers", &support, "", "GET", "/v1/consumers", 403},
		{"auditor reads no keys", &auditor, "", "GET", "/v1/keys", 403},
		{"auditor reads the audit log", &auditor, "", "GET", "/v1/audit-events", 501},
		{"unmapped CN has no scope", &stranger, "", "GET", "/v1/keys", 403},
		{"unmapped CN still authenticates", &stranger, "", "GET", "/v1/openapi.json", 200},
		{"no certificate", nil, "", "GET", "/v1/keys", 401},
		{"a token over TLS", nil, "kga_keys:read", "GET", "/v1/keys", 200},
		{"a wrong token beats a good certificate", &support, "kga_wrong", "GET", "/v1/keys", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := ""
			if c.method == "POST" {
				body = `{"product":"registry","env":"test"}`
			}
			r := do(t, client(c.cert), srv.URL, c.token, c.method, c.path, body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
		})
	}
	// A certificate from another CA fails the handshake or is ignored;
	// either way it grants nothing.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/keys", nil)
	if resp, err := client(&rogue).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("rogue certificate: %d", resp.StatusCode)
		}
	}
	ev := audit.Events()
	if len(ev) != 1 || ev[0].Actor.ID != "cert:CN=support,O=Ops" {
		t.Fatalf("audit events %+v", ev)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	base := adminapi.DefaultConfig()
	cases := []struct {
		name string
		mod  func(*adminapi.Config)
		err  string
	}{
		{"default", func(*adminapi.Config) {}, ""},
		{"tls off on loopback", func(c *adminapi.Config) { c.TLS = "off" }, ""},
		{"tls off on localhost", func(c *adminapi.Config) { c.TLS, c.Listen = "off", "localhost:9091" }, ""},
		{"tls off on ::1", func(c *adminapi.Config) { c.TLS, c.Listen = "off", "[::1]:9091" }, ""},
		{"tls off on every address", func(c *adminapi.Config) { c.TLS, c.Listen = "off", ":9091" }, "tls"},
		{"tls off on a public address", func(c *adminapi.Config) { c.TLS, c.Listen = "off", "10.0.0.5:9091" }, "tls"},
		{"tls maybe", func(c *adminapi.Config) { c.TLS = "maybe" }, "tls"},
		{"no listen", func(c *adminapi.Config) { c.Listen = "" }, "listen"},
		{"scopes without CA", func(c *adminapi.Config) { c.ClientCertScopes = map[string][]string{"ops": {"keys:read"}} }, "client_cert_scopes"},
		{"unknown scope", func(c *adminapi.Config) {
			c.ClientCAFile, c.ClientCertScopes = "ca.pem", map[string][]string{"ops": {"keys:admin"}}
		}, "client_cert_scopes.ops[0]"},
		{"CA with tls off", func(c *adminapi.Config) { c.TLS, c.ClientCAFile = "off", "ca.pem" }, "client_ca_file"},
		{"no ttl", func(c *adminapi.Config) { c.IdempotencyTTL = 0 }, "idempotency_ttl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.mod(&cfg)
			err := cfg.Validate()
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err)) {
				t.Fatalf("Validate() = %v, want %q", err, c.err)
			}
		})
	}
	if _, err := adminapi.New(base, adminapi.Deps{Ops: nil}); err == nil {
		t.Error("New without Ops succeeded")
	}
	api, err := adminapi.New(base, adminapi.Deps{Ops: &keyops.Service{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.TLSConfig(nil); err == nil {
		t.Error("TLS on without a gateway certificate succeeded")
	}
}

// TestLogLine: one line per call, with the actor and status, and neither
// the token nor the issued key.
func TestLogLine(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	f := newFixture(t, func(_ *adminapi.Config, d *adminapi.Deps) { d.Logger = zap.New(core) })
	r := f.do(t, allToken, "POST", "/v1/keys", `{"product":"registry","env":"test"}`)
	key := r.json(t)["key"].(string)
	f.do(t, "", "GET", "/v1/keys?cursor=abc", "")
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("%d log lines, want 2", len(entries))
	}
	first, second := entries[0].ContextMap(), entries[1].ContextMap()
	if first["actor"] != "tok_all" || first["status"] != int64(201) || first["path"] != "/v1/keys" {
		t.Errorf("first line %v", first)
	}
	if second["actor"] != "" || second["status"] != int64(401) {
		t.Errorf("second line %v", second)
	}
	for _, e := range entries {
		line := fmt.Sprint(e.ContextMap())
		if strings.Contains(line, key) || strings.Contains(line, allToken) || strings.Contains(line, "cursor") {
			t.Errorf("log line holds a secret or the query: %s", line)
		}
	}
}
