package portal_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/keystoretest"

	"github.com/keygate/keygate/internal/testsupport/audittest"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/usage"
)

// The fixture: two consumers, each with one key, bound to its own context.
const (
	ctxA = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"
	ctxB = "0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d"
	conA = "con_0a1b2c3d4e5f6071"
	conB = "con_1b2c3d4e5f607182"
	keyA = "key_3c4d5e6f708192a3"
	keyB = "key_4d5e6f708192a3b4"
)

func writeKeystore(t *testing.T, path string) {
	t.Helper()
	created := time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)
	consumers := []keystore.Consumer{
		{ID: conA, Name: "Acme", Metadata: map[string]string{"org": "acme", "oidc_email": "alice@acme.example"}, Contexts: []string{ctxA}, CreatedAt: created},
		{ID: conB, Name: "Globex", Metadata: map[string]string{"org": "globex"}, Contexts: []string{ctxB}, CreatedAt: created},
	}
	keys := []keystore.Record{
		{ID: keyA, Name: "acme-prod", Hash: keystore.HashKey("svc_live_fixtureA"), Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, CreatedAt: created, Status: keystore.Active, Consumer: conA},
		{ID: keyB, Name: "globex-prod", Hash: keystore.HashKey("svc_live_fixtureB"), Product: keystore.Extraction, Env: keystore.Live, Context: ctxB, CreatedAt: created, Status: keystore.Active, Consumer: conB},
	}
	keystoretest.WriteFile(t, path, keys, consumers)
}

type fixture struct {
	portal *portal.Portal
	srv    *httptest.Server
	store  *keystore.FileAdmin
	audit  *audittest.Recorder
	logs   *testkit.SyncBuffer
	clock  *testkit.Clock
	usage  *usage.FileStore
}

// newFixture serves a portal over HTTPS on loopback, with the fixture's
// keystore, a settable clock, a recorded audit log and a captured log.
func newFixture(t *testing.T, mod func(*portal.Config, *portal.Deps)) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeystore(t, path)
	return newFixtureAt(t, path, mod)
}

// sharedStore is a second replica of f: another portal over the same
// keystore file.
func sharedStore(t *testing.T, f *fixture, mod func(*portal.Config, *portal.Deps)) *fixture {
	t.Helper()
	return newFixtureAt(t, f.store.Path, mod)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func newFixtureAt(t *testing.T, path string, mod func(*portal.Config, *portal.Deps)) *fixture {
	t.Helper()
	f := &fixture{store: &keystore.FileAdmin{Path: path}, audit: &audittest.Recorder{}, logs: &testkit.SyncBuffer{},
		clock: testkit.NewClock(time.Now().UTC())}
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	f.usage = &usage.FileStore{Path: path + ".usage.json"}
	ops, err := keyops.New(keyops.Config{Store: f.store, Limits: res, Auditor: f.audit, Now: f.clock.Now, Usage: f.usage})
	if err != nil {
		t.Fatal(err)
	}
	cfg := portal.DefaultConfig()
	cfg.Enabled = true
	f.srv = httptest.NewUnstartedServer(nil)
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	cfg.PublicURL = f.srv.URL
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(f.logs), zap.DebugLevel))
	deps := portal.Deps{Ops: ops, Auditor: f.audit, Logger: logger, Now: f.clock.Now}
	if mod != nil {
		mod(&cfg, &deps)
	}
	f.portal, err = portal.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Config.Handler = f.portal.Handler()
	return f
}

// browser is an HTTP client with its own cookie jar that does not follow
// redirects, so that tests see each answer.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
}

func (f *fixture) browser(t *testing.T) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := f.srv.Client()
	c = &http.Client{Transport: c.Transport, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{t: t, c: c, base: f.srv.URL}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(body)}
}

func (b *browser) get(path string) page {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

// post sends a form; pairs are name, value, name, value...
func (b *browser) post(path string, pairs ...string) page {
	b.t.Helper()
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		v.Add(pairs[i], pairs[i+1])
	}
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the session's CSRF token from a page with a form.
func (b *browser) csrf() string {
	b.t.Helper()
	p := b.get("/keys")
	m := csrfRE.FindStringSubmatch(p.body)
	if m == nil {
		b.t.Fatalf("no CSRF token on /keys (status %d)", p.status)
	}
	return m[1]
}

// signIn opens a delegated sign-in link for consumer.
func (f *fixture) signIn(t *testing.T, consumer string) *browser {
	t.Helper()
	link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok_support"}, consumer, "user@"+consumer)
	if err != nil {
		t.Fatal(err)
	}
	b := f.browser(t)
	p := b.post(strings.TrimPrefix(link, f.srv.URL))
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/keys" {
		t.Fatalf("sign-in link: %d %s", p.status, p.header.Get("Location"))
	}
	return b
}

var newKeyRE = regexp.MustCompile(`svc_(live|test)_[A-Za-z0-9_]+`)

// followIssued follows the redirect that answers a create or rotate to
// the page that shows the new key, checks that page (no-store, the key
// once), and returns the key. The page shows it once: a second visit
// goes to the keys page.
func (b *browser) followIssued(p page) string {
	b.t.Helper()
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/issued/") {
		b.t.Fatalf("want a 303 to /issued/…, got %d %q\n%s", p.status, loc, p.body)
	}
	if newKeyRE.MatchString(loc) || newKeyRE.MatchString(p.body) {
		b.t.Fatal("the redirect carries the key")
	}
	shown := b.get(loc)
	key := newKeyRE.FindString(shown.body)
	if shown.status != http.StatusOK || key == "" || shown.header.Get("Cache-Control") != "no-store" {
		b.t.Fatalf("issued page: %d, Cache-Control %q, key shown %v", shown.status, shown.header.Get("Cache-Control"), key != "")
	}
	if again := b.get(loc); again.status != http.StatusSeeOther || again.header.Get("Location") != "/keys?done=shown" || strings.Contains(again.body, key) {
		b.t.Fatalf("second visit of the issued page: %d %q", again.status, again.header.Get("Location"))
	}
	return key
}
