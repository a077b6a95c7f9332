package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/usage"
)

// A delegated sign-in link works once, then is refused; it expires after
// 15 minutes.
func TestDelegatedLinkWorksOnceAndExpires(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	link := func() string {
		l, exp, err := f.portal.SessionLink(ctx, keyops.Actor{ID: "tok_support"}, conA, "alice@acme")
		if err != nil {
			t.Fatal(err)
		}
		if got := exp.Sub(f.clock.Now()); got != 15*time.Minute {
			t.Fatalf("link valid for %s, want 15m", got)
		}
		if !strings.HasPrefix(l, f.srv.URL+"/session/") {
			t.Fatalf("link %q", l)
		}
		return strings.TrimPrefix(l, f.srv.URL)
	}

	l := link()
	b := f.browser(t)
	// Opening the link (a GET, which scanners and prefetchers also do)
	// shows a page with a button; it does not use the link up.
	for range 2 {
		if p := b.get(l); p.status != http.StatusOK || !strings.Contains(p.body, `action="`+l+`"`) || p.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET of the link: %d, want the continue page", p.status)
		}
	}
	if p := b.post(l); p.status != http.StatusSeeOther || p.header.Get("Location") != "/keys" {
		t.Fatalf("first use: %d %s", p.status, p.header.Get("Location"))
	}
	if p := b.get("/keys"); p.status != 200 || !strings.Contains(p.body, keyA) {
		t.Fatalf("signed in: %d, keys page lacks %s", p.status, keyA)
	}
	if p := f.browser(t).post(l); p.status != http.StatusGone {
		t.Fatalf("second use: %d, want 410", p.status)
	}

	l = link()
	f.clock.Add(15*time.Minute - time.Second)
	if p := f.browser(t).post(l); p.status != http.StatusSeeOther {
		t.Fatalf("at 14m59s: %d, want 303", p.status)
	}
	l = link()
	f.clock.Add(15 * time.Minute)
	if p := f.browser(t).post(l); p.status != http.StatusGone {
		t.Fatalf("at 15m: %d, want 410", p.status)
	}
	if p := f.browser(t).post("/session/made-up"); p.status != http.StatusGone {
		t.Fatalf("made-up link: %d, want 410", p.status)
	}
	// A link for a consumer that does not exist is refused when made.
	if _, _, err := f.portal.SessionLink(ctx, keyops.Actor{ID: "tok_support"}, "con_ffffffffffffffff", ""); err == nil {
		t.Fatal("a link for an unknown consumer was made")
	}
	// Made and used links are audited with who asked and who signed in.
	var made, signedIn int
	for _, e := range f.audit.Events() {
		switch e.Action {
		case "portal.session_link":
			made++
			if e.Actor.ID != "tok_support" {
				t.Errorf("link audited as %q", e.Actor.ID)
			}
		case "portal.sign_in":
			signedIn++
			if e.Actor.ID != "portal:delegated:alice@acme" || e.Target != conA {
				t.Errorf("sign-in audited as %q on %q", e.Actor.ID, e.Target)
			}
		}
	}
	if made != 3 || signedIn != 2 {
		t.Errorf("audit: %d links made, %d sign-ins; want 3 and 2", made, signedIn)
	}
	// The link's secret is in no log line.
	if strings.Contains(f.logs.String(), strings.TrimPrefix(l, "/session/")) {
		t.Error("a sign-in link's secret was logged")
	}
}

