package portal_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/testsupport/browsertest"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/standin"
)

const conRO = "con_4e5f607182930415" // limited to registry:read

// permGateway serves the API over the keystore at path, resolving
// permissions, in front of a stand-in registry.
func permGateway(t *testing.T, path string) string {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	res, err := cfg.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	store, err := keystore.OpenFile(keystore.FileConfig{Path: path, Limits: res})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	keys, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(standin.Handler{Name: "registry"})
	t.Cleanup(up.Close)
	gw, err := gateway.New(gateway.Config{
		Upstreams: gateway.UpstreamsConfig{
			Extraction: gateway.UpstreamConfig{Targets: []string{up.URL}},
			Registry:   gateway.UpstreamConfig{Targets: []string{up.URL}},
		},
		MaxBodyBytes: 1 << 20,
		Limits:       cfg.Limits,
	}, gateway.Deps{Auth: keys, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv.URL
}

func callRegistry(t *testing.T, api, method, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, api+"/registry/x", strings.NewReader(`{}`))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPortalPermissionsInChromium: a customer creates a read-only
// registry key in the portal and it works for GET and is 403 for POST
// through the gateway; the form offers only what the consumer allows; a
// crafted create or narrow that asks for more is refused; a key can be
// narrowed. Screenshots go to artifacts/screenshots/.
func TestPortalPermissionsInChromium(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	created := time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)
	keystoretest.WriteFile(t, path, nil, []keystore.Consumer{
		{ID: conA, Name: "Acme", Contexts: []string{ctxA}, CreatedAt: created},
		{ID: conRO, Name: "Readers", Permissions: []string{"registry:read"}, CreatedAt: created},
	})
	f := newFixtureAt(t, path, func(c *portal.Config, _ *portal.Deps) { c.RateLimit.Burst = 100000 })
	api := permGateway(t, path)

	ctx := browsertest.New(t, browsertest.TrustCerts(f.srv.Certificate()), browsertest.Timeout(3*time.Minute))
	shot := func(name string) { browsertest.Screenshot(t, ctx, name) }
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	eval := func(what, js string) string { return browsertest.Get(t, ctx, what, chromedp.Evaluate[string](js)) }
	signIn := func(consumer string) {
		link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok_support"}, consumer, "user@"+consumer)
		if err != nil {
			t.Fatal(err)
		}
		browsertest.Do(t, ctx, "sign in as "+consumer, chromedp.Navigate(link), chromedp.WaitVisible(css("#continue")),
			chromedp.Click(css("#continue")), chromedp.WaitVisible(css(`a[href="/keys/new"].button`)))
	}
	bodyText := func() string { return eval("page text", `document.body.innerText`) }
	offered := func() string {
		return eval("offered operations", `Array.from(document.querySelectorAll('#operations input[name=permissions]')).map(i => i.value).join(",")`)
	}
	submit := func(what, action string, fields [][2]string) {
		t.Helper()
		js := `const f = document.createElement('form'); f.method = 'post'; f.action = ` + fmt.Sprintf("%q", action) + `;
			const add = (k, v) => { const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); };
			add('csrf', document.querySelector('input[name=csrf]').value);`
		for _, kv := range fields {
			js += fmt.Sprintf("add(%q, %q);", kv[0], kv[1])
		}
		js += `window.__kgOld = 1; document.body.appendChild(f); f.submit(); "sent"`
		eval(what, js)
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__kgOld ? "old" : document.readyState`))
			if err == nil && st == "complete" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no new page", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	keyRE := regexp.MustCompile(`svc_live_[A-Za-z0-9]+`)

	// Acme (no narrowing) creates a read-only registry key.
	signIn(conA)
	browsertest.Do(t, ctx, "open the form", chromedp.Navigate(f.srv.URL+"/keys/new"), chromedp.WaitVisible(css("#operations")))
	if got := offered(); got != "extraction:sync,registry:read,registry:write" {
		t.Errorf("offered %q to a consumer that narrows nothing", got)
	}
	browsertest.Do(t, ctx, "choose a read-only registry key",
		chromedp.Click(css(`input[name=product][value=registry]`)),
		chromedp.SendKeys(css("#name"), "read-only"),
		chromedp.Click(css(`input[name=permissions][value="registry:read"]`)))
	shot("read-only-key-form")
	browsertest.Do(t, ctx, "create it", chromedp.Click(css("#create")), chromedp.WaitVisible(css("#newkey")))
	key := browsertest.Get(t, ctx, "read the key", chromedp.Value(css("#newkey")))
	if !keyRE.MatchString(key) {
		t.Fatalf("no key shown: %q", key)
	}
	id := regexp.MustCompile(`key_[0-9a-f]{16}`).FindString(browsertest.Text(t, ctx, ".newkey label"))
	shot("read-only-key-created")
	// It works for GET and is 403 for POST, once the gateway has it.
	deadline := time.Now().Add(3 * time.Second)
	for {
		s, b := callRegistry(t, api, http.MethodGet, key)
		if s == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET with the new key: %d %s", s, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s, b := callRegistry(t, api, http.MethodPost, key); s != 403 || !strings.Contains(b, "Forbidden: this key lacks permission for this operation") {
		t.Errorf("POST with the read-only key: %d %s", s, b)
	}

	// Narrowing it offers only what it has; a crafted widening is refused.
	browsertest.Do(t, ctx, "open the narrowing page", chromedp.Navigate(f.srv.URL+"/keys/"+id+"/permissions"), chromedp.WaitVisible(css("#narrow")))
	if got := offered(); got != "registry:read" {
		t.Errorf("narrowing offers %q, want registry:read only", got)
	}
	shot("narrow-form")
	submit("widen by hand", "/keys/"+id+"/permissions", [][2]string{{"permissions", "registry:read"}, {"permissions", "registry:write"}})
	if txt := bodyText(); !strings.Contains(txt, "cannot be given registry:write") {
		t.Errorf("a crafted widening was not refused:\n%s", txt)
	}
	shot("widen-refused")
	// Narrow the addresses instead: it applies.
	browsertest.Do(t, ctx, "narrow the addresses", chromedp.Navigate(f.srv.URL+"/keys/"+id+"/permissions"), chromedp.WaitVisible(css("#narrow")),
		chromedp.SendKeys(css("#allowed_cidrs"), "10.0.0.0/8"), chromedp.Click(css("#narrow")), chromedp.WaitVisible(css(".notice.ok")))
	shot("narrowed")
	rec, err := f.store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rec {
		if r.ID == id && (strings.Join(r.AllowedCIDRs, ",") != "10.0.0.0/8" || strings.Join(r.Permissions, ",") != "registry:read") {
			t.Errorf("after narrowing: permissions %v, allowed_cidrs %v", r.Permissions, r.AllowedCIDRs)
		}
	}

	// A consumer limited to registry:read is offered only that, and a
	// crafted form for registry:write is refused.
	signIn(conRO)
	browsertest.Do(t, ctx, "open the form", chromedp.Navigate(f.srv.URL+"/keys/new"), chromedp.WaitVisible(css("#operations")))
	if got := offered(); got != "registry:read" {
		t.Errorf("offered %q to a registry:read consumer", got)
	}
	shot("narrow-consumer-form")
	before := f.count("key.issue")
	submit("craft a registry:write key", "/keys", [][2]string{{"product", "registry"}, {"env", "live"}, {"name", "sneaky"}, {"permissions", "registry:write"}})
	if txt := bodyText(); !strings.Contains(txt, "cannot get registry:write") {
		t.Errorf("a crafted create beyond the consumer was not refused:\n%s", txt)
	}
	if f.count("key.issue") != before {
		t.Error("a key was issued for the crafted form")
	}
	shot("crafted-create-refused")
}
