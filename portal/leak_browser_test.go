package portal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testsupport/browsertest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/ratelimit"
)

// TestLeakBannerInChromium: a key that secret scanning revoked carries a
// banner on the keys page, "found public at <url> on <date>; revoked", and
// its row says so; another customer's page has no banner. Screenshot:
// artifacts/screenshots/…leak-banner….
func TestLeakBannerInChromium(t *testing.T) {
	f := newFixture(t, func(c *portal.Config, _ *portal.Deps) { c.RateLimit.Burst = 100000 })
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	ops, err := keyops.New(keyops.Config{Store: f.store, Limits: res, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	const where = "https://github.com/acme/billing/blob/4f2a9c1/settings.py"
	if _, taken, err := ops.ReportLeak(context.Background(), keyops.Actor{ID: "secret-scanning:github"}, keyops.Leak{KeyID: keyA, URL: where, Source: "content", Action: keyops.LeakRevoke}); err != nil || taken != keyops.LeakRevoke {
		t.Fatalf("report: %v %v", taken, err)
	}
	date := f.clock.Now().UTC().Format("2006-01-02")

	ctx := browsertest.New(t, browsertest.TrustCerts(f.srv.Certificate()), browsertest.Timeout(2*time.Minute))
	signIn := func(consumer string) {
		link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok_support"}, consumer, "user@"+consumer)
		if err != nil {
			t.Fatal(err)
		}
		browsertest.Do(t, ctx, "sign in as "+consumer, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#continue")),
			chromedp.Click(chromedp.CSS("#continue")), chromedp.WaitVisible(chromedp.CSS(`a[href="/keys/new"].button`)))
	}
	signIn(conA)
	browsertest.Do(t, ctx, "open keys", chromedp.Navigate(f.srv.URL+"/keys"), chromedp.WaitVisible(chromedp.CSS("#leak-"+keyA)))
	text := browsertest.Text(t, ctx, "#leak-"+keyA)
	for _, want := range []string{keyA, "found public at " + where, "on " + date, "; revoked"} {
		if !strings.Contains(text, want) {
			t.Errorf("the banner lacks %q: %q", want, text)
		}
	}
	if row := browsertest.Text(t, ctx, "tr#"+keyA); !strings.Contains(row, "found public") || !strings.Contains(row, "revoked") {
		t.Errorf("the key's row: %q", row)
	}
	browsertest.Screenshot(t, ctx, "leak-banner")

	ctxB := browsertest.New(t, browsertest.TrustCerts(f.srv.Certificate()), browsertest.Timeout(2*time.Minute))
	ctx = ctxB
	signIn(conB)
	browsertest.Do(t, ctx, "open keys as B", chromedp.Navigate(f.srv.URL+"/keys"), chromedp.WaitVisible(chromedp.CSS("tr#"+keyB)))
	if page := browsertest.Text(t, ctx, "body"); strings.Contains(page, "found public") || strings.Contains(page, where) {
		t.Errorf("another customer sees the banner: %q", page)
	}
}
