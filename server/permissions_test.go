package server_test

import (
	"net/http"
	"testing"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
)

// TestOAuth2OperationScopes: auth.oauth2.product_scopes names operations
// too; a token without the scope of the request's operation gets 403
// Forbidden, and nothing reaches the upstream.
func TestOAuth2OperationScopes(t *testing.T) {
	t.Parallel()
	rs := rsaSigner(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, rs)
	h := newHarness(t, setup{mod: func(c *config.Config) {
		withOAuth(is)(c)
		c.Auth.OAuth2.ProductScopes = map[string]string{
			"extraction":     "extraction:sync",
			"registry:read":  "registry.read",
			"registry:write": "registry.write",
		}
	}})
	reader := h.mint(rs, claims("client-reader", "registry.read"))
	writer := h.mint(rs, claims("client-writer", "registry.read registry.write"))
	for _, c := range []struct {
		name, token, method string
		status              int
	}{
		{"read scope reads", reader, http.MethodGet, 200},
		{"read scope may not write", reader, http.MethodPost, 403},
		{"read scope may not delete", reader, http.MethodDelete, 403},
		{"write scope writes", writer, http.MethodPost, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, h.API+"/registry/schemas", nil)
			if err != nil {
				t.Fatal(err)
			}
			tokCred(c.token).apply(req)
			before := h.Registry.hits.Load()
			r := h.do(req)
			if c.status == 403 {
				assertError(t, r, 403, "Forbidden: this key lacks permission for this operation")
				if h.Registry.hits.Load() != before {
					t.Error("a refused request reached the upstream")
				}
				return
			}
			if r.Status != c.status {
				t.Errorf("status %d (%s), want %d", r.Status, r.Body, c.status)
			}
		})
	}
	if r := h.sync(tokCred(reader), ctxA); r.Status != 403 {
		t.Errorf("registry-only token on /sync: %d, want 403", r.Status)
	}
}
