package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/jwscheck"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/tokenissuer"
)

const ownIssuer = "https://keygate.test"

func withTokenEndpoint(more ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		c.Auth.TokenEndpoint.Enabled = true
		c.Auth.TokenEndpoint.Issuer = ownIssuer
		for _, m := range more {
			m(c)
		}
	}
}

// exchange asks the token endpoint for a token with client_secret_basic.
func (h *harness) exchange(id, key string) (string, result) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.API+"/oauth2/token", strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(key))
	r := h.do(req)
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if r.Status == 200 {
		if err := json.Unmarshal(r.Body, &body); err != nil {
			h.t.Fatalf("token response: %v: %s", err, r.Body)
		}
		h.secret(body.AccessToken)
	}
	return body.AccessToken, r
}

func (h *harness) mustExchange(id, key string) string {
	h.t.Helper()
	tok, r := h.exchange(id, key)
	if r.Status != 200 {
		h.t.Fatalf("token endpoint: %d %s", r.Status, r.Body)
	}
	return tok
}

func TestTokenEndpointGoClientThenSync(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	cc := clientcredentials.Config{ClientID: h.LiveID, ClientSecret: h.LiveKey, TokenURL: h.API + "/oauth2/token", AuthStyle: oauth2.AuthStyleInHeader}
	tok, err := cc.Token(context.WithValue(context.Background(), oauth2.HTTPClient, h.Client))
	if err != nil {
		t.Fatal(err)
	}
	h.secret(tok.AccessToken)
	if tok.TokenType != "Bearer" || tok.Expiry.Before(time.Now().Add(9*time.Minute)) || tok.Expiry.After(time.Now().Add(11*time.Minute)) {
		t.Errorf("token type %q expiry %s; want Bearer in ~10m", tok.TokenType, tok.Expiry)
	}
	if s, _ := tok.Extra("scope").(string); s != "extraction:sync" {
		t.Errorf("scope = %q", s)
	}

	before := h.Extraction.hits.Load()
	r, sent := h.syncTo(h.API, tokCred(tok.AccessToken), ctxA)
	if r.Status != 200 {
		t.Fatalf("/sync with the token: %d %s", r.Status, r.Body)
	}
	if got := r.Echo.Identity["x-keygate-key-id"]; got != h.LiveID {
		t.Errorf("X-Keygate-Key-Id = %q, want the key id %s", got, h.LiveID)
	}
	if r.Echo.SawAuthz || r.Echo.SHA256 != sha(sent) {
		t.Error("the upstream saw the token, or not the body byte for byte")
	}
	if _, ok := r.Header["Deprecation"]; ok {
		t.Error("a token-authenticated response carries Deprecation")
	}
	assertError(t, h.sync(tokCred(tok.AccessToken), ctxB), 403, "Invalid Context")
	if h.Extraction.hits.Load() != before+1 {
		t.Error("the refused request was forwarded")
	}
	reg := h.mustExchange(h.RegistryID, h.RegistryKey)
	assertError(t, h.sync(tokCred(reg), ctxA), 403, "not valid for the extraction product")
	if r := h.get(h.API, "/registry/schemas", tokCred(reg)); r.Status != 200 {
		t.Errorf("registry token on /registry: %d %s", r.Status, r.Body)
	}
	if r := h.get(h.API, "/registry/schemas", cred{key: h.LiveKey, token: tok.AccessToken}); r.Status != 401 {
		t.Errorf("key and token together: %d, want 401", r.Status)
	}

	t.Run("the access log names the key with method bearer", func(t *testing.T) {
		if !strings.Contains(h.Logs.String(), `"auth":"bearer"`) {
			t.Error("no access-log line with auth bearer")
		}
	})
}

