package portal_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testsupport/browsertest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/portal"
)

// TestDeprecationBannerInChromium: with a sunset set, every page (the
// sign-in page included) carries the banner with the date, and once
// signed in its exchange command names the customer's own key id and the
// token endpoint; without one, no page has it. Screenshot:
// artifacts/screenshots/…deprecation-banner….
func TestDeprecationBannerInChromium(t *testing.T) {
	sunset := time.Date(2027, 6, 30, 0, 0, 0, 0, time.UTC)
	const tokenURL = "https://gateway.example.com/oauth2/token"
	f := newFixture(t, func(c *portal.Config, d *portal.Deps) {
		c.RateLimit.Burst = 100000
		d.Sunset, d.TokenURL, d.DeprecationLink = sunset, tokenURL, "https://docs.example.com/migrate"
	})
	plain := newFixture(t, nil)
	for _, fx := range []*fixture{f, plain} {
		u := fx.srv.URL + "/"
		resp, err := fx.srv.Client().Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fx == f
		if got := strings.Contains(string(b), `id="deprecation"`); got != want || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, banner %v, want %v", u, resp.StatusCode, got, want)
		}
	}

	ctx := browsertest.New(t, browsertest.TrustCerts(f.srv.Certificate()), browsertest.Timeout(2*time.Minute))
	link, _, err := f.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok_support"}, conA, "user@acme")
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Do(t, ctx, "sign in", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#continue")),
		chromedp.Click(chromedp.CSS("#continue")), chromedp.WaitVisible(chromedp.CSS(`a[href="/keys/new"].button`)))
	for _, page := range []string{"/keys", "/usage", "/keys/new"} {
		browsertest.Do(t, ctx, "open "+page, chromedp.Navigate(f.srv.URL+page), chromedp.WaitVisible(chromedp.CSS("#deprecation")))
		text := browsertest.Text(t, ctx, "#deprecation")
		for _, want := range []string{"30 June 2027", keyA + ":YOUR_KEY", tokenURL, "Bearer"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the banner lacks %q:\n%s", page, want, text)
			}
		}
		if strings.Contains(text, keyB) {
			t.Errorf("%s: the banner names another customer's key", page)
		}
	}
	browsertest.Do(t, ctx, "back to keys", chromedp.Navigate(f.srv.URL+"/keys"), chromedp.WaitVisible(chromedp.CSS("#deprecation")))
	browsertest.Screenshot(t, ctx, "deprecation-banner")
}
