package browsertest_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testsupport/browsertest"
)

// The browser trusts the test certificate it is given, fills and submits
// a form, and saves a screenshot.
func TestBrowserFillsAFormOverHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.Method == http.MethodPost {
			_ = r.ParseForm()
			_, _ = w.Write([]byte(`<!doctype html><p id="out">hello ` + strings.ReplaceAll(r.PostForm.Get("name"), "<", "") + `</p>`))
			return
		}
		_, _ = w.Write([]byte(`<!doctype html><form method="post"><input id="name" name="name"><button id="go">Go</button></form>`))
	}))
	defer srv.Close()
	ctx := browsertest.New(t, browsertest.TrustCerts(srv.Certificate()))
	browsertest.Do(t, ctx, "fill the form",
		chromedp.Navigate(srv.URL),
		chromedp.SendKeys(chromedp.CSS("#name"), "keygate"),
		chromedp.Click(chromedp.CSS("#go")),
		chromedp.WaitVisible(chromedp.CSS("#out")),
	)
	if got := browsertest.Text(t, ctx, "#out"); got != "hello keygate" {
		t.Fatalf("page says %q", got)
	}
	path := browsertest.Screenshot(t, ctx, "result")
	if b, err := os.ReadFile(path); err != nil || len(b) < 100 || string(b[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is not a PNG: %v", path, err)
	}
}

// An untrusted certificate is refused: the browser trusts only what it
// was given.
func TestBrowserRefusesAnUntrustedCertificate(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("secret page")) }))
	defer srv.Close()
	ctx := browsertest.New(t)
	err := chromedp.Do(ctx, chromedp.Navigate(srv.URL))
	if err == nil {
		body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		if strings.Contains(body, "secret page") {
			t.Fatal("the browser loaded a page with an untrusted certificate")
		}
	}
}
