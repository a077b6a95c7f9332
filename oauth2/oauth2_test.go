package oauth2_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/oauth2"
)

// The gateway's chain calls an Authenticator through auth.Credential.
var _ auth.Credential = (*oauth2.Authenticator)(nil)

func b64(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func with(c map[string]any, kv ...any) map[string]any {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
			continue
		}
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	rsaS := oauth2test.RSA(t, 0, "rsa-1")
	ecS := oauth2test.NewEC(t, "ec-1")
	is := oauth2test.NewIssuer(t, rsaS, ecS)
	a := newAuthenticator(t, is, nil)

	forger := oauth2test.RSA(t, 1, "rsa-1") // same kid, key not in the JWKS
	ecAsRSA := ecS
	ecAsRSA.Key, _ = ecS.Key.Clone()
	_ = ecAsRSA.Key.Set("kid", "rsa-1")
	rs512 := rsaS
	rs512.Alg = jwa.RS512()

	pubDER, err := x509.MarshalPKIXPublicKey(rsaS.Raw.Public())
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	hsHdr := jws.NewHeaders()
	_ = hsHdr.Set(jws.KeyIDKey, "rsa-1")
	hsTok := jwt.New()
	for k, v := range claims() {
		_ = hsTok.Set(k, v)
	}
	hs256, err := jwt.Sign(hsTok, jwt.WithKey(jwa.HS256(), pubPEM, jws.WithProtectedHeaders(hsHdr)))
	if err != nil {
		t.Fatal(err)
	}
	noKid := oauth2test.Signer{Alg: jwa.RS256(), Key: mustClone(t, rsaS), Raw: rsaS.Raw}
	_ = noKid.Key.Remove("kid")

	now := time.Now()
	c := claims()
	c[jwt.IssuedAtKey] = now.Unix()
	c[jwt.NotBeforeKey] = now.Unix()
	c[jwt.ExpirationKey] = now.Add(time.Hour).Unix()
	algNone := b64(map[string]string{"alg": "none", "typ": "JWT", "kid": "rsa-1"}) + "." + b64(c) + "."

	ok := func(id, ctx, env string, products ...string) auth.Verdict {
		return auth.Verdict{OK: true, Principal: auth.Principal{
			ID: id, Products: products, Env: env, Context: ctx, Method: auth.MethodOAuth2,
		}}
	}
	invalid := auth.Verdict{Reason: auth.ReasonInvalid, Message: "invalid bearer token", Challenge: oauth2.ChallengeInvalidToken}

	tests := []struct {
		name  string
		token string
		want  auth.Verdict
	}{
		{"valid RS256 token", oauth2test.Mint(t, rsaS, claims()),
			ok("oauth2:client-123", testContext, "live", "extraction", "registry")},
		{"valid ES256 token", oauth2test.Mint(t, ecS, claims()),
			ok("oauth2:client-123", testContext, "live", "extraction", "registry")},
		{"sub when no client_id", oauth2test.Mint(t, rsaS, with(claims(), "client_id", nil)),
			ok("oauth2:user-1", testContext, "live", "extraction", "registry")},
		{"unsafe client_id is sanitized", oauth2test.Mint(t, rsaS, with(claims(), "client_id", "a b\r\n\"x")),
			ok("oauth2:a_b___x", testContext, "live", "extraction", "registry")},
		{"registry scope only via scp array", oauth2test.Mint(t, ecS, with(claims(), "scope", nil, "scp", []string{"registry", "x"})),
			ok("oauth2:client-123", testContext, "live", "registry")},
		{"extraction scope via scp string", oauth2test.Mint(t, ecS, with(claims(), "scope", nil, "scp", "a extraction:sync")),
			ok("oauth2:client-123", testContext, "live", "extraction")},
		{"test environment from env claim", oauth2test.Mint(t, rsaS, with(claims(), "env", "test")),
			ok("oauth2:client-123", testContext, "test", "extraction", "registry")},
		{"no context claim binds to none", oauth2test.Mint(t, rsaS, with(claims(), "context", nil)),
			ok("oauth2:client-123", "", "live", "extraction", "registry")},
		{"expired within leeway", oauth2test.Mint(t, rsaS, with(claims(), jwt.ExpirationKey, time.Now().Add(-10*time.Second))),
			ok("oauth2:client-123", testContext, "live", "extraction", "registry")},
		{"second audience accepted", oauth2test.Mint(t, rsaS, with(claims(), jwt.AudienceKey, []string{"x", "other"})),
			ok("oauth2:client-123", testContext, "live", "extraction", "registry")},

		{"expired", oauth2test.Mint(t, rsaS, with(claims(), jwt.ExpirationKey, time.Now().Add(-2*time.Minute))),
			auth.Verdict{Reason: auth.ReasonExpired, Message: "bearer token expired", Challenge: oauth2.ChallengeInvalidToken}},
		{"not yet valid", oauth2test.Mint(t, rsaS, with(claims(), jwt.NotBeforeKey, time.Now().Add(2*time.Minute))), invalid},
		{"issued in the future", oauth2test.Mint(t, rsaS, with(claims(), jwt.IssuedAtKey, time.Now().Add(2*time.Minute))), invalid},
		{"no exp", oauth2test.Mint(t, rsaS, with(claims(), jwt.ExpirationKey, nil)), invalid},
		{"wrong issuer", oauth2test.Mint(t, rsaS, with(claims(), jwt.IssuerKey, "https://evil.test/")), invalid},
		{"wrong audience", oauth2test.Mint(t, rsaS, with(claims(), jwt.AudienceKey, []string{"someone-else"})), invalid},
		{"no subject at all", oauth2test.Mint(t, rsaS, with(claims(), "client_id", nil, jwt.SubjectKey, nil)), invalid},
		{"context claim not a string", oauth2test.Mint(t, rsaS, with(claims(), "context", 42)), invalid},
		{"context claim with unsafe bytes", oauth2test.Mint(t, rsaS, with(claims(), "context", "a\nb")), invalid},
		{"env claim neither live nor test", oauth2test.Mint(t, rsaS, with(claims(), "env", "prod")), invalid},
		{"alg none", algNone, invalid},
		{"forged signature with a known kid", oauth2test.Mint(t, forger, claims()), invalid},
		{"HS256 signed with the RSA public key", string(hs256), invalid},
		{"ES256 token naming an RSA key", oauth2test.Mint(t, ecAsRSA, claims()), invalid},
		{"alg outside the allow-list", oauth2test.Mint(t, rs512, claims()), invalid},
		{"no kid", oauth2test.Mint(t, noKid, claims()), invalid},
		{"garbage in JWT shape", "abc.def.ghi", invalid},
		{"garbage", "not-a-jwt", invalid},

		{"no product scope", oauth2test.Mint(t, rsaS, with(claims(), "scope", "openid profile")),
			auth.Verdict{Reason: oauth2.ReasonInsufficientScope, Status: http.StatusForbidden,
				Message: "insufficient scope", Challenge: oauth2.ChallengeInsufficientScope}},
		{"scope that only prefixes a product scope", oauth2test.Mint(t, rsaS, with(claims(), "scope", "extraction registryx")),
			auth.Verdict{Reason: oauth2.ReasonInsufficientScope, Status: http.StatusForbidden,
				Message: "insufficient scope", Challenge: oauth2.ChallengeInsufficientScope}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := a.Authenticate(bearerRequest(tc.token))
			if err != nil {
				t.Fatalf("Authenticate: unexpected error %v", err)
			}
			if !equalVerdict(got, tc.want) {
				t.Fatalf("verdict\n got %+v\nwant %+v", got, tc.want)
			}
			if strings.Contains(got.Message, tc.token) {
				t.Fatal("message contains the token")
			}
		})
	}
}

