package tokenissuer_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/tokenissuer"
)

var scopes = map[string]string{"extraction": "extraction:sync", "registry": "registry"}

const ctxA = "11111111-2222-4333-8444-555555555555"

type fixture struct {
	iss     *tokenissuer.Issuer
	key, id string
	admin   *keystore.FileAdmin
	store   tokenissuer.Store
	cfg     tokenissuer.Config
}

// newFixture is an issuer over a real file keystore holding one
// extraction key.
func newFixture(t testing.TB, alg string) *fixture {
	t.Helper()
	return newFixtureWith(t, alg, nil)
}

// newFixtureWith is newFixture with the issuer's clock (nil: time.Now) and
// a keystore that reloads its file when it changes.
func newFixtureWith(t testing.TB, alg string, clock func() time.Time) *fixture {
	t.Helper()
	dir := t.TempDir()
	admin := &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}
	key, rec, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keystore.OpenFile(keystore.FileConfig{Path: admin.Path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	cfg := tokenissuer.DefaultConfig()
	cfg.Enabled, cfg.Issuer, cfg.Algorithm = true, "https://keygate.test", alg
	store := tokenissuer.NewFileStore(tokenissuer.FilePathBeside(admin.Path))
	iss, err := tokenissuer.New(context.Background(), cfg, tokenissuer.Deps{
		Store: store, Keys: ks,
		ProductScopes: scopes, ContextClaim: "context", Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iss.Close() })
	return &fixture{iss: iss, key: key, id: rec.ID, admin: admin, store: store, cfg: cfg}
}

func (f *fixture) token(t testing.TB) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, tokenissuer.TokenPath, strings.NewReader("grant_type=client_credentials"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.SetBasicAuth(url.QueryEscape(f.id), url.QueryEscape(f.key))
	w := httptest.NewRecorder()
	f.iss.TokenHandler().ServeHTTP(w, r)
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &body) != nil {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	return body.AccessToken
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := tokenissuer.DefaultConfig()
	ok.Enabled, ok.Issuer = true, "https://gw.example.com"
	cases := map[string]struct {
		mod  func(*tokenissuer.Config)
		want string // "" for valid
	}{
		"defaults, disabled":          {mod: func(c *tokenissuer.Config) { c.Enabled, c.Issuer = false, "" }},
		"enabled with an issuer":      {},
		"EdDSA":                       {mod: func(c *tokenissuer.Config) { c.Algorithm = "EdDSA" }},
		"ttl over an hour":            {mod: func(c *tokenissuer.Config) { c.TTL = 2 * time.Hour }, want: "ttl:"},
		"ttl under a minute":          {mod: func(c *tokenissuer.Config) { c.TTL = time.Second }, want: "ttl:"},
		"RS256":                       {mod: func(c *tokenissuer.Config) { c.Algorithm = "RS256" }, want: "algorithm:"},
		"HS256":                       {mod: func(c *tokenissuer.Config) { c.Algorithm = "HS256" }, want: "algorithm:"},
		"rotation shorter than 2 ttl": {mod: func(c *tokenissuer.Config) { c.Rotation = 15 * time.Minute }, want: "rotation:"},
		"http issuer":                 {mod: func(c *tokenissuer.Config) { c.Issuer = "http://gw.example.com" }, want: "issuer:"},
		"no issuer":                   {mod: func(c *tokenissuer.Config) { c.Issuer = "" }, want: "issuer:"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := ok
			if c.mod != nil {
				c.mod(&cfg)
			}
			err := cfg.Validate()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)) {
				t.Errorf("Validate() = %v, want %q", err, c.want)
			}
		})
	}
}

// TestEdDSATokens: with algorithm EdDSA the token is signed EdDSA, the
// JWKS publishes an OKP public key, and the token validates.
func TestEdDSATokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "EdDSA")
	tok := f.token(t)
	v, err := f.iss.Verify(context.Background(), tok)
	if err != nil || !v.OK || v.Principal.ID != f.id || v.Principal.Method != "bearer" || v.Principal.Context != ctxA {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
	w := httptest.NewRecorder()
	f.iss.JWKSHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, tokenissuer.JWKSPath, nil))
	set, err := jwk.Parse(w.Body.Bytes())
	if err != nil || set.Len() != 1 {
		t.Fatalf("%v %s", err, w.Body)
	}
	k, _ := set.Key(0)
	if k.KeyType().String() != "OKP" || strings.Contains(w.Body.String(), `"d"`) {
		t.Errorf("JWKS %s", w.Body)
	}
}

