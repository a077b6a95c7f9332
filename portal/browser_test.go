package portal_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testsupport/browsertest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/usage"
)

// TestPortalInChromium drives the portal in headless chromium as a
// customer would, reloads included: a reload after a create, a rotation
// or a limit request does nothing more (one audit entry each) and never
// shows a key again; a rotated key shows its expiry and no Rotate, and a
// crafted rotate POST gets a 409 page; a consumer without contexts gets
// no context field and a crafted extraction key POST is refused; a POST
// with Origin http://… (the portal is HTTPS) is 403; and the usage page
// fits a 390 px wide phone. Screenshots go to artifacts/screenshots/.
func TestPortalInChromium(t *testing.T) {
	// The fixture's clock stands still, so the portal's request limits
	// would never refill: a browser loads each page's assets too.
	f := contextsFixture(t, func(c *portal.Config, _ *portal.Deps) { c.RateLimit.Burst = 100000 })
	now := f.clock.Now()
	var deltas []usage.Delta
	for h := range 7 * 24 {
		at := now.Add(-time.Duration(h) * time.Hour)
		deltas = append(deltas, usage.Delta{ID: keyA, Counts: usage.Counts{Admitted: int64(40 + h%17*9), Rate: int64(h % 5)}, LastUsed: at})
		if err := f.usage.Flush(context.Background(), deltas[len(deltas)-1:], at); err != nil {
			t.Fatal(err)
		}
	}
	base := f.srv.URL
	ctx := browsertest.New(t, browsertest.TrustCerts(f.srv.Certificate()), browsertest.Timeout(3*time.Minute))
	shot := func(name string) { browsertest.Screenshot(t, ctx, name) }
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	eval := func(what, js string) string {
		return browsertest.Get(t, ctx, what, chromedp.Evaluate[string](js))
	}
	signIn := func(consumer string) {
		link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok_support"}, consumer, "user@"+consumer)
		if err != nil {
			t.Fatal(err)
		}
		browsertest.Do(t, ctx, "sign in as "+consumer, chromedp.Navigate(link), chromedp.WaitVisible(css("#continue")),
			chromedp.Click(css("#continue")), chromedp.WaitVisible(css(`a[href="/keys/new"].button`)))
	}
	location := func() string { return browsertest.Get(t, ctx, "location", chromedp.Location()) }
	bodyText := func() string { return eval("page text", `document.body.innerText`) }
	// newDocument runs js, which leaves the page (a reload, a form
	// submission), and waits until the next document has loaded: the
	// old one is marked, so it cannot be mistaken for the new.
	newDocument := func(what, js string) {
		t.Helper()
		eval(what, `window.__kgOld = 1; setTimeout(() => { `+js+` }, 0); "leaving"`)
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__kgOld ? "old" : document.readyState`))
			if err == nil && st == "complete" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no new page (%q, %v)", what, st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// reload is the browser's reload (location.reload(), as F5).
	reload := func(what string) { newDocument(what, "location.reload()") }
	// post submits a form the page did not offer, with the session's
	// CSRF token: what a customer could craft by hand.
	post := func(action string, fields map[string]string) {
		js := `const f = document.createElement('form'); f.method = 'post'; f.action = ` + fmt.Sprintf("%q", action) + `;
			const add = (k, v) => { const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); };
			add('csrf', document.querySelector('input[name=csrf]').value);`
		for k, v := range fields {
			js += fmt.Sprintf("add(%q, %q);", k, v)
		}
		js += `document.body.appendChild(f); f.submit();`
		newDocument("submit a crafted form to "+action, js)
	}
	has := func(sel string) bool {
		return eval("look for "+sel, `String(document.querySelector(`+fmt.Sprintf("%q", sel)+`) !== null)`) == "true"
	}
	start := time.Now()
	t.Cleanup(func() { t.Logf("browser steps took %s", time.Since(start)) })
	keyRE := regexp.MustCompile(`svc_(live|test)_[A-Za-z0-9]+`)

	signIn(conA)

	// Create, then reload the page that showed the key.
	browsertest.Do(t, ctx, "create a key", chromedp.Navigate(base+"/keys/new"), chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "reload test"), chromedp.Click(css("#create")), chromedp.WaitVisible(css("#newkey")))
	key := browsertest.Get(t, ctx, "read the key", chromedp.Value(css("#newkey")))
	if !keyRE.MatchString(key) || strings.Contains(location(), key) || !strings.Contains(location(), "/issued/") {
		t.Fatalf("key %q shown at %s", key, location())
	}
	id := regexp.MustCompile(`key_[0-9a-f]{16}`).FindString(browsertest.Text(t, ctx, ".newkey label"))
	shot("key-created")
	reload("reload the key page")
	if !has(".notice.ok") {
		t.Fatalf("%s: no notice at %s", "reload the key page", location())
	}
	if strings.Contains(bodyText(), key) || !strings.HasSuffix(location(), "/keys?done=shown") {
		t.Fatalf("after a reload: %s shows the key again: %v", location(), strings.Contains(bodyText(), key))
	}
	shot("key-page-reloaded")
	reload("reload again")
	if !has(".notice.ok") {
		t.Fatalf("%s: no notice at %s:\n%s", "reload again", location(), bodyText())
	}
	if n := f.count("key.issue"); n != 1 {
		t.Fatalf("%d keys issued, want 1", n)
	}

	// Rotate it, then reload.
	browsertest.Do(t, ctx, "rotate", chromedp.Navigate(base+"/keys/"+id+"/rotate"), chromedp.WaitVisible(css("#rotate")),
		chromedp.Click(css(`input[name=grace][value="1h0m0s"]`)), chromedp.Click(css("#rotate")), chromedp.WaitVisible(css("#newkey")))
	key2 := browsertest.Get(t, ctx, "read the new key", chromedp.Value(css("#newkey")))
	if !keyRE.MatchString(key2) || key2 == key {
		t.Fatalf("rotation showed %q", key2)
	}
	reload("reload the rotated key page")
	if !has(".notice.ok") {
		t.Fatalf("%s: no notice at %s", "reload the rotated key page", location())
	}
	reload("reload again")
	if !has(".notice.ok") {
		t.Fatalf("%s: no notice at %s:\n%s", "reload again", location(), bodyText())
	}
	if strings.Contains(bodyText(), key2) {
		t.Fatal("a reload shows the rotated key again")
	}
	if n := f.count("key.rotate"); n != 1 {
		t.Fatalf("%d rotations, want 1", n)
	}

	// The rotated key: "expiring at …", no Rotate.
	browsertest.Do(t, ctx, "keys", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("tr#"+id)))
	status := browsertest.Text(t, ctx, "tr#"+id+" .status")
	rotateLinks := eval("count Rotate links", `String(document.querySelectorAll('tr#`+id+` a[href$="/rotate"]').length)`)
	if !strings.HasPrefix(status, "expiring at 20") || rotateLinks != "0" {
		t.Fatalf("rotated key: status %q, %s Rotate links", status, rotateLinks)
	}
	shot("keys-with-rotated-key")
	post("/keys/"+id+"/rotate", map[string]string{"grace": "0s"})
	if h1 := browsertest.Text(t, ctx, "h1"); h1 != "Already rotated" || !strings.Contains(bodyText(), "rotate key_") {
		t.Fatalf("a crafted rotate POST: %q\n%s", h1, bodyText())
	}
	shot("crafted-rotate-409")
	if n := f.count("key.rotate"); n != 1 {
		t.Fatalf("%d rotations after the crafted POST, want 1", n)
	}

	// A limit request, then reloads.
	browsertest.Do(t, ctx, "limit request", chromedp.Navigate(base+"/limits/request"), chromedp.WaitVisible(css("#send")),
		chromedp.SendKeys(css("#rate"), "50"), chromedp.SendKeys(css("#reason"), "launch week"),
		chromedp.Click(css("#send")), chromedp.WaitVisible(css(".notice.ok")))
	shot("limit-request-sent")
	for range 2 {
		reload("reload after the limit request")
		if !has(".notice.ok") {
			t.Fatalf("%s: no notice at %s", "reload after the limit request", location())
		}
	}
	if n := f.count("portal.limit_request"); n != 1 {
		t.Fatalf("%d limit requests, want 1", n)
	}

	// Origin http://… on the HTTPS portal: refused.
	setOrigin := func(origin string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			h := network.Headers{}
			if origin != "" {
				h["Origin"] = origin
			}
			_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h})
			return chromedp.Void{}, err
		}
	}
	browsertest.Do(t, ctx, "send Origin http://", chromedp.Navigate(base+"/limits/request"), chromedp.WaitVisible(css("#send")),
		setOrigin("http://"+strings.TrimPrefix(base, "https://")))
	post("/limits/request", map[string]string{"rate": "60", "per": "1s", "reason": "from http"})
	if h1 := browsertest.Text(t, ctx, "h1"); h1 != "Request refused" {
		t.Fatalf("a POST with Origin http://: %q", h1)
	}
	shot("origin-http-403")
	browsertest.Do(t, ctx, "stop sending Origin", setOrigin(""))
	if n := f.count("portal.limit_request"); n != 1 {
		t.Fatalf("%d limit requests after the http:// POST, want 1", n)
	}

	// The usage page on a 390 px wide phone.
	browsertest.Do(t, ctx, "usage at 390 px", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(base+"/usage"), chromedp.WaitVisible(css("#totals-24h")))
	width := eval("page width", `String(Math.max(document.documentElement.scrollWidth, document.body.scrollWidth))`)
	label := eval("axis label size", `String(Math.round(document.querySelector('.chart-text').getBoundingClientRect().height))`)
	shot("usage-390px")
	if width != "390" {
		t.Errorf("the usage page is %s px wide at a 390 px viewport", width)
	}
	var px int
	fmt.Sscan(label, &px)
	if px < 10 {
		t.Errorf("axis labels are %d px high on a phone", px)
	}
	browsertest.Do(t, ctx, "keys at 390 px", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css("tr#"+id)))
	shot("keys-390px")
	// The other pages fit too (a wide table scrolls inside its box).
	for _, path := range []string{"/keys", "/keys/new", "/limits/request", "/keys/" + id + "/revoke", "/usage?key=" + keyA} {
		browsertest.Do(t, ctx, path+" at 390 px", chromedp.Navigate(base+path), chromedp.WaitVisible(css("footer")))
		if w := eval("page width", `String(Math.max(document.documentElement.scrollWidth, document.body.scrollWidth))`); w != "390" {
			t.Errorf("%s is %s px wide at a 390 px viewport", path, w)
		}
	}
	browsertest.Do(t, ctx, "desktop again", chromedp.EmulateViewport(1280, 900))

	// A consumer without contexts: no context field, extraction refused.
	signIn(conNone)
	browsertest.Do(t, ctx, "new key without contexts", chromedp.Navigate(base+"/keys/new"), chromedp.WaitVisible(css("#no-context")))
	if n := eval("context fields", `String(document.querySelectorAll('[name=context]').length)`); n != "0" {
		t.Fatalf("%s context fields offered to a consumer without contexts", n)
	}
	if d := eval("extraction disabled", `String(document.querySelector('input[value=extraction]').disabled)`); d != "true" {
		t.Fatal("extraction is offered to a consumer without contexts")
	}
	shot("new-key-no-contexts")
	post("/keys", map[string]string{"product": "extraction", "env": "live", "context": ctxC})
	if p := browsertest.Text(t, ctx, ".notice.error"); !strings.Contains(p, "no processing context") {
		t.Fatalf("a crafted extraction key POST: %q", p)
	}
	shot("crafted-extraction-key-refused")
	recs, _ := f.store.List(context.Background())
	for _, r := range recs {
		if r.Consumer == conNone && r.Product == keystore.Extraction {
			t.Fatalf("an extraction key was made for a consumer without contexts: %+v", r)
		}
	}
	if logs := f.logs.String(); strings.Contains(logs, key) || strings.Contains(logs, key2) || strings.Contains(logs, `"level":"error"`) {
		t.Fatal("a key or an error reached the log")
	}
}