func mustClone(t *testing.T, s oauth2test.Signer) jwk.Key {
	t.Helper()
	k, err := s.Key.Clone()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func equalVerdict(a, b auth.Verdict) bool {
	pa, pb := a.Principal, b.Principal
	return a.OK == b.OK && a.Reason == b.Reason && a.Message == b.Message && a.Status == b.Status &&
		a.Challenge == b.Challenge && pa.ID == pb.ID && pa.Name == pb.Name && slices.Equal(pa.Products, pb.Products) &&
		pa.Env == pb.Env && pa.Context == pb.Context && pa.Method == pb.Method
}

func TestAuthorizationHeader(t *testing.T) {
	t.Parallel()
	s := oauth2test.NewEC(t, "ec-1")
	is := oauth2test.NewIssuer(t, s)
	a := newAuthenticator(t, is, nil)
	good := oauth2test.Mint(t, s, claims())

	tests := []struct {
		name        string
		values      []string
		present     bool
		ok          bool
		reason      auth.Reason
		challenge   string
		wantMessage string
	}{
		{"no header", nil, false, false, auth.ReasonMissing, oauth2.ChallengeRealm, "missing bearer token"},
		{"good token", []string{"Bearer " + good}, true, true, "", "", ""},
		{"lower-case scheme", []string{"bearer " + good}, true, true, "", "", ""},
		{"upper-case scheme", []string{"BEARER " + good}, true, true, "", "", ""},
		{"two Authorization headers", []string{"Bearer " + good, "Bearer " + good}, true, false,
			auth.ReasonDuplicate, oauth2.ChallengeInvalidToken, "multiple Authorization headers"},
		{"two spaces", []string{"Bearer  " + good}, true, false, auth.ReasonMalformed, oauth2.ChallengeInvalidToken, "malformed bearer token"},
		{"two tokens", []string{"Bearer " + good + " " + good}, true, false, auth.ReasonMalformed, oauth2.ChallengeInvalidToken, "malformed bearer token"},
		{"scheme only", []string{"Bearer"}, true, false, auth.ReasonMalformed, oauth2.ChallengeInvalidToken, "malformed bearer token"},
		{"non-token68 bytes", []string{"Bearer a\"b"}, true, false, auth.ReasonMalformed, oauth2.ChallengeInvalidToken, "malformed bearer token"},
		{"oversized token", []string{"Bearer " + strings.Repeat("a", 9000)}, true, false, auth.ReasonMalformed, oauth2.ChallengeInvalidToken, "malformed bearer token"},
		{"basic scheme", []string{"Basic dXNlcjpwYXNz"}, false, false, auth.ReasonMalformed, oauth2.ChallengeRealm, "unsupported authorization scheme; use Bearer"},
		{"scheme glued to token", []string{"Bearer" + good}, false, false, auth.ReasonMalformed, oauth2.ChallengeRealm, "unsupported authorization scheme; use Bearer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "https://keygate.test/", nil)
			for _, v := range tc.values {
				r.Header.Add("Authorization", v)
			}
			if got := a.Present(r); got != tc.present {
				t.Errorf("Present = %v, want %v", got, tc.present)
			}
			v, err := a.Authenticate(r)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != tc.ok || v.Reason != tc.reason || v.Challenge != tc.challenge || v.Message != tc.wantMessage || v.Status != 0 {
				t.Fatalf("verdict %+v, want ok=%v reason=%q challenge=%q message=%q", v, tc.ok, tc.reason, tc.challenge, tc.wantMessage)
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	t.Parallel()
	old := oauth2test.RSA(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, old)
	a := newAuthenticator(t, is, nil)

	if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, old, claims()))); err != nil || !v.OK {
		t.Fatalf("old key: %+v, %v", v, err)
	}
	rotated := oauth2test.NewEC(t, "ec-2")
	tok := oauth2test.Mint(t, rotated, claims())
	is.Publish(t, rotated)
	v, err := a.Authenticate(bearerRequest(tok))
	if err != nil || !v.OK {
		t.Fatalf("token signed with the new key refused: %+v, %v", v, err)
	}
	if n := is.Fetches.Load(); n != 2 {
		t.Errorf("JWKS fetches = %d, want 2 (start + one on the new kid)", n)
	}
	// The new key is cached: no further fetch.
	if v, err := a.Authenticate(bearerRequest(tok)); err != nil || !v.OK {
		t.Fatalf("second use of the new key: %+v, %v", v, err)
	}
	if n := is.Fetches.Load(); n != 2 {
		t.Errorf("JWKS fetches = %d after reuse, want 2", n)
	}
}

func TestUnknownKidFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	good := oauth2test.RSA(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, good)
	a := newAuthenticator(t, is, func(c *oauth2.Config) { c.JWKSRefreshMinInterval = time.Hour })

	const flood = 300
	toks := make([]string, flood)
	for i := range toks {
		s := good
		s.Key, _ = good.Key.Clone()
		_ = s.Key.Set("kid", fmt.Sprintf("made-up-%d", i))
		toks[i] = oauth2test.Mint(t, s, claims())
	}
	var wg sync.WaitGroup
	errs := make(chan error, flood)
	for _, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := a.Authenticate(bearerRequest(tok))
			switch {
			case err != nil:
				errs <- err
			case v.OK || v.Reason != auth.ReasonInvalid || v.Challenge != oauth2.ChallengeInvalidToken:
				errs <- fmt.Errorf("unknown kid verdict %+v", v)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := is.Fetches.Load(); n > 2 {
		t.Errorf("JWKS fetches = %d for %d unknown kids, want at most 2 (start + one refresh)", n, flood)
	}
	// Known keys keep working during and after the flood.
	if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, good, claims()))); err != nil || !v.OK {
		t.Fatalf("good token after flood: %+v, %v", v, err)
	}
}

