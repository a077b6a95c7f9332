package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/server"
)

// TestPortal: the portal serves HTTPS on its own listener with the
// gateway's certificate, never on the API listener; a key created in it
// works on /sync at once and stops when revoked in it; the key is in no
// log line.
func TestPortal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Portal.Enabled, c.Portal.Listen = true, "127.0.0.1:0" }})
	con, err := keystore.NewConsumer(keystore.Consumer{Name: "Acme", Contexts: []string{ctxA}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Keys.CreateConsumer(context.Background(), con); err != nil {
		t.Fatal(err)
	}
	base := "https://" + h.Server.PortalAddr().String()
	for _, path := range []string{"/", "/keys", "/login", "/assets/portal.css", "/session/x"} {
		if r := h.get(h.API, path, cred{}); r.Status != http.StatusUnauthorized && r.Status != http.StatusNotFound {
			t.Fatalf("GET %s on the API listener: %d, want 401 or 404 (the portal is never served there)", path, r.Status)
		}
	}

	link, _, err := h.Server.Portal().SessionLink(context.Background(), keyops.Actor{ID: "test"}, con.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Transport: h.Client.Transport, Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(path string, v url.Values) (int, string) {
		t.Helper()
		resp, err := c.PostForm(base+path, v)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := post(strings.TrimPrefix(link, h.Server.Portal().URL()), nil); st != http.StatusSeeOther {
		t.Fatalf("sign-in link: %d", st)
	}
	st, body := get("/keys")
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if st != 200 || csrf == nil {
		t.Fatalf("keys page: %d", st)
	}
	// Create answers with a redirect (POST-redirect-GET); the page it
	// leads to shows the new key once.
	resp, err := c.PostForm(base+"/keys", url.Values{"csrf": {csrf[1]}, "product": {"extraction"}, "env": {"live"}, "context": {ctxA}, "name": {"from the portal"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	st, body = get(strings.TrimPrefix(resp.Header.Get("Location"), base))
	key := regexp.MustCompile(`svc_live_[A-Za-z0-9_]+`).FindString(body)
	if st != 200 || key == "" {
		t.Fatalf("the page after create: %d, key shown: %t", st, key != "")
	}
	h.secret(key)
	testkit.Eventually(t, testkit.HangCheck, "the portal's key works on /sync", func() error { return testkit.Equal(h.sync(keyCred(key), ctxA).Status, http.StatusOK) })
	recs, _ := h.Keys.List(context.Background())
	id := recs[len(recs)-1].ID
	if st, _ := post("/keys/"+id+"/revoke", url.Values{"csrf": {csrf[1]}, "confirm": {id}}); st != http.StatusSeeOther {
		t.Fatalf("revoke: %d", st)
	}
	testkit.Eventually(t, testkit.HangCheck, "the revoked key is refused", func() error { return testkit.Equal(h.sync(keyCred(key), ctxA).Status, http.StatusUnauthorized) })
}

// TestPortalSessionThroughTheAdminAPI: the operator's dashboard asks the
// admin API for a portal session; the URL opens a session on the portal
// once, then is refused.
func TestPortalSessionThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	const token = "kga_dashboard"
	h := newHarness(t, setup{
		mod: func(c *config.Config) {
			c.Portal.Enabled, c.Portal.Listen = true, "127.0.0.1:0"
			c.AdminAPI.Enabled, c.AdminAPI.Listen = true, "127.0.0.1:0"
		},
		deps: func(d *server.Deps) {
			d.AdminTokens = adminTokens{token: {ID: "tok_dash", Scopes: []string{adminapi.ScopeKeysWrite}}}
		},
	})
	h.secret(token)
	con, err := keystore.NewConsumer(keystore.Consumer{Name: "Acme"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Keys.CreateConsumer(context.Background(), con); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "https://"+h.Server.AdminAPIAddr().String()+"/v1/portal-sessions",
		strings.NewReader(`{"consumer":"`+con.ID+`","subject":"alice@acme.example"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	r := h.do(req)
	var got struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(r.Body, &got); r.Status != http.StatusCreated || err != nil {
		t.Fatalf("POST /v1/portal-sessions: %d %s", r.Status, r.Body)
	}
	h.secret(got.URL[strings.LastIndex(got.URL, "/")+1:])
	path := strings.TrimPrefix(got.URL, h.Server.Portal().URL())
	base := "https://" + h.Server.PortalAddr().String()
	for i, step := range []struct {
		method string
		want   int
	}{{"GET", http.StatusOK}, {"POST", http.StatusSeeOther}, {"POST", http.StatusGone}} {
		req, _ := http.NewRequest(step.method, base+path, nil)
		if r := h.do(req); r.Status != step.want {
			t.Fatalf("step %d, %s of the link: %d, want %d", i+1, step.method, r.Status, step.want)
		}
	}
}
