package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/policy"
)

const invalidToken = `Bearer error="invalid_token"`

func TestOAuth2BesideAPIKeys(t *testing.T) {
	t.Parallel()
	rs, es := rsaSigner(t, 0, "rsa-1"), ecSigner(t, 0, "ec-1")
	is := oauth2test.NewIssuer(t, rs, es)
	h := newHarness(t, setup{mod: withOAuth(is)})

	for _, s := range []oauth2test.Signer{rs, es} {
		t.Run("valid "+s.Alg.String()+" token posts /sync", func(t *testing.T) {
			client := "client-" + s.Alg.String()
			tok := h.mint(s, claims(client, "openid extraction:sync"))
			before := h.Extraction.hits.Load()
			r, sent := h.syncTo(h.API, tokCred(tok), ctxA)
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			if got := r.Echo.Identity["x-keygate-key-id"]; got != "oauth2:"+client {
				t.Errorf("X-Keygate-Key-Id = %q, want oauth2:%s", got, client)
			}
			if got := r.Echo.Identity["x-keygate-context"]; got != ctxA {
				t.Errorf("X-Keygate-Context = %q, want %s", got, ctxA)
			}
			if r.Echo.SawAuthz || r.Echo.SawAPIKey {
				t.Error("the upstream saw the credential")
			}
			if r.Echo.SHA256 != sha(sent) {
				t.Error("the upstream did not get the body byte for byte")
			}
			if h.Extraction.hits.Load() != before+1 {
				t.Error("not forwarded exactly once")
			}
			if _, ok := r.Header["Deprecation"]; ok {
				t.Error("token-authenticated response carries Deprecation")
			}

			other := h.sync(tokCred(tok), ctxB)
			assertError(t, other, 403, "Invalid Context")
		})
	}

	t.Run("bad tokens are 401 invalid_token", func(t *testing.T) {
		good := claims("client-bad", "extraction:sync")
		forger := rsaSigner(t, 2, "rsa-1") // an unpublished key claiming the published kid
		valid := h.mint(rs, claims("client-bad", "extraction:sync"))
		tampered := oauth2test.Tamper(valid, map[string]any{
			"iss": testIssuer, "aud": []string{"keygate"}, "client_id": "client-bad",
			"exp": time.Now().Add(time.Hour).Unix(), "scope": "extraction:sync", "context": ctxB,
		})
		cases := []struct{ name, token string }{
			{"expired", h.mint(rs, with(claims("client-bad", "extraction:sync"), "exp", time.Now().Add(-time.Hour), "iat", time.Now().Add(-2*time.Hour), "nbf", time.Now().Add(-2*time.Hour)))},
			{"wrong iss", h.mint(es, with(claims("client-bad", "extraction:sync"), "iss", "https://evil.test/"))},
			{"wrong aud", h.mint(rs, with(claims("client-bad", "extraction:sync"), "aud", []string{"someone-else"}))},
			{"alg none", h.secret(oauth2test.Unsigned(good, "rsa-1"))},
			{"forged signature", h.mint(forger, claims("client-bad", "extraction:sync"))},
			{"tampered payload", h.secret(tampered)},
		}
		before := h.Extraction.hits.Load()
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := h.sync(tokCred(tc.token), ctxA)
				assertError(t, r, 401, "")
				if got := r.Header.Get("WWW-Authenticate"); got != invalidToken {
					t.Errorf("WWW-Authenticate = %q, want %q", got, invalidToken)
				}
			})
		}
		if n := h.Extraction.hits.Load() - before; n != 0 {
			t.Errorf("%d bad tokens reached the upstream", n)
		}
	})

	t.Run("registry scope only on /sync is 403", func(t *testing.T) {
		tok := h.mint(es, claims("client-reg", "registry"))
		assertError(t, h.sync(tokCred(tok), ctxA), 403, "")
		if r := h.get(h.API, "/registry/schemas", tokCred(tok)); r.Status != 200 || r.Echo.Backend != "registry" {
			t.Errorf("the same token on /registry: %d %s", r.Status, r.Body)
		}
	})

	t.Run("token and key together are ambiguous", func(t *testing.T) {
		tok := h.mint(rs, claims("client-both", "extraction:sync"))
		before := h.Extraction.hits.Load()
		r := h.sync(cred{key: h.LiveKey, token: tok}, ctxA)
		assertError(t, r, 401, "not both")
		if h.Extraction.hits.Load() != before {
			t.Error("an ambiguous request was forwarded")
		}
	})

	t.Run("keys still work", func(t *testing.T) {
		r := h.sync(keyCred(h.LiveKey), ctxA)
		if r.Status != 200 || r.Echo.Identity["x-keygate-key-id"] != h.LiveID {
			t.Fatalf("key: %d %s", r.Status, r.Body)
		}
	})

	t.Run("metrics count each method by env, never by id", func(t *testing.T) {
		// Both signers' clients; per-client figures are in the usage store.
		if got := h.metric("keygate_authenticated_requests_total", "method", "oauth2", "env", "live"); got != 6 {
			t.Errorf(`{method="oauth2",env="live"} = %v, want 6`, got)
		}
		if got := h.metric("keygate_authenticated_requests_total", "method", "api_key", "env", "live"); got != 1 {
			t.Errorf(`{method="api_key",env="live"} = %v, want 1`, got)
		}
	})
}

