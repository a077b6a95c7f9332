package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/server"
)

// adminTokens is an in-test token store.
type adminTokens map[string]adminapi.Principal

func (a adminTokens) Authenticate(_ context.Context, tok string) (adminapi.Principal, bool, error) {
	p, ok := a[tok]
	return p, ok, nil
}

// TestAdminAPI: the admin API serves HTTPS on its own listener with the
// gateway's certificate; a key issued through it works on /sync at once
// and stops working when revoked through it.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	const token = "kga_servertest"
	h := newHarness(t, setup{
		mod: func(c *config.Config) { c.AdminAPI.Enabled, c.AdminAPI.Listen = true, "127.0.0.1:0" },
		deps: func(d *server.Deps) {
			d.AdminTokens = adminTokens{token: {ID: "tok_1", Scopes: []string{adminapi.ScopeKeysWrite}}}
		},
	})
	h.secret(token)
	base := "https://" + h.Server.AdminAPIAddr().String()
	call := func(method, path, body string) result {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return h.do(req)
	}
	r := call("POST", "/v1/keys", `{"product":"extraction","env":"live","context":"`+ctxA+`"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("issue: %d %s", r.Status, r.Body)
	}
	var issued struct{ Key, ID string }
	if err := json.Unmarshal(r.Body, &issued); err != nil {
		t.Fatal(err)
	}
	h.secret(issued.Key)
	testkit.Eventually(t, testkit.HangCheck, "the issued key works", func() error { return testkit.Equal(h.sync(keyCred(issued.Key), ctxA).Status, http.StatusOK) })
	if r := call("POST", "/v1/keys/"+issued.ID+"/revoke", ""); r.Status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	testkit.Eventually(t, testkit.HangCheck, "the revoked key is refused", func() error { return testkit.Equal(h.sync(keyCred(issued.Key), ctxA).Status, http.StatusUnauthorized) })
	// Scope and credential checks hold on the real listener.
	if r := call("GET", "/v1/keys", ""); r.Status != http.StatusForbidden {
		t.Errorf("keys:read without the scope: %d", r.Status)
	}
	req, _ := http.NewRequest("GET", base+"/v1/openapi.json", nil)
	if r := h.do(req); r.Status != http.StatusUnauthorized {
		t.Errorf("anonymous: %d", r.Status)
	}
	// Not on the gateway's listeners.
	if r := h.get(h.API, "/v1/keys", tokCred(token)); r.Status == http.StatusOK {
		t.Error("the admin API answers on the API listener")
	}
	if r := h.get(h.Admin, "/v1/keys", tokCred(token)); r.Status != http.StatusNotFound {
		t.Errorf("admin listener: %d", r.Status)
	}
}

func TestAdminAPIOffByDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	if a := h.Server.AdminAPIAddr(); a != nil {
		t.Fatalf("admin API listens on %s without admin_api.enabled", a)
	}
}

// TestAdminAPIPlainLoopback: with tls off on loopback it serves plain
// HTTP even though the gateway serves HTTPS.
func TestAdminAPIPlainLoopback(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) {
		c.AdminAPI.Enabled, c.AdminAPI.Listen, c.AdminAPI.TLS = true, "127.0.0.1:0", adminapi.TLSOff
	}})
	r := h.get("http://"+h.Server.AdminAPIAddr().String(), "/v1/keys", cred{})
	if r.Status != http.StatusUnauthorized || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}

func TestAdminAPIConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, err string
	}{
		{"tls on needs a certificate", "tls: { mode: \"off\" }\nadmin_api: { enabled: true }\n", "admin_api.tls"},
		{"listen clash", "admin_api: { enabled: true, listen: \"127.0.0.1:9090\" }\n", "admin_api.listen"},
		{"plain on a public address", "admin_api: { enabled: true, listen: \":9091\", tls: \"off\" }\n", "admin_api.tls"},
		{"bad scope", "admin_api: { client_ca_file: ca.pem, client_cert_scopes: { ops: [root] } }\n", "admin_api.client_cert_scopes.ops[0]"},
		{"disabled but checked", "admin_api: { idempotency_ttl: 0s }\n", "admin_api.idempotency_ttl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Fatalf("Parse = %v, want an error starting %q", err, c.err)
			}
		})
	}
	if _, err := config.Parse([]byte("tls: { mode: \"off\" }\nadmin_api: { enabled: true, tls: \"off\" }\n")); err != nil {
		t.Fatal(err)
	}
}