// Consumer A's session cannot list, rotate, revoke or see the usage of
// consumer B's keys, through the forms or hand-made requests.
func TestIsolationBetweenConsumers(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	csrf := a.csrf()
	cases := []struct {
		name   string
		do     func() page
		status int
	}{
		{"list shows no key of B", func() page { return a.get("/keys") }, 200},
		{"rotate form of B's key", func() page { return a.get("/keys/" + keyB + "/rotate") }, 404},
		{"rotate B's key", func() page { return a.post("/keys/"+keyB+"/rotate", "csrf", csrf, "grace", "0s") }, 404},
		{"revoke form of B's key", func() page { return a.get("/keys/" + keyB + "/revoke") }, 404},
		{"revoke B's key", func() page { return a.post("/keys/"+keyB+"/revoke", "csrf", csrf, "confirm", keyB) }, 404},
		{"usage of B's key", func() page { return a.get("/usage?key=" + keyB) }, 404},
		{"limit request for B's key", func() page {
			return a.post("/limits/request", "csrf", csrf, "key", keyB, "rate", "100", "per", "1s", "reason", "x")
		}, 400},
		{"key in B's context", func() page {
			return a.post("/keys", "csrf", csrf, "product", "extraction", "env", "live", "context", ctxB)
		}, 403},
		{"an id that exists nowhere", func() page { return a.get("/keys/key_ffffffffffffffff/rotate") }, 404},
		{"a path-traversing id", func() page { return a.get("/keys/..%2f" + keyB + "/rotate") }, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.do()
			if p.status != tc.status {
				t.Fatalf("status %d, want %d", p.status, tc.status)
			}
			if strings.Contains(p.body, keyB) && tc.status != 400 || strings.Contains(p.body, "globex") || strings.Contains(p.body, ctxB) && tc.status != 400 {
				t.Fatalf("the page shows consumer B's data:\n%s", p.body)
			}
		})
	}
	// B's key is untouched and nothing was audited against it.
	rec, err := f.store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rec {
		if r.ID == keyB && r.Status != keystore.Active {
			t.Fatalf("B's key is %s", r.Status)
		}
		if r.Consumer == conB && r.ID != keyB {
			t.Fatalf("a key %s was made for B", r.ID)
		}
	}
	for _, e := range f.audit.Events() {
		if e.Target == keyB || e.Target == conB {
			t.Fatalf("audited an action on B: %+v", e)
		}
	}
	// A form field naming another consumer is not read: the key is A's.
	p := a.post("/keys", "csrf", csrf, "product", "extraction", "env", "live", "context", ctxA, "consumer", conB)
	if p.status != http.StatusSeeOther {
		t.Fatalf("create: %d", p.status)
	}
	recs, _ := f.store.List(context.Background())
	last := recs[len(recs)-1]
	if last.Consumer != conA {
		t.Fatalf("the new key belongs to %q", last.Consumer)
	}
}

// A POST without the session's CSRF token, with another session's, or
// sent from another site is refused with 403; the session cookie carries
// Secure, HttpOnly and SameSite=Lax.
func TestCSRFAndCookieFlags(t *testing.T) {
	f := newFixture(t, nil)
	link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok"}, conA, "")
	if err != nil {
		t.Fatal(err)
	}
	a := f.browser(t)
	p := a.post(strings.TrimPrefix(link, f.srv.URL))
	sc := p.header.Get("Set-Cookie")
	for _, want := range []string{"__Host-keygate_portal=", "Path=/", "Secure", "HttpOnly", "SameSite=Lax", "Max-Age="} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %q", sc, want)
		}
	}
	b := f.signIn(t, conA) // another session of the same consumer
	otherCSRF := b.csrf()
	own := a.csrf()

	cross := func(path string, pairs ...string) page {
		req, _ := http.NewRequest(http.MethodPost, a.base+path, strings.NewReader("csrf="+own+"&grace=0s"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		return a.do(req)
	}
	cases := []struct {
		name string
		do   func() page
	}{
		{"no token", func() page { return a.post("/keys/"+keyA+"/revoke", "confirm", keyA) }},
		{"empty token", func() page { return a.post("/keys/"+keyA+"/revoke", "csrf", "", "confirm", keyA) }},
		{"another session's token", func() page { return a.post("/keys/"+keyA+"/revoke", "csrf", otherCSRF, "confirm", keyA) }},
		{"token in the query only", func() page { return a.post("/keys/"+keyA+"/revoke?csrf="+own, "confirm", keyA) }},
		{"create without token", func() page { return a.post("/keys", "product", "extraction", "env", "live", "context", ctxA) }},
		{"sign out without token", func() page { return a.post("/logout") }},
		{"cross-site with the right token", func() page { return cross("/keys/" + keyA + "/rotate") }},
		{"no session at all", func() page { return f.browser(t).post("/keys/"+keyA+"/revoke", "csrf", own, "confirm", keyA) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if p := tc.do(); p.status != http.StatusForbidden {
				t.Fatalf("status %d, want 403", p.status)
			}
		})
	}
	recs, _ := f.store.List(context.Background())
	if len(recs) != 2 || recs[0].Status != keystore.Active {
		t.Fatalf("a refused POST changed the store: %+v", recs)
	}
	// With its own token, the same revoke works.
	if p := a.post("/keys/"+keyA+"/revoke", "csrf", own, "confirm", keyA); p.status != http.StatusSeeOther {
		t.Fatalf("revoke with the token: %d", p.status)
	}
}

// Every page carries the security headers; signed-in pages are not
// cached.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	for _, path := range []string{"/", "/keys", "/keys/new", "/usage", "/limits/request", "/keys/" + keyA + "/rotate", "/nope", "/assets/portal.css"} {
		p := a.get(path)
		h := p.header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: Referrer-Policy %q, nosniff %q", path, h.Get("Referrer-Policy"), h.Get("X-Content-Type-Options"))
		}
		if strings.HasPrefix(path, "/keys") || path == "/usage" {
			if h.Get("Cache-Control") != "no-store" {
				t.Errorf("%s: Cache-Control %q", path, h.Get("Cache-Control"))
			}
		}
		if strings.Contains(p.body, "style=") || strings.Contains(p.body, "<style") || strings.Contains(p.body, "<script>") {
			t.Errorf("%s: inline style or script, which the CSP blocks", path)
		}
	}
}