func TestJWKSDownAtStart(t *testing.T) {
	t.Parallel()
	s := oauth2test.RSA(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, s)
	is.Down.Store(true)
	// New succeeds: API keys keep working while the issuer is down.
	a := newAuthenticator(t, is, func(c *oauth2.Config) { c.JWKSRefreshMinInterval = 20 * time.Millisecond })
	tok := oauth2test.Mint(t, s, claims())

	v, err := a.Authenticate(bearerRequest(tok))
	if !errors.Is(err, oauth2.ErrJWKSUnavailable) {
		t.Fatalf("Authenticate with JWKS down = %+v, %v; want an error wrapping ErrJWKSUnavailable (503)", v, err)
	}
	if strings.Contains(err.Error(), tok) {
		t.Fatal("error contains the token")
	}
	// Bad tokens are still refused without the issuer.
	if v, err := a.Authenticate(bearerRequest("not-a-jwt")); err != nil || v.OK {
		t.Fatalf("garbage with JWKS down: %+v, %v", v, err)
	}

	// The issuer recovers: tokens are accepted without restarting.
	is.Down.Store(false)
	testkit.Eventually(t, testkit.HangCheck, "the token accepted after the issuer came back", func() error {
		v, err := a.Authenticate(bearerRequest(tok))
		if err != nil {
			return err
		}
		return testkit.True(v.OK, "refused: %+v", v)
	})
}

