package oauth2_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/keygate/keygate/oauth2"
)

const (
	testIssuer   = "https://issuer.test/"
	testAudience = "keygate"
	testContext  = "7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b"
)

// signer is a private key the test issuer signs with.
type signer struct {
	alg jwa.SignatureAlgorithm
	key jwk.Key // private, with kid
	raw crypto.Signer
}

func newRSASigner(tb testing.TB, kid string) signer {
	tb.Helper()
	raw, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	return importSigner(tb, raw, kid, jwa.RS256())
}

func newECSigner(tb testing.TB, kid string) signer {
	tb.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return importSigner(tb, raw, kid, jwa.ES256())
}

func importSigner(tb testing.TB, raw crypto.Signer, kid string, alg jwa.SignatureAlgorithm) signer {
	tb.Helper()
	k, err := jwk.Import(raw)
	if err != nil {
		tb.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		tb.Fatal(err)
	}
	return signer{alg: alg, key: k, raw: raw}
}

// issuer serves a JWKS over loopback TLS and counts the fetches.
type issuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []jwk.Key // public
	down    atomic.Bool
	fetches atomic.Int64
}

func newIssuer(tb testing.TB, signers ...signer) *issuer {
	tb.Helper()
	is := &issuer{}
	for _, s := range signers {
		is.publish(tb, s)
	}
	is.srv = httptest.NewTLSServer(http.HandlerFunc(is.serve))
	tb.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) publish(tb testing.TB, s signer) {
	tb.Helper()
	pub, err := s.key.PublicKey()
	if err != nil {
		tb.Fatal(err)
	}
	is.mu.Lock()
	is.keys = append(is.keys, pub)
	is.mu.Unlock()
}

func (is *issuer) serve(w http.ResponseWriter, r *http.Request) {
	is.fetches.Add(1)
	if is.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	set := jwk.NewSet()
	is.mu.Lock()
	for _, k := range is.keys {
		_ = set.AddKey(k)
	}
	is.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

func (is *issuer) url() string { return is.srv.URL + "/.well-known/jwks.json" }

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

func newAuthenticator(tb testing.TB, is *issuer, mod func(*oauth2.Config)) *oauth2.Authenticator {
	tb.Helper()
	cfg := testConfig(is.url())
	if mod != nil {
		mod(&cfg)
	}
	a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{HTTPClient: is.srv.Client()})
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

func mint(tb testing.TB, s signer, c map[string]any) string {
	tb.Helper()
	tok := jwt.New()
	for k, v := range c {
		if err := tok.Set(k, v); err != nil {
			tb.Fatal(err)
		}
	}
	b, err := jwt.Sign(tok, jwt.WithKey(s.alg, s.key))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func bearerRequest(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "https://keygate.test/sync", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}