// oauthErr checks an RFC 6749 §5.2 error response.
func oauthErr(t *testing.T, r result, status int, code string) {
	t.Helper()
	var body struct {
		Error string `json:"error"`
		Desc  string `json:"error_description"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != status || body.Error != code {
		t.Fatalf("got %d %s, want %d error %s", r.Status, r.Body, status, code)
	}
	if r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Pragma") != "no-cache" {
		t.Errorf("Cache-Control %q Pragma %q", r.Header.Get("Cache-Control"), r.Header.Get("Pragma"))
	}
	if status == 401 && r.Header.Get("WWW-Authenticate") != `Basic realm="keygate"` {
		t.Errorf("WWW-Authenticate = %q", r.Header.Get("WWW-Authenticate"))
	}
}

func TestTokenEndpointErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	revokedKey, revoked := h.issue(keystore.Extraction, ctxA)
	if _, err := h.Keys.Revoke(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "the keystore sees the revocation", func() error {
		if r := h.get(h.API, "/registry/x", keyCred(revokedKey)); !strings.Contains(string(r.Body), "revoked") {
			return errStatus(r.Status)
		}
		return nil
	})
	badSecret := h.secret(strings.Replace(h.LiveKey2, h.LiveKey2[12:14], "zz", 1))
	type req struct {
		ct, body   string
		basic      [2]string
		wantStatus int
		wantCode   string
	}
	form := "application/x-www-form-urlencoded"
	cases := map[string]req{
		"good":                       {ct: form, body: "grant_type=client_credentials", basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 200},
		"client_secret_post":         {ct: form, body: "grant_type=client_credentials&client_id=" + h.LiveID + "&client_secret=" + h.LiveKey, wantStatus: 200},
		"bad secret":                 {ct: form, body: "grant_type=client_credentials", basic: [2]string{h.LiveID, badSecret}, wantStatus: 401, wantCode: "invalid_client"},
		"revoked key":                {ct: form, body: "grant_type=client_credentials", basic: [2]string{revoked.ID, revokedKey}, wantStatus: 401, wantCode: "invalid_client"},
		"another key's client_id":    {ct: form, body: "grant_type=client_credentials", basic: [2]string{h.RegistryID, h.LiveKey}, wantStatus: 401, wantCode: "invalid_client"},
		"no client authentication":   {ct: form, body: "grant_type=client_credentials", wantStatus: 401, wantCode: "invalid_client"},
		"basic and post credentials": {ct: form, body: "grant_type=client_credentials&client_id=" + h.LiveID + "&client_secret=" + h.LiveKey, basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 400, wantCode: "invalid_request"},
		"json body":                  {ct: "application/json", body: `{"grant_type":"client_credentials"}`, basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 400, wantCode: "invalid_request"},
		"grant_type twice":           {ct: form, body: "grant_type=client_credentials&grant_type=client_credentials", basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 400, wantCode: "invalid_request"},
		"grant_type=password":        {ct: form, body: "grant_type=password&username=a&password=b", basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 400, wantCode: "unsupported_grant_type"},
		"no grant_type":              {ct: form, body: "scope=extraction:sync", basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 400, wantCode: "invalid_request"},
		"scope of another product":   {ct: form, body: "grant_type=client_credentials&scope=registry", basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 400, wantCode: "invalid_scope"},
		"scope within the product":   {ct: form, body: "grant_type=client_credentials&scope=extraction:sync", basic: [2]string{h.LiveID, h.LiveKey}, wantStatus: 200},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rq, _ := http.NewRequest(http.MethodPost, h.API+"/oauth2/token", strings.NewReader(c.body))
			rq.Header.Set("Content-Type", c.ct)
			if c.basic[0] != "" {
				rq.SetBasicAuth(c.basic[0], c.basic[1])
			}
			r := h.do(rq)
			if c.wantStatus == 200 {
				if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Pragma") != "no-cache" {
					t.Fatalf("%d %s %v", r.Status, r.Body, r.Header)
				}
				var tr map[string]any
				_ = json.Unmarshal(r.Body, &tr)
				if tr["token_type"] != "Bearer" || tr["expires_in"] != float64(600) || tr["scope"] != "extraction:sync" {
					t.Errorf("body %s", r.Body)
				}
				h.secret(tr["access_token"].(string))
				return
			}
			oauthErr(t, r, c.wantStatus, c.wantCode)
			for _, s := range []string{h.LiveKey, badSecret, revokedKey} {
				if strings.Contains(string(r.Body), s) {
					t.Error("the error body echoes a secret")
				}
			}
		})
	}
	// The gateway's own refusals at the token endpoint are RFC 6749
	// errors too (issue 49): a client parses one shape there.
	t.Run("GET is 405 as an RFC 6749 error", func(t *testing.T) {
		r := h.get(h.API, "/oauth2/token", cred{})
		oauthErr(t, r, 405, "invalid_request")
		if r.Header.Get("Allow") != "POST" {
			t.Errorf("Allow = %q", r.Header.Get("Allow"))
		}
	})
	t.Run("a body over 4 KiB is 413 as an RFC 6749 error", func(t *testing.T) {
		rq, _ := http.NewRequest(http.MethodPost, h.API+"/oauth2/token", strings.NewReader("grant_type=client_credentials&x="+strings.Repeat("a", 5000)))
		rq.Header.Set("Content-Type", form)
		oauthErr(t, h.do(rq), 413, "invalid_request")
	})
	t.Run("a key in the query is 400 as an RFC 6749 error", func(t *testing.T) {
		rq, _ := http.NewRequest(http.MethodPost, h.API+"/oauth2/token?client_id="+h.LiveID+"&client_secret="+h.LiveKey, strings.NewReader("grant_type=client_credentials"))
		rq.Header.Set("Content-Type", form)
		r := h.do(rq)
		oauthErr(t, r, 400, "invalid_request")
		if strings.Contains(string(r.Body), h.LiveKey) {
			t.Error("the error body echoes the key")
		}
	})
}

func TestTokenEndpointFailureLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	bad := h.secret(h.LiveKey[:len(h.LiveKey)-3] + "AAA")
	var last result
	for i := range 61 {
		_, last = h.exchange(h.LiveID, bad)
		if i < 59 && last.Status != 401 {
			t.Fatalf("attempt %d: %d %s", i+1, last.Status, last.Body)
		}
	}
	if last.Status != 429 || last.Header.Get("Retry-After") == "" {
		t.Fatalf("after 60 bad secrets: %d %s (Retry-After %q), want 429", last.Status, last.Body, last.Header.Get("Retry-After"))
	}
	// The address is throttled everywhere, the good secret included.
	if _, r := h.exchange(h.LiveID, h.LiveKey); r.Status != 429 {
		t.Errorf("good secret from a throttled address: %d", r.Status)
	}
}

func TestTokenEndpointIssuanceLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	var last result
	for range tokenissuer.IssueLimit.Burst + 1 {
		_, last = h.exchange(h.LiveID, h.LiveKey)
	}
	if last.Status != 429 || last.Header.Get("Retry-After") == "" {
		t.Fatalf("a token per call: %d %s, want 429 with Retry-After", last.Status, last.Body)
	}
	if _, r := h.exchange(h.LiveID, h.LiveKey); r.Status != 429 {
		t.Errorf("still refused: %d", r.Status)
	}
	if _, r := h.exchange(h.RegistryID, h.RegistryKey); r.Status != 200 {
		t.Errorf("another key is limited on its own: %d", r.Status)
	}
}

// TestTokenDiesWithItsKey: a token used three times (its signature
// checked once, then answered from the cache) is refused once its key is
// revoked: the key behind a cached token is read on every use.
func TestTokenDiesWithItsKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	k, rec := h.issue(keystore.Extraction, ctxA)
	var tok string
	testkit.Eventually(t, testkit.HangCheck, "the keystore sees the new key", func() error {
		var r result
		if tok, r = h.exchange(rec.ID, k); r.Status != 200 {
			return errStatus(r.Status)
		}
		return nil
	})
	for range 3 {
		if r := h.sync(tokCred(tok), ctxA); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	// The token's signature was checked at its first use; the next two
	// were answered from the cache of accepted tokens, which the operator
	// sees on the admin /metrics.
	for name, want := range map[string]float64{"keygate_bearer_tokens_checked_total": 1, "keygate_bearer_tokens_cached_total": 2, "keygate_bearer_token_cache_entries": 1} {
		if got := h.metric(name, "issuer", "local"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if _, err := h.Keys.Revoke(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.Eventually(t, testkit.HangCheck, "the revoked key's token refused", func() error {
		if r := h.sync(tokCred(tok), ctxA); r.Status != 401 {
			return errStatus(r.Status)
		}
		return nil
	})
	t.Logf("refused %s after the revocation (file keystore: its watch)", time.Since(start))
	r := h.sync(tokCred(tok), ctxA)
	if r.Header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
		t.Errorf("WWW-Authenticate = %q", r.Header.Get("WWW-Authenticate"))
	}
}

type errStatus int

func (e errStatus) Error() string { return "status " + http.StatusText(int(e)) }

// signingKey reads the current private signing key from the file store,
// to forge tokens as only the issuer could.
func signingKey(t *testing.T, h *harness) (string, *ecdsa.PrivateKey) {
	t.Helper()
	st, err := server.TokenKeyStore(h.Cfg, nil).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.Keys {
		if k.Retiring.IsZero() {
			raw, err := x509.ParsePKCS8PrivateKey(k.Private)
			if err != nil {
				t.Fatal(err)
			}
			return k.Kid, raw.(*ecdsa.PrivateKey)
		}
	}
	t.Fatal("no signing key")
	return "", nil
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestOwnTokensRefusedWhenForged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	good := h.mustExchange(h.LiveID, h.LiveKey)
	kid, priv := signingKey(t, h)
	claimsOf := func(mod func(map[string]any)) map[string]any {
		now := time.Now().Unix()
		c := map[string]any{"iss": ownIssuer, "sub": h.LiveID, "client_id": h.LiveID, "aud": ownIssuer, "scope": "extraction:sync",
			"context": ctxA, "env": "live", "iat": now, "nbf": now, "exp": now + 300, "jti": "x"}
		if mod != nil {
			mod(c)
		}
		return c
	}
	sign := func(typ, kid string, c map[string]any) string {
		t.Helper()
		key, err := jwk.Import(priv)
		if err != nil {
			t.Fatal(err)
		}
		hdr := jws.NewHeaders()
		_ = hdr.Set(jws.TypeKey, typ)
		_ = hdr.Set(jws.KeyIDKey, kid)
		b, _ := json.Marshal(c)
		out, err := jws.Sign(b, jws.WithKey(jwa.ES256(), key, jws.WithProtectedHeaders(hdr)))
		if err != nil {
			t.Fatal(err)
		}
		// keygate accepts only the low-S half of its own signatures, as
		// its signer writes them (the high-S twin is refused).
		low, err := jwscheck.LowS("ES256", string(out))
		if err != nil {
			t.Fatal(err)
		}
		return low
	}
	// The control: a token forged with the real key is accepted, so each
	// refusal below is for the one thing changed.
	if r := h.sync(tokCred(sign("at+jwt", kid, claimsOf(nil))), ctxA); r.Status != 200 {
		t.Fatalf("control: %d %s", r.Status, r.Body)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	hsInput := b64(map[string]any{"alg": "HS256", "typ": "at+jwt", "kid": kid}) + "." + b64(claimsOf(nil))
	mac := hmac.New(sha256.New, pub)
	mac.Write([]byte(hsInput))
	hs256 := hsInput + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	parts := strings.Split(good, ".")
	cases := map[string]string{
		"alg none":                         b64(map[string]any{"alg": "none", "typ": "at+jwt", "kid": kid}) + "." + parts[1] + ".",
		"HS256 signed with the public key": hs256,
		"unknown kid":                      sign("at+jwt", "no-such-kid", claimsOf(nil)),
		"typ JWT":                          sign("JWT", kid, claimsOf(nil)),
		"expired":                          sign("at+jwt", kid, claimsOf(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })),
		"unknown key id": sign("at+jwt", kid, claimsOf(func(c map[string]any) {
			c["sub"], c["client_id"] = "key_00000000000000000000000000", "key_00000000000000000000000000"
		})),
		"another audience":               sign("at+jwt", kid, claimsOf(func(c map[string]any) { c["aud"] = "https://elsewhere.test" })),
		"another context than the key's": sign("at+jwt", kid, claimsOf(func(c map[string]any) { c["context"] = ctxB })),
		"tampered payload":               parts[0] + "." + b64(claimsOf(func(c map[string]any) { c["scope"] = "registry extraction:sync" })) + "." + parts[2],
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			r := h.sync(tokCred(tok), ctxA)
			if r.Status != 401 || !strings.Contains(r.Header.Get("WWW-Authenticate"), "invalid_token") {
				t.Errorf("%d %q %s", r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
			}
		})
	}
}

func TestDiscoveryAndJWKSWithoutKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	r := h.get(h.API, "/.well-known/oauth-authorization-server", cred{})
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatal(err)
	}
	if m["issuer"] != ownIssuer || m["token_endpoint"] != ownIssuer+"/oauth2/token" || m["jwks_uri"] != ownIssuer+"/.well-known/jwks.json" {
		t.Errorf("metadata %s", r.Body)
	}
	for _, f := range []string{"grant_types_supported", "token_endpoint_auth_methods_supported", "scopes_supported", "response_types_supported"} {
		if _, ok := m[f]; !ok {
			t.Errorf("metadata lacks %s", f)
		}
	}
	if g, _ := json.Marshal(m["grant_types_supported"]); string(g) != `["client_credentials"]` {
		t.Errorf("grant_types_supported %s", g)
	}
	j := h.get(h.API, "/.well-known/jwks.json", cred{})
	if j.Status != 200 || !strings.HasPrefix(j.Header.Get("Cache-Control"), "public, max-age=") {
		t.Fatalf("%d %q", j.Status, j.Header.Get("Cache-Control"))
	}
	set, err := jwk.Parse(j.Body)
	if err != nil || set.Len() != 1 {
		t.Fatalf("jwks: %v (%d keys)", err, set.Len())
	}
	k, _ := set.Key(0)
	if _, isPriv := k.(jwk.ECDSAPrivateKey); isPriv || strings.Contains(string(j.Body), `"d"`) {
		t.Error("the JWKS publishes a private key")
	}
	tok := h.mustExchange(h.LiveID, h.LiveKey)
	parsed, err := jwt.ParseString(tok, jwt.WithKeySet(set), jwt.WithIssuer(ownIssuer), jwt.WithAudience(ownIssuer))
	if err != nil {
		t.Fatalf("the token does not verify against the JWKS: %v", err)
	}
	if strings.Contains(tok, h.LiveKey) {
		t.Error("the token carries the key")
	}
	msg, _ := jws.Parse([]byte(tok))
	typ, _ := msg.Signatures()[0].ProtectedHeaders().Type()
	if typ != "at+jwt" {
		t.Errorf("typ %q", typ)
	}
	for _, c := range []string{"jti", "client_id", "scope", "env", "context"} {
		if !parsed.Has(c) {
			t.Errorf("token lacks %s", c)
		}
	}

	// The first signing key was made at start, and audited; no private
	// key reached the audit log or the log.
	auditLog, err := os.ReadFile(filepath.Join(filepath.Dir(h.Cfg.Keystore.File), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(auditLog), `"action":"token_key.rotate"`) || !strings.Contains(string(auditLog), "keygate:scheduled-rotation") {
		t.Errorf("no scheduled rotation in the audit log:\n%s", auditLog)
	}
	st, err := server.TokenKeyStore(h.Cfg, nil).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.Keys {
		p := base64.StdEncoding.EncodeToString(k.Private)
		raw, err := x509.ParsePKCS8PrivateKey(k.Private)
		if err != nil {
			t.Fatal(err)
		}
		d := base64.RawURLEncoding.EncodeToString(raw.(*ecdsa.PrivateKey).D.FillBytes(make([]byte, 32))) // the JWK "d"
		for where, text := range map[string]string{"audit log": string(auditLog), "log": h.Logs.String(), "JWKS": string(j.Body), "metadata": string(r.Body)} {
			if strings.Contains(text, p[len(p)/2:]) || strings.Contains(text, base64.RawURLEncoding.EncodeToString(k.Private)[40:80]) || strings.Contains(text, d) {
				t.Errorf("a private signing key appears in the %s", where)
			}
		}
	}
}

func TestSigningKeyRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	store := server.TokenKeyStore(h.Cfg, nil)
	before := h.mustExchange(h.LiveID, h.LiveKey)
	if _, err := tokenissuer.Rotate(context.Background(), store, h.Cfg.Auth.TokenEndpoint, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "both keys in the JWKS", func() error {
		set, err := jwk.Parse(h.get(h.API, "/.well-known/jwks.json", cred{}).Body)
		if err != nil || set.Len() != 2 {
			return errStatus(0)
		}
		return nil
	})
	after := h.mustExchange(h.LiveID, h.LiveKey)
	if kidOf(t, after) == kidOf(t, before) {
		t.Error("the new token is signed with the old key")
	}
	if r := h.sync(tokCred(before), ctxA); r.Status != 200 {
		t.Errorf("a token of the previous key during the overlap: %d", r.Status)
	}
	if _, err := tokenissuer.Rotate(context.Background(), store, h.Cfg.Auth.TokenEndpoint, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "tokens of withdrawn keys refused", func() error {
		if r := h.sync(tokCred(before), ctxA); r.Status != 401 {
			return errStatus(r.Status)
		}
		if r := h.sync(tokCred(after), ctxA); r.Status != 401 {
			return errStatus(r.Status)
		}
		return nil
	})
	if fi, err := os.Stat(tokenissuer.FilePathBeside(h.Cfg.Keystore.File)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("signing-key file: %v %v", fi.Mode(), err)
	}
	if filepath.Dir(tokenissuer.FilePathBeside(h.Cfg.Keystore.File)) != filepath.Dir(h.Cfg.Keystore.File) {
		t.Error("the signing-key file is not beside the keys file")
	}
}

func kidOf(t *testing.T, tok string) string {
	msg, err := jws.Parse([]byte(tok))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := msg.Signatures()[0].ProtectedHeaders().KeyID()
	return k
}

// twoReplicas runs two keygate replicas sharing one Redis (keystore,
// limiter and signing keys), with one extraction key issued in it.
func twoReplicas(t *testing.T, limit policy.Limit) (a, b *harness, admin *keystore.RedisAdmin, key string, rec keystore.Record) {
	rs := redistest.Start(t)
	admin = &keystore.RedisAdmin{Client: rs.Client(t), Prefix: "tk:"}
	key, rec, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	mod := withTokenEndpoint(func(c *config.Config) {
		useRedis(c, rs.Addr)
		c.Redis.KeyPrefix = "tk:"
		c.Keystore.Backend = "redis"
		c.RateLimit.Backend = "redis"
		c.RateLimit.Limits = map[string]policy.Limit{"live": limit, "test": limit}
	})
	a = newHarness(t, setup{mod: mod})
	b = newHarness(t, setup{mod: mod})
	a.secret(key)
	b.secret(key)
	return a, b, admin, key, rec
}

func TestTokenAcrossReplicasDiesWithinASecond(t *testing.T) {
	t.Parallel()
	a, b, admin, key, rec := twoReplicas(t, policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000})
	tok := a.mustExchange(rec.ID, key)
	b.secret(tok)
	if r := b.sync(tokCred(tok), ctxA); r.Status != 200 {
		t.Fatalf("a token minted on replica A, on replica B: %d %s", r.Status, r.Body)
	}
	if r := a.sync(tokCred(tok), ctxA); r.Status != 200 {
		t.Fatalf("on replica A: %d %s", r.Status, r.Body)
	}
	if _, err := admin.Revoke(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for _, h := range []*harness{a, b} {
		testkit.Eventually(t, testkit.HangCheck, "the token refused", func() error {
			if r := h.sync(tokCred(tok), ctxA); r.Status != 401 {
				return errStatus(r.Status)
			}
			return nil
		})
	}
	// The waits above are hang checks; how soon is logged, not asserted.
	t.Logf("refused on both replicas %s after the revocation", time.Since(revoked))
}

func TestKeyAndItsTokensShareOneBucket(t *testing.T) {
	t.Parallel()
	const burst = 6
	a, b, _, key, rec := twoReplicas(t, policy.Limit{Rate: 1, Per: time.Hour, Burst: burst})
	tokA := a.mustExchange(rec.ID, key)
	tokB := b.mustExchange(rec.ID, key)
	admitted := 0
	for i := range 4 * burst {
		h, c := a, keyCred(key)
		switch i % 3 {
		case 1:
			h, c = b, tokCred(tokA)
		case 2:
			h, c = a, tokCred(tokB)
		}
		r := h.sync(c, ctxA)
		switch r.Status {
		case 200:
			admitted++
		case 429:
		default:
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	if admitted != burst {
		t.Errorf("a key with burst %d and two of its tokens got %d admitted, want %d", burst, admitted, burst)
	}
}

// TestPythonClientAndIndependentJOSE: Authlib gets a token with
// client_secret_basic, PyJWT verifies it against the JWKS (typ, iss, aud,
// exp), and the token then passes /sync.
func TestPythonClientAndIndependentJOSE(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	// Debian's interpreter: python3-authlib and python3-jwt are Debian
	// packages (scripts/install-deps.sh), which another python3 earlier
	// in PATH (pyenv, a venv) would not see.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	ca := filepath.Join(h.Cfg.TLS.SelfSignedDir, "cert.pem")
	cmd := exec.Command(py, "testdata/oauth_client.py", h.API, ca, h.LiveID, ownIssuer)
	// requests prefers these to a session's verify when they are set.
	cmd.Env = append(os.Environ(), "REQUESTS_CA_BUNDLE="+ca, "CURL_CA_BUNDLE="+ca)
	cmd.Stdin = strings.NewReader(h.LiveKey + "\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Sub         string `json:"sub"`
		ClientID    string `json:"client_id"`
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	h.secret(got.AccessToken)
	if got.Sub != h.LiveID || got.ClientID != h.LiveID {
		t.Errorf("sub = %q, want %s", got.Sub, h.LiveID)
	}
	if r := h.sync(tokCred(got.AccessToken), ctxA); r.Status != 200 {
		t.Errorf("the Python client's token on /sync: %d %s", r.Status, r.Body)
	}
}

// TestTestKeyTokenHasTheTestQuota: a svc_test_ key's token carries env
// test, and the key and its token draw on one test quota.
func TestTestKeyTokenHasTheTestQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint(func(c *config.Config) {
		c.RateLimit.Limits["test"] = policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 3, Per: 24 * time.Hour}}
	})})
	k, rec, err := h.Keys.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Test, Context: ctxA, Name: "test key"})
	if err != nil {
		t.Fatal(err)
	}
	h.secret(k)
	var tok string
	testkit.Eventually(t, testkit.HangCheck, "the keystore sees the test key", func() error {
		var r result
		if tok, r = h.exchange(rec.ID, k); r.Status != 200 {
			return errStatus(r.Status)
		}
		return nil
	})
	parsed, err := jwt.ParseInsecure([]byte(tok))
	if err != nil {
		t.Fatal(err)
	}
	var env string
	if err := parsed.Get("env", &env); err != nil || env != "test" {
		t.Errorf("env claim %q (%v), want test", env, err)
	}
	for i, c := range []cred{tokCred(tok), keyCred(k), tokCred(tok)} {
		if r := h.sync(c, ctxA); r.Status != 200 {
			t.Fatalf("request %d of the quota of 3: %d %s", i+1, r.Status, r.Body)
		}
	}
	assertError(t, h.sync(tokCred(tok), ctxA), 429, "quota")
	assertError(t, h.sync(keyCred(k), ctxA), 429, "quota")
}

// signJWS signs claims with raw under alg, with typ and kid in the
// protected header.
func signJWS(t *testing.T, raw any, alg jwa.SignatureAlgorithm, typ, kid string, c map[string]any) string {
	t.Helper()
	key, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	hdr := jws.NewHeaders()
	_ = hdr.Set(jws.TypeKey, typ)
	_ = hdr.Set(jws.KeyIDKey, kid)
	b, _ := json.Marshal(c)
	out, err := jws.Sign(b, jws.WithKey(alg, key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		t.Fatal(err)
	}
	// The low-S half, the one spelling keygate accepts of its own ECDSA
	// tokens (an external issuer's are accepted in either).
	low, err := jwscheck.LowS(alg.String(), string(out))
	if err != nil {
		t.Fatal(err)
	}
	return low
}

// TestOwnAndExternalIssuersSideBySide: an external issuer's tokens keep
// working beside keygate's, and neither issuer's keys validate a token
// that names the other issuer.
func TestOwnAndExternalIssuersSideBySide(t *testing.T) {
	t.Parallel()
	es := ecSigner(t, 0, "ec-1")
	is := oauth2test.NewIssuer(t, es)
	h := newHarness(t, setup{mod: withTokenEndpoint(withOAuth(is))})
	external := h.mint(es, claims("partner", "extraction:sync"))
	if r := h.sync(tokCred(external), ctxA); r.Status != 200 || r.Echo.Identity["x-keygate-key-id"] != "oauth2:partner" {
		t.Fatalf("external token: %d %s", r.Status, r.Body)
	}
	own := h.mustExchange(h.LiveID, h.LiveKey)
	if r := h.sync(tokCred(own), ctxA); r.Status != 200 || r.Echo.Identity["x-keygate-key-id"] != h.LiveID {
		t.Fatalf("own token: %d %s", r.Status, r.Body)
	}
	kid, priv := signingKey(t, h)
	now := time.Now().Unix()
	ownClaims := map[string]any{"iss": ownIssuer, "sub": h.LiveID, "client_id": h.LiveID, "aud": ownIssuer, "scope": "extraction:sync",
		"context": ctxA, "env": "live", "iat": now, "nbf": now, "exp": now + 300, "jti": "j"}
	extClaims := map[string]any{"iss": testIssuer, "sub": "user-1", "client_id": "partner", "aud": "keygate", "scope": "extraction:sync",
		"context": ctxA, "iat": now, "nbf": now, "exp": now + 300}
	// Controls: each set of claims passes with its own issuer's key, so
	// each refusal below is for the key alone.
	for _, tok := range []string{signJWS(t, priv, jwa.ES256(), "at+jwt", kid, ownClaims), signJWS(t, es.Raw, jwa.ES256(), "JWT", "ec-1", extClaims)} {
		h.secret(tok)
		if r := h.sync(tokCred(tok), ctxA); r.Status != 200 {
			t.Fatalf("control: %d %s", r.Status, r.Body)
		}
	}
	cases := map[string]string{
		"keygate's claims signed by the external issuer's key under keygate's kid": signJWS(t, es.Raw, jwa.ES256(), "at+jwt", kid, ownClaims),
		"keygate's claims signed by the external issuer's key under its own kid":   signJWS(t, es.Raw, jwa.ES256(), "at+jwt", "ec-1", ownClaims),
		"external claims signed by keygate's key under keygate's kid":              signJWS(t, priv, jwa.ES256(), "JWT", kid, extClaims),
		"external claims signed by keygate's key under the external kid":           signJWS(t, priv, jwa.ES256(), "JWT", "ec-1", extClaims),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			h.secret(tok)
			if r := h.sync(tokCred(tok), ctxA); r.Status != 401 {
				t.Errorf("%d %s", r.Status, r.Body)
			}
		})
	}
	// Each issuer remembers the tokens it accepted (two each), and
	// answers their next use from that alone.
	for _, tok := range []string{external, own} {
		if r := h.sync(tokCred(tok), ctxA); r.Status != 200 {
			t.Fatalf("second use: %d %s", r.Status, r.Body)
		}
	}
	for _, issuer := range []string{"local", "external"} {
		if got := h.metric("keygate_bearer_tokens_cached_total", "issuer", issuer); got != 1 {
			t.Errorf("%s issuer: %v uses answered from its cache, want 1", issuer, got)
		}
		if got := h.metric("keygate_bearer_token_cache_entries", "issuer", issuer); got != 2 {
			t.Errorf("%s issuer: %v tokens in its cache, want 2", issuer, got)
		}
	}
}

// TestTokenHasItsKeysPermissions: a token may do what its key may do and
// no more. A read-only registry key's token reads, and its writes are
// 403 Forbidden and never forwarded.
func TestTokenHasItsKeysPermissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: withTokenEndpoint()})
	if _, err := h.Keys.UpdateKey(context.Background(), h.RegistryID, func(r keystore.Record) (keystore.Record, error) {
		r.Permissions = []string{policy.OpRegistryRead}
		return r, nil
	}); err != nil {
		t.Fatal(err)
	}
	write := func(c cred) result {
		req, err := http.NewRequest(http.MethodPost, h.API+"/registry/schemas", strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		c.apply(req)
		return h.do(req)
	}
	testkit.Eventually(t, testkit.HangCheck, "the key turns read-only", func() error {
		return testkit.Equal(write(keyCred(h.RegistryKey)).Status, http.StatusForbidden)
	})
	tok := h.mustExchange(h.RegistryID, h.RegistryKey)
	if r := h.get(h.API, "/registry/schemas", tokCred(tok)); r.Status != 200 {
		t.Errorf("GET with the read-only key's token: %d %s", r.Status, r.Body)
	}
	before := h.Registry.hits.Load()
	assertError(t, write(tokCred(tok)), 403, "Forbidden: this key lacks permission for this operation")
	if h.Registry.hits.Load() != before {
		t.Error("the token's refused write was forwarded")
	}
}