func TestJWKSUnreachableAtStart(t *testing.T) {
	t.Parallel()
	s := oauth2test.RSA(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, s)
	u, client := is.JWKSURL(), is.Server.Client()
	is.Server.Close() // nothing listens any more
	a, err := oauth2.New(context.Background(), testConfig(u), oauth2.Deps{HTTPClient: client})
	if err != nil {
		t.Fatalf("New with unreachable JWKS: %v (want success, 503 per request)", err)
	}
	defer a.Close()
	if _, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, s, claims()))); !errors.Is(err, oauth2.ErrJWKSUnavailable) {
		t.Fatalf("Authenticate error = %v, want ErrJWKSUnavailable", err)
	}
}

func TestCachedKeysSurviveIssuerOutage(t *testing.T) {
	t.Parallel()
	s := oauth2test.RSA(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, s)
	a := newAuthenticator(t, is, nil)
	is.Down.Store(true)

	if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, s, claims()))); err != nil || !v.OK {
		t.Fatalf("cached key during outage: %+v, %v", v, err)
	}
	other := oauth2test.RSA(t, 1, "rsa-unknown")
	if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, other, claims()))); err != nil || v.OK || v.Reason != auth.ReasonInvalid {
		t.Fatalf("unknown kid during outage: %+v, %v; want a 401 refusal", v, err)
	}
}

