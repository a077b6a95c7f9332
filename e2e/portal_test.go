package e2e

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testsupport/browsertest"
	"github.com/keygate/keygate/internal/testsupport/oidctest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestPortalInABrowser drives the self-service portal of the real binary
// in headless chromium: sign in through a real OpenID provider, create a
// key and read it from the page, use it on /sync (200), rotate it (the new
// key works, the old one until its grace period ends), revoke it (401),
// and see the requests made on the usage page. Each page is saved as a
// screenshot under artifacts/screenshots/.
func TestPortalInABrowser(t *testing.T) {
	portalAddr := testkit.FreeAddr(t)
	portalURL := "https://" + portalAddr
	op := oidctest.Start(t, portalURL+"/callback")
	alice := op.Users[0]
	dir := t.TempDir()
	opCA := filepath.Join(dir, "provider.pem")
	if err := os.WriteFile(opCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: op.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KEYGATE_TEST_PORTAL_SECRET", op.ClientSecret)
	g := startGateway(t, gwOpts{skipStart: true, extra: fmt.Sprintf(`portal:
  enabled: true
  listen: %q
  public_url: %q
  oidc:
    issuer: %q
    client_id: %q
    client_secret_env: KEYGATE_TEST_PORTAL_SECRET
    ca_file: %q
    name: Example SSO
  consumer_claim: email
  consumer_metadata_key: oidc_email
  rotation_graces: [0s, 5s, 1h]
`, portalAddr, portalURL, op.Issuer, op.ClientID, opCA)})
	if _, errOut, err := g.keygate("consumers", "create", "--name", "Acme", "--context", ctxA, "--meta", "oidc_email="+alice.Email); err != nil {
		t.Fatalf("consumers create: %v\n%s", err, errOut)
	}
	g.start()

	certPEM, err := os.ReadFile(filepath.Join(g.dir, "tls", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	gwCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.New(t, browsertest.TrustCerts(gwCert, op.Cert), browsertest.Timeout(3*time.Minute))
	shot := func(name string) { browsertest.Screenshot(t, ctx, name) }
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// Sign in through the provider's own login page.
	browsertest.Do(t, ctx, "open the portal", chromedp.Navigate(portalURL), chromedp.WaitVisible(css(`a[href="/login"]`)))
	shot("sign-in")
	browsertest.Do(t, ctx, "go to the provider", chromedp.Click(css(`a[href="/login"]`)), chromedp.WaitVisible(css(oidctest.LoginUsernameSelector)))
	shot("provider-login")
	browsertest.Do(t, ctx, "sign in as alice",
		chromedp.SendKeys(css(oidctest.LoginUsernameSelector), alice.Username),
		chromedp.SendKeys(css(oidctest.LoginPasswordSelector), alice.Password),
		chromedp.Click(css(oidctest.LoginSubmitSelector)),
		chromedp.WaitVisible(css(`a[href="/keys/new"].button`)),
	)
	if who := browsertest.Text(t, ctx, ".who"); who != alice.Email {
		t.Fatalf("signed in as %q, want %q", who, alice.Email)
	}
	shot("keys-empty")

	// Create a key; it is on the page once.
	create := func(name string) (key, id string) {
		browsertest.Do(t, ctx, "create a key",
			chromedp.Navigate(portalURL+"/keys/new"),
			chromedp.WaitVisible(css("#create")),
			chromedp.SendKeys(css("#name"), name),
			chromedp.Click(css("#create")),
			chromedp.WaitVisible(css("#newkey")),
		)
		key = browsertest.Get(t, ctx, "read the key", chromedp.Value(css("#newkey")))
		label := browsertest.Text(t, ctx, ".newkey label")
		id = regexp.MustCompile(`key_[0-9a-f]{16}`).FindString(label)
		if !strings.HasPrefix(key, "svc_live_") || id == "" {
			t.Fatalf("key %q, id %q", key, id)
		}
		return key, id
	}
	key1, id1 := create("billing service")
	shot("key-created")

	admitted, refused := 0, 0
	sync := func(key, contextID string, want int) {
		t.Helper()
		st, body, _ := g.post(key, contextID, []byte("%PDF-1.7 portal test"))
		if st != want {
			t.Fatalf("/sync: %d, want %d: %s", st, want, body)
		}
		switch st {
		case http.StatusOK:
			admitted++
		case http.StatusForbidden:
			refused++
		}
	}
	sync(key1, ctxA, http.StatusOK)

	// Rotate with a 5-second grace period.
	browsertest.Do(t, ctx, "rotate",
		chromedp.Navigate(portalURL+"/keys"),
		chromedp.WaitVisible(css(`tr#`+id1)),
	)
	shot("keys")
	browsertest.Do(t, ctx, "rotate",
		chromedp.Click(css(`a[href="/keys/`+id1+`/rotate"]`)),
		chromedp.WaitVisible(css("#rotate")),
		chromedp.Click(css(`input[name=grace][value="5s"]`)),
	)
	shot("rotate")
	rotatedAt := time.Now() // the rotation is made after this instant
	browsertest.Do(t, ctx, "rotate", chromedp.Click(css("#rotate")), chromedp.WaitVisible(css("#newkey")))
	key2 := browsertest.Get(t, ctx, "read the new key", chromedp.Value(css("#newkey")))
	id2 := regexp.MustCompile(`key_[0-9a-f]{16}`).FindString(browsertest.Text(t, ctx, ".newkey label"))
	if key2 == key1 || !strings.HasPrefix(key2, "svc_live_") || id2 == "" || id2 == id1 {
		t.Fatalf("rotation showed key %q id %q", key2, id2)
	}
	shot("key-rotated")
	sync(key2, ctxA, http.StatusOK)
	if time.Since(rotatedAt) < 4*time.Second {
		sync(key1, ctxA, http.StatusOK) // within the grace period
	}
	eventually(t, testkit.HangCheck, func() string {
		if st, _, _ := g.post(key1, ctxA, []byte("x")); st != http.StatusUnauthorized {
			if st == http.StatusOK {
				admitted++
			}
			return fmt.Sprintf("the old key still gets %d after its grace period", st)
		}
		return ""
	})
	if time.Since(rotatedAt) < 5*time.Second {
		t.Fatalf("the old key stopped %s after the rotation, before its 5 s grace period", time.Since(rotatedAt))
	}
	sync(key2, ctxB, http.StatusForbidden) // a refusal, for the usage page

	// The usage page shows the requests made (flushed once a second),
	// beside the active key's limits.
	want := fmt.Sprintf("%d admitted, %d refused", admitted, refused)
	var got string
	eventually(t, testkit.HangCheck, func() string {
		browsertest.Do(t, ctx, "usage", chromedp.Navigate(portalURL+"/usage"), chromedp.WaitVisible(css("#totals-24h")))
		if got = browsertest.Text(t, ctx, "#totals-24h"); got != want {
			return fmt.Sprintf("usage page says %q, want %q", got, want)
		}
		return ""
	})
	if !strings.Contains(browsertest.Text(t, ctx, "#limit-"+id2), "Rate") {
		t.Error("the usage page shows no limit for the active key")
	}
	shot("usage")

	// Revoke the new key, with the confirmation step.
	browsertest.Do(t, ctx, "revoke",
		chromedp.Navigate(portalURL+"/keys"),
		chromedp.WaitVisible(css(`a[href="/keys/`+id2+`/revoke"]`)),
		chromedp.Click(css(`a[href="/keys/`+id2+`/revoke"]`)),
		chromedp.WaitVisible(css("#revoke")),
	)
	shot("revoke-confirm")
	browsertest.Do(t, ctx, "confirm", chromedp.Click(css("#revoke")), chromedp.WaitVisible(css(".notice.ok")))
	shot("revoked")
	eventually(t, testkit.HangCheck, func() string {
		if st, _, _ := g.post(key2, ctxA, []byte("x")); st != http.StatusUnauthorized {
			return fmt.Sprintf("the revoked key gets %d", st)
		}
		return ""
	})

	// Sign out.
	browsertest.Do(t, ctx, "sign out", chromedp.Click(css(`form.signout button`)), chromedp.WaitVisible(css(`a[href="/login"]`)))

	// No key reached the log or the audit log.
	audit, _ := os.ReadFile(filepath.Join(g.dir, "audit.jsonl"))
	for i, k := range []string{key1, key2} {
		if strings.Contains(g.logs.String(), k) {
			t.Errorf("key %d is in the log", i+1)
		}
		if strings.Contains(string(audit), k) {
			t.Errorf("key %d is in the audit log", i+1)
		}
	}
	if !strings.Contains(string(audit), `"portal:oidc:`+alice.Subject+`"`) {
		t.Error("the audit log does not name the signed-in subject as the actor")
	}
}