func TestOAuth2JWKSRotation(t *testing.T) {
	t.Parallel()
	old, next := rsaSigner(t, 1, "2026-01"), ecSigner(t, 1, "2026-02")
	is := oauth2test.NewIssuer(t, old)
	// The issuer's CA is given as a file this time.
	caFile := filepath.Join(t.TempDir(), "issuer-ca.pem")
	if err := os.WriteFile(caFile, is.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, setup{mod: func(c *config.Config) {
		withOAuth(is)(c)
		c.Auth.OAuth2.CARoot = caFile
		c.Auth.OAuth2.JWKSRefreshMinInterval = 0 // every unknown kid may refresh
	}})

	if r := h.sync(tokCred(h.mint(old, claims("client-rot", "extraction:sync"))), ctxA); r.Status != 200 {
		t.Fatalf("token of the current key: %d %s", r.Status, r.Body)
	}
	early := h.mint(next, claims("client-rot", "extraction:sync"))
	assertError(t, h.sync(tokCred(early), ctxA), 401, "")

	is.Publish(t, next)
	r := h.sync(tokCred(h.mint(next, claims("client-rot", "extraction:sync"))), ctxA)
	if r.Status != 200 || r.Echo.Identity["x-keygate-key-id"] != "oauth2:client-rot" {
		t.Fatalf("token of the rotated-in key: %d %s", r.Status, r.Body)
	}
	if r := h.sync(tokCred(h.mint(old, claims("client-rot", "extraction:sync"))), ctxA); r.Status != 200 {
		t.Errorf("the old key, still published, stopped working: %d", r.Status)
	}
}

func TestRateLimitPerCredential(t *testing.T) {
	t.Parallel()
	rs, es := rsaSigner(t, 0, "rsa-1"), ecSigner(t, 0, "ec-1")
	is := oauth2test.NewIssuer(t, rs, es)
	const burst = 3
	h := newHarness(t, setup{mod: func(c *config.Config) {
		withOAuth(is)(c)
		c.RateLimit.Limits = map[string]policy.Limit{
			"live": {Rate: 1, Per: time.Hour, Burst: burst},
			"test": {Rate: 1, Per: time.Hour, Burst: burst},
		}
	}})
	// Each token request uses a fresh token of the same client: the limit
	// is the client's, not the token's.
	tokenOf := func(client string) func(i int) cred {
		return func(i int) cred {
			s := rs
			if i%2 == 1 {
				s = es
			}
			return tokCred(h.mint(s, with(claims(client, "extraction:sync"), "jti", client+string(rune('a'+i)))))
		}
	}
	cases := []struct {
		name  string
		cred  func(i int) cred
		other cred // another credential with its own allowance
	}{
		{"api key", func(int) cred { return keyCred(h.LiveKey) }, keyCred(h.LiveKey2)},
		{"token client", tokenOf("client-limited"), tokenOf("client-other")(0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range burst {
				if r := h.sync(tc.cred(i), ctxA); r.Status != 200 {
					t.Fatalf("request %d: %d %s", i+1, r.Status, r.Body)
				}
			}
			before := h.Extraction.hits.Load()
			r := h.sync(tc.cred(burst), ctxA)
			assertError(t, r, 429, "Rate Limited")
			if r.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			if h.Extraction.hits.Load() != before {
				t.Error("a rate-limited request was forwarded")
			}
			if r := h.sync(tc.other, ctxA); r.Status != 200 {
				t.Errorf("another credential was limited too: %d", r.Status)
			}
		})
	}
}

