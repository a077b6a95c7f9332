package adminapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/adminapi"
)

// POST /v1/portal-sessions makes a one-time portal sign-in link for a
// consumer: scope keys:write, the URL in the first answer only (no-store),
// problem+json for every refusal, 501 when the portal is off, and the URL
// in no log line.
func TestPortalSessions(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	f := newFixture(t, func(_ *adminapi.Config, d *adminapi.Deps) { d.Logger = zap.New(core) })
	body := `{"consumer":"` + conAcme + `","subject":"alice@acme.example"}`
	cases := []struct {
		name, token, body string
		status            int
	}{
		{"no credential", "", body, http.StatusUnauthorized},
		{"no keys:write", "kga_" + adminapi.ScopeKeysRead, body, http.StatusForbidden},
		{"unknown consumer", allToken, `{"consumer":"con_ffffffffffffffff"}`, http.StatusNotFound},
		{"no consumer", allToken, `{"subject":"x"}`, http.StatusBadRequest},
		{"unknown field", allToken, `{"consumer":"` + conAcme + `","admin":true}`, http.StatusBadRequest},
		{"not JSON", allToken, `consumer=` + conAcme, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.token, "POST", "/v1/portal-sessions", tc.body)
			if r.status != tc.status || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d (%s), want %d problem+json: %s", r.status, r.header.Get("Content-Type"), tc.status, r.body)
			}
		})
	}

	r := f.do(t, "kga_"+adminapi.ScopeKeysWrite, "POST", "/v1/portal-sessions", body, "Idempotency-Key: dash-1")
	if r.status != http.StatusCreated || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d, Cache-Control %q: %s", r.status, r.header.Get("Cache-Control"), r.body)
	}
	m := r.json(t)
	url, _ := m["url"].(string)
	if !strings.HasPrefix(url, "https://portal.example.com/session/") || m["consumer"] != conAcme || m["expires_at"] == nil {
		t.Fatalf("answer %s", r.body)
	}
	again := f.do(t, "kga_"+adminapi.ScopeKeysWrite, "POST", "/v1/portal-sessions", body, "Idempotency-Key: dash-1")
	if again.status != http.StatusCreated || strings.Contains(string(again.body), url) || again.json(t)["url"] != nil {
		t.Fatalf("replay: %d, must not carry the URL: %s", again.status, again.body)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()), "/session/") || strings.Contains(e.Message, "/session/") {
			t.Fatalf("a log line holds the link: %v", e.ContextMap())
		}
	}

	off := newFixture(t, func(_ *adminapi.Config, d *adminapi.Deps) { d.Portal = nil })
	if r := off.do(t, allToken, "POST", "/v1/portal-sessions", body); r.status != http.StatusNotImplemented {
		t.Fatalf("portal off: %d, want 501", r.status)
	}
}
