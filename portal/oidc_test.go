package portal_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/oidctest"
	"github.com/keygate/keygate/portal"
)

// withOIDC starts a real OpenID provider for the fixture's portal and
// configures the portal to sign in through it, matching the email claim
// to the consumers' oidc_email metadata.
func withOIDC(t *testing.T, op **oidctest.Provider) func(*portal.Config, *portal.Deps) {
	return func(c *portal.Config, d *portal.Deps) {
		p := oidctest.Start(t, c.PublicURL+"/callback")
		*op = p
		c.OIDC.Issuer, c.OIDC.ClientID, c.OIDC.ClientSecretEnv = p.Issuer, p.ClientID, "PORTAL_SECRET"
		c.ConsumerClaim, c.ConsumerMetadataKey = "email", "oidc_email"
		d.Getenv = func(k string) string {
			if k == "PORTAL_SECRET" {
				return p.ClientSecret
			}
			return ""
		}
		d.HTTPClient = p.HTTPClient()
	}
}

// oidcSignIn goes through the provider's login form as a browser would
// (following redirects, with cookies) and returns the last page.
func oidcSignIn(t *testing.T, f *fixture, op *oidctest.Provider, user oidctest.User) (*http.Client, string, int, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	// A transport that trusts both the portal's and the provider's
	// certificates.
	tr := f.srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.RootCAs.AddCert(op.Cert)
	c := &http.Client{Transport: tr, Jar: jar}
	resp, err := c.Get(f.srv.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `name="username"`) {
		t.Fatalf("no login form at %s: %d", resp.Request.URL, resp.StatusCode)
	}
	id := resp.Request.URL.Query().Get("authRequestID")
	resp, err = c.PostForm(op.Issuer+"/login/username", url.Values{"id": {id}, "username": {user.Username}, "password": {user.Password}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return c, resp.Request.URL.Path, resp.StatusCode, string(body)
}

// Sign-in through a real OpenID provider (code flow with PKCE): a user
// whose email matches a consumer's metadata manages that consumer's keys;
// a user with no consumer sees a page saying so, and nothing else.
func TestOIDCSignIn(t *testing.T) {
	var op *oidctest.Provider
	f := newFixture(t, withOIDC(t, &op))
	if body := f.browser(t).get("/").body; !strings.Contains(body, `href="/login"`) {
		t.Fatal("the sign-in page offers no OIDC sign-in")
	}

	_, path, status, body := oidcSignIn(t, f, op, op.Users[0])
	if path != "/keys" || status != 200 || !strings.Contains(body, keyA) || !strings.Contains(body, "alice@acme.example") {
		t.Fatalf("alice ends at %s with %d; keys page with her key expected", path, status)
	}
	if strings.Contains(body, keyB) {
		t.Fatal("alice sees consumer B's key")
	}
	var audited bool
	for _, e := range f.audit.Events() {
		audited = audited || e.Action == "portal.sign_in" && e.Actor.ID == "portal:oidc:user-alice" && e.Target == conA && e.Changes["method"] == "oidc"
	}
	if !audited {
		t.Error("the OIDC sign-in is not audited with the subject")
	}

	c, path, status, body := oidcSignIn(t, f, op, op.Users[1])
	if status != http.StatusForbidden || !strings.Contains(body, "no account is linked") || !strings.Contains(body, "bob@nowhere.example") {
		t.Fatalf("bob (no consumer) ends at %s with %d", path, status)
	}
	resp, err := c.Get(f.srv.URL + "/keys")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/" {
		t.Fatalf("bob reaches %s: a user with no consumer must get no session", resp.Request.URL.Path)
	}
}

// A callback whose state was not begun in this browser, or is replayed,
// is refused; the provider's refusal is shown without echoing its text.
func TestOIDCCallbackRefusals(t *testing.T) {
	var op *oidctest.Provider
	f := newFixture(t, withOIDC(t, &op))
	b := f.browser(t)
	if p := b.get("/callback?state=forged&code=x"); p.status != http.StatusBadRequest {
		t.Fatalf("forged state: %d", p.status)
	}
	// Begin a sign-in in one browser and finish it in another: refused.
	p := b.get("/login")
	if p.status != http.StatusFound {
		t.Fatalf("/login: %d", p.status)
	}
	loc, _ := url.Parse(p.header.Get("Location"))
	q := loc.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		t.Fatalf("authorization request lacks PKCE S256, nonce or state: %s", loc.RawQuery)
	}
	if p := f.browser(t).get("/callback?code=x&state=" + url.QueryEscape(q.Get("state"))); p.status != http.StatusBadRequest {
		t.Fatalf("state from another browser: %d", p.status)
	}
	if p := b.get("/callback?error=access_denied%3Cscript%3E&state=" + url.QueryEscape(q.Get("state"))); p.status != http.StatusUnauthorized || strings.Contains(p.body, "<script>") {
		t.Fatalf("provider refusal: %d", p.status)
	}
}
