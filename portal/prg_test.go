package portal_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/portal"
)

// Two more consumers: one that lists no contexts, one marked any_context.
const (
	conNone = "con_2c3d4e5f60718293"
	conAny  = "con_3d4e5f6071829304"
	ctxC    = "1b2c3d4e-5f60-4718-a93b-0c1d2e3f4a5b"
)

func contextsFixture(t *testing.T, mod func(*portal.Config, *portal.Deps)) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	created := time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)
	keystoretest.WriteFile(t, path, []keystore.Record{
		{ID: keyA, Name: "acme-prod", Hash: keystore.HashKey("svc_live_fixtureA"), Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, CreatedAt: created, Status: keystore.Active, Consumer: conA},
	}, []keystore.Consumer{
		{ID: conA, Name: "Acme", Contexts: []string{ctxA}, CreatedAt: created},
		{ID: conNone, Name: "Initech", CreatedAt: created},
		{ID: conAny, Name: "Hooli", AnyContext: true, CreatedAt: created},
	})
	return newFixtureAt(t, path, mod)
}

func (f *fixture) count(action string) int {
	n := 0
	for _, e := range f.audit.Events() {
		if e.Action == action && e.Err == nil {
			n++
		}
	}
	return n
}

// A create, a rotation and a limit request are each answered with a
// redirect; visiting the page it leads to again does nothing more, and
// each is audited once.
func TestPostRedirectGet(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	csrf := a.csrf()

	create := a.post("/keys", "csrf", csrf, "product", "extraction", "env", "live", "name", "once", "context", ctxA)
	key := a.followIssued(create) // visits the page twice
	for range 3 {
		if p := a.get("/keys"); p.status != 200 || strings.Contains(p.body, key) {
			t.Fatalf("keys page: %d", p.status)
		}
	}
	if n := f.count("key.issue"); n != 1 {
		t.Fatalf("%d key.issue events, want 1", n)
	}

	// Another session, even of the same consumer, cannot take a flash.
	recs, _ := f.store.List(context.Background())
	id := recs[len(recs)-1].ID
	rot := a.post("/keys/"+id+"/rotate", "csrf", csrf, "grace", "1h0m0s")
	b := f.signIn(t, conA)
	if p := b.get(rot.header.Get("Location")); p.status != http.StatusSeeOther || p.header.Get("Location") != "/keys?done=shown" || newKeyRE.MatchString(p.body) {
		t.Fatalf("another session got %d %q", p.status, p.header.Get("Location"))
	}
	key2 := a.followIssued(rot)
	if key2 == key {
		t.Fatal("the rotation showed the old key")
	}
	if n := f.count("key.rotate"); n != 1 {
		t.Fatalf("%d key.rotate events, want 1", n)
	}

	lr := a.post("/limits/request", "csrf", csrf, "rate", "50", "per", "1s", "reason", "launch")
	if lr.status != http.StatusSeeOther {
		t.Fatalf("limit request: %d", lr.status)
	}
	for range 3 {
		if p := a.get(lr.header.Get("Location")); p.status != 200 || !strings.Contains(p.body, "recorded") {
			t.Fatalf("after the limit request: %d", p.status)
		}
	}
	if n := f.count("portal.limit_request"); n != 1 {
		t.Fatalf("%d limit requests audited, want 1", n)
	}
	if logs := f.logs.String(); strings.Contains(logs, key) || strings.Contains(logs, key2) {
		t.Fatal("a key was logged")
	}
}

// A rotated key in its grace period shows when it stops and offers no
// Rotate; a rotate form or POST for it is a clear 409 page, and nothing
// is logged as an error.
func TestRotatedKeyIsNotRotatedAgain(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	csrf := a.csrf()
	a.followIssued(a.post("/keys/"+keyA+"/rotate", "csrf", csrf, "grace", "1h0m0s"))
	recs, err := f.store.List(context.Background())
	var rec keystore.Record
	for _, r := range recs {
		if r.ID == keyA {
			rec = r
		}
	}
	if err != nil || rec.ReplacedBy == "" || rec.ExpiresAt.IsZero() {
		t.Fatalf("keyA after rotation: %+v %v", rec, err)
	}
	keys := a.get("/keys")
	row := keys.body[strings.Index(keys.body, `<tr id="`+keyA+`"`):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "expiring at "+rec.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")) || strings.Contains(row, "/rotate") || !strings.Contains(row, "/revoke") {
		t.Fatalf("rotated key's row:\n%s", row)
	}
	for name, p := range map[string]page{
		"form": a.get("/keys/" + keyA + "/rotate"),
		"POST": a.post("/keys/"+keyA+"/rotate", "csrf", csrf, "grace", "0s"),
	} {
		if p.status != http.StatusConflict || !strings.Contains(p.body, "Already rotated") || !strings.Contains(p.body, rec.ReplacedBy) {
			t.Fatalf("%s: %d\n%s", name, p.status, p.body)
		}
	}
	if n := f.count("key.rotate"); n != 1 {
		t.Fatalf("%d rotations, want 1", n)
	}
	if logs := f.logs.String(); strings.Contains(logs, `"level":"error"`) || strings.Contains(logs, `"level":"warn"`) {
		t.Fatalf("logged an error:\n%s", logs)
	}
}