// A new key appears on exactly one response, marked no-store, and in no
// log line and no audit entry; it works as a key (its hash is stored).
func TestNewKeyShownOnce(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	csrf := a.csrf()
	p := a.post("/keys", "csrf", csrf, "product", "extraction", "env", "live", "name", "billing", "context", ctxA)
	key := a.followIssued(p)
	recs, _ := f.store.List(context.Background())
	var rec keystore.Record
	for _, r := range recs {
		if r.Hash == keystore.HashKey(key) {
			rec = r
		}
	}
	if rec.ID == "" || rec.Consumer != conA || rec.Context != ctxA || rec.Name != "billing" {
		t.Fatalf("the shown key is not the stored one: %+v", rec)
	}
	// Rotation shows the next one once too.
	key2 := a.followIssued(a.post("/keys/"+rec.ID+"/rotate", "csrf", csrf, "grace", "1h0m0s"))
	if key2 == key {
		t.Fatal("rotation showed the old key")
	}
	for _, path := range []string{"/keys", "/usage", "/keys/new", "/limits/request", "/keys/" + rec.ID + "/revoke"} {
		if body := a.get(path).body; strings.Contains(body, key) || strings.Contains(body, key2) {
			t.Errorf("%s shows a key again", path)
		}
	}
	if logs := f.logs.String(); strings.Contains(logs, key) || strings.Contains(logs, key2) {
		t.Error("a key was logged")
	}
	b, _ := json.Marshal(f.audit.Events())
	if strings.Contains(string(b), key) || strings.Contains(string(b), key2) {
		t.Error("a key is in the audit log")
	}
	var issued, rotated bool
	for _, e := range f.audit.Events() {
		issued = issued || e.Action == "key.issue" && e.Actor.ID == "portal:delegated:user@"+conA
		rotated = rotated || e.Action == "key.rotate" && e.Target == rec.ID
	}
	if !issued || !rotated {
		t.Errorf("audit: issue %v, rotate %v (with the signed-in subject as actor)", issued, rotated)
	}
}