func TestAPIKeyDeprecationHeaders(t *testing.T) {
	t.Parallel()
	rs := rsaSigner(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, rs)
	date := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	sunset := time.Date(2027, 7, 1, 0, 0, 0, 0, time.UTC)
	const link = "https://docs.example.com/oauth2-migration"
	h := newHarness(t, setup{mod: func(c *config.Config) {
		withOAuth(is)(c)
		c.Auth.APIKeys.Deprecation = config.DeprecationConfig{Date: date, Sunset: sunset, Link: link}
	}})

	keyResp := h.sync(keyCred(h.LiveKey), ctxA)
	keyErr := h.sync(keyCred(h.LiveKey), ctxB)
	for name, r := range map[string]result{"key 200": keyResp, "key 403": keyErr} {
		if got := r.Header.Get("Deprecation"); got != "@1798761600" {
			t.Errorf("%s: Deprecation = %q, want @1798761600", name, got)
		}
		if got := r.Header.Get("Sunset"); got != "Thu, 01 Jul 2027 00:00:00 GMT" {
			t.Errorf("%s: Sunset = %q", name, got)
		}
		if got := r.Header.Get("Link"); !strings.Contains(got, "<"+link+">") || !strings.Contains(got, `rel="deprecation"`) {
			t.Errorf("%s: Link = %q", name, got)
		}
	}
	tokResp := h.sync(tokCred(h.mint(rs, claims("client-dep", "extraction:sync"))), ctxA)
	if tokResp.Status != 200 {
		t.Fatalf("token: %d %s", tokResp.Status, tokResp.Body)
	}
	for _, hd := range []string{"Deprecation", "Sunset", "Link"} {
		if v, ok := tokResp.Header[hd]; ok {
			t.Errorf("token-authenticated response carries %s: %q", hd, v)
		}
	}
}

func TestAPIKeySwitches(t *testing.T) {
	t.Parallel()
	rs := rsaSigner(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, rs)
	cases := []struct {
		name       string
		mod        func(*config.APIKeysConfig)
		keyStatus  int
		keyMessage string
		regStatus  int // the registry key on /registry
	}{
		{"keys only for the registry", func(k *config.APIKeysConfig) { k.Products = []string{"registry"} }, 403, "Forbidden", 200},
		{"keys off", func(k *config.APIKeysConfig) { k.Enabled = false }, 401, "not accepted", 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mod: func(c *config.Config) {
				withOAuth(is)(c)
				tc.mod(&c.Auth.APIKeys)
			}})
			assertError(t, h.sync(keyCred(h.LiveKey), ctxA), tc.keyStatus, tc.keyMessage)
			if r := h.get(h.API, "/registry/schemas", keyCred(h.RegistryKey)); r.Status != tc.regStatus {
				t.Errorf("registry key on /registry: %d, want %d", r.Status, tc.regStatus)
			}
			if n := h.Extraction.hits.Load(); n != 0 {
				t.Errorf("a refused key reached the extraction upstream (%d)", n)
			}
			tok := h.mint(rs, claims("client-switch", "extraction:sync"))
			if r := h.sync(tokCred(tok), ctxA); r.Status != 200 {
				t.Errorf("token: %d %s", r.Status, r.Body)
			}
		})
	}
}