// The portal binds a key only to one of its consumer's contexts; a
// consumer that lists none is offered no context field and refused one,
// unless it is marked any_context.
func TestContextRule(t *testing.T) {
	f := contextsFixture(t, nil)
	none := f.signIn(t, conNone)
	csrf := none.csrf()
	form := none.get("/keys/new")
	if strings.Contains(form.body, `name="context"`) || !strings.Contains(form.body, `id="no-context"`) || !strings.Contains(form.body, `value="extraction" disabled`) {
		t.Fatalf("the form of a consumer without contexts:\n%s", form.body)
	}
	for _, tc := range []struct {
		name   string
		pairs  []string
		status int
	}{
		{"extraction in any context", []string{"product", "extraction", "env", "live", "context", ctxC}, http.StatusForbidden},
		{"extraction in another consumer's context", []string{"product", "extraction", "env", "live", "context", ctxA}, http.StatusForbidden},
		{"registry bound to a context", []string{"product", "registry", "env", "live", "context", ctxC}, http.StatusForbidden},
		{"extraction without a context", []string{"product", "extraction", "env", "live"}, http.StatusBadRequest},
	} {
		if p := none.post("/keys", append([]string{"csrf", csrf}, tc.pairs...)...); p.status != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, p.status, tc.status)
		}
	}
	recs, _ := f.store.List(context.Background())
	for _, r := range recs {
		if r.Consumer == conNone {
			t.Fatalf("a key was made: %+v", r)
		}
	}
	none.followIssued(none.post("/keys", "csrf", csrf, "product", "registry", "env", "test"))

	// A consumer with contexts: only its own.
	a := f.signIn(t, conA)
	if p := a.post("/keys", "csrf", a.csrf(), "product", "extraction", "env", "live", "context", ctxC); p.status != http.StatusForbidden {
		t.Errorf("a context not its own: %d", p.status)
	}

	// any_context: free text, any context.
	any := f.signIn(t, conAny)
	if form := any.get("/keys/new"); !strings.Contains(form.body, `<input id="context" name="context"`) {
		t.Fatalf("any_context consumer is offered no context field:\n%s", form.body)
	}
	any.followIssued(any.post("/keys", "csrf", any.csrf(), "product", "extraction", "env", "live", "context", ctxC))
}

// A POST whose Origin is not the portal's own, scheme included, is
// refused before anything is done.
func TestOriginComparesScheme(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	csrf := a.csrf()
	host := strings.TrimPrefix(f.srv.URL, "https://")
	post := func(origin, fetchSite string) int {
		req, _ := http.NewRequest(http.MethodPost, a.base+"/limits/request", strings.NewReader("csrf="+csrf+"&rate=5&per=1s&reason=x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if fetchSite != "" {
			req.Header.Set("Sec-Fetch-Site", fetchSite)
		}
		return a.do(req).status
	}
	for _, tc := range []struct {
		origin, fetchSite string
		want              int
	}{
		{"http://" + host, "", http.StatusForbidden},
		{"http://" + host, "same-origin", http.StatusForbidden},
		{"HTTP://" + strings.ToUpper(host), "", http.StatusForbidden},
		{"https://" + host + ".evil.example", "", http.StatusForbidden},
		{"https://evil.example", "", http.StatusForbidden},
		{"null", "", http.StatusForbidden},
		{"null", "cross-site", http.StatusForbidden},
		{"null", "same-origin", http.StatusSeeOther}, // the portal's own form under Referrer-Policy: no-referrer
		{"ws://" + host, "", http.StatusForbidden},
		{"", "same-site", http.StatusForbidden},
		{"https://" + host, "", http.StatusSeeOther},
		{"HTTPS://" + strings.ToUpper(host), "same-origin", http.StatusSeeOther},
		{"", "", http.StatusSeeOther},
	} {
		if got := post(tc.origin, tc.fetchSite); got != tc.want {
			t.Errorf("Origin %q, Sec-Fetch-Site %q: %d, want %d", tc.origin, tc.fetchSite, got, tc.want)
		}
	}
	if n := f.count("portal.limit_request"); n != 4 {
		t.Fatalf("%d limit requests recorded, want the 4 allowed", n)
	}
}

// A limit request is held to the bounds of every limit, and its reason
// to printable text.
func TestLimitRequestBounds(t *testing.T) {
	f := newFixture(t, nil)
	a := f.signIn(t, conA)
	csrf := a.csrf()
	for _, pairs := range [][]string{
		{"rate", "1e-300", "per", "1s"},
		{"rate", "1e308", "per", "1s"},
		{"rate", "NaN", "per", "1s"},
		{"rate", "5000000", "per", "1s"},
		{"rate", "5", "per", "1ns"},
		{"rate", "5", "per", "9000h"},
		{"quota", "9223372036854775807", "quota_per", "24h0m0s"},
		{"quota", "0", "quota_per", "24h0m0s"},
		{"quota", "100", "quota_per", "1ns"},
		{"quota", "lots", "quota_per", "24h0m0s"},
	} {
		p := a.post("/limits/request", append([]string{"csrf", csrf, "reason", "x"}, pairs...)...)
		if p.status != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", pairs, p.status)
		}
	}
	for _, reason := range []string{"a\x1b[2Jb", "a\u202eb", "a\u0085b"} {
		if p := a.post("/limits/request", "csrf", csrf, "rate", "5", "per", "1s", "reason", reason); p.status != http.StatusBadRequest {
			t.Errorf("reason %q: %d, want 400", reason, p.status)
		}
	}
	if p := a.post("/limits/request", "csrf", csrf, "rate", "5", "per", "1s", "reason", "line one\r\nline two\ttabbed"); p.status != http.StatusSeeOther {
		t.Errorf("a reason over lines: %d", p.status)
	}
	if n := f.count("portal.limit_request"); n != 1 {
		t.Fatalf("%d limit requests recorded, want 1", n)
	}
}