// Sessions end after their idle timeout and their absolute lifetime, and
// at sign-out.
func TestSessionExpiry(t *testing.T) {
	f := newFixture(t, func(c *portal.Config, _ *portal.Deps) {
		c.Session.IdleTimeout = 10 * time.Minute
		c.Session.MaxAge = 30 * time.Minute
	})
	a := f.signIn(t, conA)
	for range 3 { // used every 9 minutes: alive until the absolute expiry
		f.clock.Add(9 * time.Minute)
		if p := a.get("/keys"); p.status != 200 {
			t.Fatalf("active session: %d", p.status)
		}
	}
	f.clock.Add(4 * time.Minute) // 31 minutes in
	if p := a.get("/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("past max_age: %d, want a redirect to sign in", p.status)
	}
	b := f.signIn(t, conA)
	f.clock.Add(10 * time.Minute)
	if p := b.get("/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("idle 10m: %d", p.status)
	}
	c := f.signIn(t, conA)
	if p := c.post("/logout", "csrf", c.csrf()); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", p.status)
	}
	if p := c.get("/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d", p.status)
	}
}

// Portal requests are limited per client address.
func TestRateLimited(t *testing.T) {
	f := newFixture(t, func(c *portal.Config, _ *portal.Deps) {
		c.RateLimit.PerAddress, c.RateLimit.Burst = 1, 5
	})
	b := f.browser(t)
	var limited int
	for range 10 {
		p := b.get("/")
		if p.status == http.StatusTooManyRequests {
			limited++
			if p.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}
	}
	if limited != 5 {
		t.Fatalf("%d of 10 requests limited, want 5 (burst 5, clock stopped)", limited)
	}
}

// The development sign-in exists in demo mode only.
func TestDevSignInOnlyInDemoMode(t *testing.T) {
	f := newFixture(t, nil)
	if p := f.browser(t).post("/dev-login"); p.status != http.StatusNotFound {
		t.Fatalf("outside demo mode: %d, want 404", p.status)
	}
	if body := f.browser(t).get("/").body; strings.Contains(body, "dev-login") {
		t.Fatal("the sign-in page offers the development sign-in outside demo mode")
	}
	d := newFixture(t, func(_ *portal.Config, deps *portal.Deps) { deps.DemoConsumer = conA })
	b := d.browser(t)
	if body := b.get("/").body; !strings.Contains(body, "Development sign-in") {
		t.Fatal("demo sign-in page is not labelled")
	}
	if p := b.post("/dev-login"); p.status != http.StatusSeeOther {
		t.Fatalf("demo sign-in: %d", p.status)
	}
	if p := b.get("/keys"); !strings.Contains(p.body, keyA) {
		t.Fatal("demo session does not see the demo consumer's key")
	}
}

// A limit request is audited with the signed-in subject and sent to the
// webhook as JSON.
func TestLimitRequest(t *testing.T) {
	got := make(chan portal.LimitRequest, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var lr portal.LimitRequest
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &lr); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("webhook body %s: %v", b, err)
		}
		got <- lr
	}))
	defer hook.Close()
	f := newFixture(t, func(c *portal.Config, _ *portal.Deps) { c.LimitRequestWebhook = hook.URL })
	a := f.signIn(t, conA)
	csrf := a.csrf()
	if p := a.post("/limits/request", "csrf", csrf, "rate", "50 per second"); p.status != 400 || !strings.Contains(p.body, "why") {
		t.Fatalf("without a reason: %d", p.status)
	}
	if p := a.post("/limits/request", "csrf", csrf, "rate", "50 per second", "reason", "launch <b>week</b>"); p.status != 400 || strings.Contains(p.body, "<b>week</b>") {
		t.Fatalf("free-text rate: %d (or the form echoes unescaped HTML)", p.status)
	}
	p := a.post("/limits/request", "csrf", csrf, "key", keyA, "rate", "50", "per", "1s", "quota", "100000", "quota_per", "24h0m0s", "reason", "launch <b>week</b>")
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/limits/request?done=sent" {
		t.Fatalf("request: %d %s", p.status, p.header.Get("Location"))
	}
	if p := a.get(p.header.Get("Location")); p.status != 200 || !strings.Contains(p.body, "recorded") {
		t.Fatalf("after the request: %d", p.status)
	}
	lr := <-got
	if lr.Event != "limit_request" || lr.Consumer != conA || lr.Key != keyA || lr.Rate != "50/1s" || lr.Quota != "100000/24h0m0s" || lr.Subject != "delegated:user@"+conA {
		t.Fatalf("webhook got %+v", lr)
	}
	var audited bool
	for _, e := range f.audit.Events() {
		if e.Action == "portal.limit_request" && e.Target == keyA && e.Actor.ID == "portal:delegated:user@"+conA && e.Changes["quota"] == "100000/24h0m0s" {
			audited = true
		}
	}
	if !audited {
		t.Fatal("the limit request is not in the audit log")
	}
}

