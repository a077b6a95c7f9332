package oauth2_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/oauth2"
)

const (
	testIssuer   = "https://issuer.test/"
	testAudience = "keygate"
	testContext  = "7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b"
)

func testConfig(jwksURL string) oauth2.Config {
	cfg := oauth2.DefaultConfig()
	cfg.Enabled = true
	cfg.Issuer = testIssuer
	cfg.JWKSURL = jwksURL
	cfg.Audiences = []string{"other", testAudience}
	cfg.Algorithms = []string{"RS256", "ES256"}
	cfg.EnvClaim = "env"
	return cfg
}

func newAuthenticator(tb testing.TB, is *oauth2test.Issuer, mod func(*oauth2.Config)) *oauth2.Authenticator {
	tb.Helper()
	cfg := testConfig(is.JWKSURL())
	if mod != nil {
		mod(&cfg)
	}
	a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{HTTPClient: is.Server.Client()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	return a
}

// claims returns the claims of a good token; tests change them.
func claims() map[string]any {
	now := time.Now()
	return map[string]any{
		jwt.IssuerKey:     testIssuer,
		jwt.SubjectKey:    "user-1",
		"client_id":       "client-123",
		jwt.AudienceKey:   []string{testAudience},
		jwt.IssuedAtKey:   now.Add(-time.Minute),
		jwt.NotBeforeKey:  now.Add(-time.Minute),
		jwt.ExpirationKey: now.Add(10 * time.Minute),
		"scope":           "openid extraction:sync registry",
		"context":         testContext,
	}
}

func bearerRequest(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "https://keygate.test/sync", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}