func TestCARoot(t *testing.T) {
	t.Parallel()
	s := oauth2test.NewEC(t, "ec-1")
	is := oauth2test.NewIssuer(t, s)
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: is.Server.Certificate().Raw}))

	t.Run("trusted through ca_root", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(is.JWKSURL())
		cfg.CARoot = caPEM
		a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, s, claims()))); err != nil || !v.OK {
			t.Fatalf("%+v, %v", v, err)
		}
	})
	t.Run("untrusted certificate makes the key set unavailable", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(is.JWKSURL())
		cfg.CARoot = selfSignedCA(t)
		a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if _, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, s, claims()))); !errors.Is(err, oauth2.ErrJWKSUnavailable) {
			t.Fatalf("err = %v, want ErrJWKSUnavailable", err)
		}
	})
	t.Run("ca_root without a certificate", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(is.JWKSURL())
		cfg.CARoot = "-----BEGIN nothing"
		if _, err := oauth2.New(context.Background(), cfg, oauth2.Deps{}); err == nil || !strings.Contains(err.Error(), "ca_root") {
			t.Fatalf("err = %v, want one naming auth.oauth2.ca_root", err)
		}
	})
}

// TestDisabled: an Authenticator exists only to check tokens; with oauth2
// off, the auth chain refuses bearer tokens itself (package auth tests it).
func TestDisabled(t *testing.T) {
	t.Parallel()
	if a, err := oauth2.New(context.Background(), oauth2.DefaultConfig(), oauth2.Deps{}); err == nil {
		a.Close()
		t.Fatal("New built an authenticator for a disabled configuration")
	}
}

func TestTokensNeverLogged(t *testing.T) {
	t.Parallel()
	s := oauth2test.RSA(t, 0, "rsa-1")
	is := oauth2test.NewIssuer(t, s)
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := testConfig(is.JWKSURL())
	a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{Logger: zap.New(core), HTTPClient: is.Server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	toks := []string{
		oauth2test.Mint(t, s, with(claims(), jwt.ExpirationKey, time.Now().Add(-time.Hour))),
		oauth2test.Mint(t, s, with(claims(), jwt.IssuerKey, "https://evil.test/")),
		oauth2test.Mint(t, s, with(claims(), "scope", "none")),
		oauth2test.Mint(t, oauth2test.RSA(t, 2, "nope"), claims()),
		"abc.def.ghi",
	}
	for _, tok := range toks {
		if v, err := a.Authenticate(bearerRequest(tok)); err != nil || v.OK {
			t.Fatalf("%+v, %v", v, err)
		}
	}
	if logs.Len() == 0 {
		t.Fatal("no refusal was logged at debug level")
	}
	for _, e := range logs.All() {
		line, _ := json.Marshal(e.ContextMap())
		for _, tok := range toks {
			parts := strings.Split(tok, ".")
			for _, part := range parts {
				if len(part) > 8 && (strings.Contains(e.Message, part) || strings.Contains(string(line), part)) {
					t.Fatalf("log entry %q %s contains part of a token", e.Message, line)
				}
			}
		}
	}
}

// selfSignedCA returns the PEM of a fresh CA that signed nothing.
func selfSignedCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "unrelated test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