// The usage page shows the consumer's admitted and refused requests over
// 24 hours and 7 days as SVG charts, one key's when chosen, never another
// consumer's; beside them, each active key's limits.
func TestUsagePage(t *testing.T) {
	f := newFixture(t, nil)
	now := f.clock.Now()
	old := now.Add(-3 * 24 * time.Hour)
	if err := f.usage.Flush(context.Background(), []usage.Delta{{ID: keyA, Counts: usage.Counts{Admitted: 30, Context: 1}, LastUsed: old}}, old); err != nil {
		t.Fatal(err)
	}
	err := f.usage.Flush(context.Background(), []usage.Delta{
		{ID: keyA, Counts: usage.Counts{Admitted: 7, Rate: 2}, LastUsed: now},
		{ID: keyB, Counts: usage.Counts{Admitted: 1000, Quota: 50}, LastUsed: now},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	a := f.signIn(t, conA)
	p := a.get("/usage")
	if p.status != 200 {
		t.Fatalf("usage: %d", p.status)
	}
	for _, want := range []string{
		`id="totals-24h">7 admitted, 2 refused`,
		`id="totals-7d">37 admitted, 3 refused`,
		`<svg`, `role="img"`,
		"Rate</dt><dd>", keyA,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("usage page lacks %q", want)
		}
	}
	if strings.Count(p.body, "<svg") != 2 {
		t.Errorf("%d charts, want 2 (24 hours and 7 days)", strings.Count(p.body, "<svg"))
	}
	if strings.Contains(p.body, "1000") || strings.Contains(p.body, "1,000") || strings.Contains(p.body, keyB) {
		t.Error("the usage page shows consumer B's usage")
	}
	if p := a.get("/usage?key=" + keyA); !strings.Contains(p.body, `id="totals-24h">7 admitted, 2 refused`) {
		t.Error("one key's usage is not shown")
	}
}

// A session is limited on its own, whatever its address's allowance.
func TestRateLimitedPerSession(t *testing.T) {
	f := newFixture(t, func(c *portal.Config, _ *portal.Deps) {
		c.RateLimit.PerAddress, c.RateLimit.PerSession, c.RateLimit.Burst = 1000, 0.001, 3
	})
	a := f.signIn(t, conA)
	statuses := []int{}
	for range 5 {
		f.clock.Add(10 * time.Millisecond) // refills the address's bucket, hardly the session's
		statuses = append(statuses, a.get("/keys").status)
	}
	if fmt.Sprint(statuses) != "[200 200 200 429 429]" {
		t.Fatalf("statuses %v, want three pages then 429", statuses)
	}
	// Another session of the same address is not held back.
	f.clock.Add(10 * time.Millisecond)
	if p := f.signIn(t, conA).get("/keys"); p.status != 200 {
		t.Fatalf("another session: %d", p.status)
	}
}

// Another site cannot sign a browser in with a link of its choosing (login
// CSRF): a cross-site POST of a link is refused and does not use it up.
func TestDelegatedLinkRefusesCrossSitePost(t *testing.T) {
	f := newFixture(t, nil)
	link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok"}, conA, "")
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(link, f.srv.URL)
	b := f.browser(t)
	for _, h := range [][2]string{{"Origin", "https://evil.example"}, {"Sec-Fetch-Site", "cross-site"}} {
		req, _ := http.NewRequest(http.MethodPost, b.base+path, nil)
		req.Header.Set(h[0], h[1])
		if p := b.do(req); p.status != http.StatusForbidden {
			t.Fatalf("%s %s: %d, want 403", h[0], h[1], p.status)
		}
	}
	if p := b.post(path); p.status != http.StatusSeeOther {
		t.Fatalf("the link after the refused attempts: %d, want it still usable", p.status)
	}
}
