package portal_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The portal's forms and pages refuse what the admin API refuses: a key
// name with an invisible or look-alike character, an address range with
// host bits, a query parameter given twice and a form declared in a
// charset other than UTF-8; the answer names the field and nothing is
// stored.
func TestPortalInputsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	b := f.signIn(t, conA)
	csrf := b.csrf()
	form := func(ct string, pairs ...string) *http.Request {
		v := url.Values{}
		for i := 0; i+1 < len(pairs); i += 2 {
			v.Add(pairs[i], pairs[i+1])
		}
		req, _ := http.NewRequest(http.MethodPost, b.base+"/keys", strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", ct)
		return req
	}
	const urlenc = "application/x-www-form-urlencoded"
	newKey := func(name string) []string {
		return []string{"csrf", csrf, "product", "extraction", "env", "test", "context", ctxA, "name", name}
	}
	cases := []struct {
		name   string
		send   func() page
		status int
		want   string
	}{
		{"zero-width joiner in a key name", func() page { return b.do(form(urlenc, newKey("ci\u200dbot")...)) }, 400, "Name: "},
		{"full-width key name", func() page { return b.do(form(urlenc, newKey("ｃｉ")...)) }, 400, `write "ci"`},
		{"doubled space in a key name", func() page { return b.do(form(urlenc, newKey("ci  bot")...)) }, 400, `write "ci bot"`},
		{"utf-16 form", func() page { return b.do(form(urlenc+"; charset=utf-16", newKey("ci")...)) }, 415, `charset="utf-16"`},
		{"latin1 form", func() page { return b.do(form(urlenc+"; charset=ISO-8859-1", newKey("ci")...)) }, 415, `charset="ISO-8859-1"`},
		{"host bits in a narrowing", func() page {
			return b.post("/keys/"+keyA+"/permissions", "csrf", csrf, "permissions", "extraction:sync", "allowed_cidrs", "10.1.2.3/8")
		}, 400, "write the range as 10.0.0.0/8"},
		{"done twice", func() page { return b.get("/keys?done=created&done=revoked") }, 400, "done: given 2 times"},
		{"key twice on usage", func() page { return b.get("/usage?key=" + keyA + "&key=" + keyB) }, 400, "key: given 2 times"},
		{"state twice on the callback", func() page { return b.get("/callback?state=a&state=b") }, 400, "state: given 2 times"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.send()
			if p.status != tc.status || !strings.Contains(html.UnescapeString(p.body), tc.want) {
				t.Fatalf("status %d, want %d with %q; body:\n%s", p.status, tc.status, tc.want, p.body)
			}
		})
	}
	recs, err := f.store.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d keys, want the fixture's 2", len(recs))
	}
	for _, r := range recs {
		if len(r.AllowedCIDRs) != 0 || r.Permissions != nil {
			t.Fatalf("key changed: %+v", r)
		}
	}
	// UTF-8, declared or not, is a form the portal reads.
	for _, ct := range []string{urlenc, urlenc + "; charset=UTF-8", urlenc + `; charset="utf-8"`} {
		if p := b.do(form(ct, newKey("Zoë – 東京")...)); p.status != http.StatusSeeOther {
			t.Fatalf("%s: %d\n%s", ct, p.status, p.body)
		}
	}
}