// FuzzVerify: no byte string makes Verify panic, fail with an error (the
// keystore is fine) or accept anything but a token the issuer minted.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f, "ES256")
	good := fx.token(f)
	f.Add(good)
	f.Add(good[:len(good)-2])
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := fx.iss.Verify(context.Background(), raw)
		if err != nil {
			t.Fatalf("error: %v", err)
		}
		if v.OK && raw != good {
			t.Fatalf("accepted a token it did not mint: %q", raw)
		}
	})
}

// FuzzTokenRequest: any body, content type and Authorization header get
// an RFC 6749 answer: 200, or a JSON error with one of the grant's codes
// and its status, never a 5xx.
func FuzzTokenRequest(f *testing.F) {
	fx := newFixture(f, "ES256")
	f.Add("application/x-www-form-urlencoded", "grant_type=client_credentials", "Basic "+basic(fx.id, fx.key))
	f.Add("application/x-www-form-urlencoded", "grant_type=client_credentials&client_id="+fx.id+"&client_secret="+fx.key, "")
	f.Add("application/json", `{"grant_type":"client_credentials"}`, "Basic eA==")
	f.Add("application/x-www-form-urlencoded; charset=utf-8", "grant_type=password&scope=%zz", "Basic "+basic(fx.id, "x"))
	f.Add("multipart/form-data; boundary=x", "--x--", "Bearer x")
	valid := map[string]int{"invalid_request": 400, "invalid_client": 401, "unsupported_grant_type": 400, "invalid_scope": 400}
	f.Fuzz(func(t *testing.T, ct, body, authz string) {
		r := httptest.NewRequest(http.MethodPost, tokenissuer.TokenPath, strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		w := httptest.NewRecorder()
		fx.iss.TokenHandler().ServeHTTP(w, r)
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Fatal("no Cache-Control: no-store")
		}
		if w.Code == 200 {
			return
		}
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
			t.Fatalf("%d %q", w.Code, w.Body)
		}
		if want, ok := valid[e.Error]; !ok || (want != w.Code && w.Code != 413) {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), fx.key) {
			t.Fatal("the key echoed")
		}
	})
}

func basic(id, secret string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestPreviousKeyWithdrawnAfterItsTokensExpire: after a rotation the JWKS
// holds both keys, until the last token the old key signed has expired
// (ttl plus leeway); then only the new one.
func TestPreviousKeyWithdrawnAfterItsTokensExpire(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	admin := &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}
	ks, err := keystore.OpenFile(keystore.FileConfig{Path: admin.Path})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	var at atomic.Int64 // the clock, also read by the background refresh
	start := time.Now()
	at.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, at.Load()) }
	cfg := tokenissuer.DefaultConfig()
	cfg.Enabled, cfg.Issuer = true, "https://keygate.test"
	store := tokenissuer.NewFileStore(tokenissuer.FilePathBeside(admin.Path))
	iss, err := tokenissuer.New(context.Background(), cfg, tokenissuer.Deps{Store: store, Keys: ks, ProductScopes: scopes, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer iss.Close()
	keys := func() int {
		w := httptest.NewRecorder()
		iss.JWKSHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, tokenissuer.JWKSPath, nil))
		set, err := jwk.Parse(w.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return set.Len()
	}
	if _, err := tokenissuer.Rotate(context.Background(), store, cfg, false, start); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		after time.Duration
		want  int
	}{{0, 2}, {cfg.TTL, 2}, {cfg.TTL + 40*time.Second, 1}}
	for _, s := range steps {
		at.Store(start.Add(s.after).UnixNano())
		if err := iss.RefreshNow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := keys(); got != s.want {
			t.Errorf("%s after the rotation: %d keys published, want %d", s.after, got, s.want)
		}
	}
	// A scheduled rotation once the signing key is rotation old.
	at.Store(start.Add(cfg.Rotation + time.Second).UnixNano())
	if err := iss.RefreshNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := keys(); got != 2 {
		t.Errorf("after the scheduled rotation: %d keys, want 2", got)
	}
}
