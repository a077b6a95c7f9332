package adminapi_test

import (
	"strings"
	"testing"
)

// The inputs of issue 49: a name with an invisible or look-alike
// character, a body that is not one JSON object, a charset other than
// UTF-8, a query parameter given twice and an address range with host
// bits are each refused (400, or 415 for the charset) with a problem
// that names the field, on every endpoint that reads one; nothing is
// stored and the audit log records no change made.
func TestInputsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const (
		keys      = "/v1/keys"
		consumers = "/v1/consumers"
		key       = "/v1/keys/" + keyAcme
		consumer  = "/v1/consumers/" + conAcme
		sessions  = "/v1/portal-sessions"
	)
	issue := `{"product":"registry","env":"test","name":"ci"}`
	cases := []struct {
		name, method, path, body string
		header                   string // "Name: value", or ""
		status                   int
		want                     string // a part of the detail; names the field
	}{
		// Names: PRECIS Nickname, refused rather than rewritten.
		{"zero-width joiner in a consumer name", "POST", consumers, `{"name":"Ac\u200dme"}`, "", 400, "name: "},
		{"zero-width joiner in a consumer rename", "PATCH", consumer, `{"name":"Acme\u200d Corp"}`, "", 400, "name: "},
		{"zero-width space in a key name", "POST", keys, `{"product":"registry","env":"test","name":"c\u200bi"}`, "", 400, "name: "},
		{"word joiner in a key rename", "PATCH", key, `{"name":"acme\u2060-prod"}`, "", 400, "name: "},
		{"soft hyphen in a consumer name", "POST", consumers, `{"name":"Ac\u00adme"}`, "", 400, "name: "},
		{"byte order mark in a key name", "POST", keys, `{"product":"registry","env":"test","name":"\ufeffci"}`, "", 400, "name: "},
		{"full-width letters in a consumer name", "POST", consumers, `{"name":"Ａｃｍｅ"}`, "", 400, `name: "Ａｃｍｅ" is not in its normal form`},
		{"ligature in a key name", "PATCH", key, `{"name":"ﬁnance"}`, "", 400, `write "finance"`},
		{"no-break space in a consumer name", "PATCH", consumer, `{"name":"Acme\u00a0Corp"}`, "", 400, `write "Acme Corp"`},
		{"doubled space in a consumer name", "POST", consumers, `{"name":"Acme  Corp"}`, "", 400, `write "Acme Corp"`},
		{"trailing space in a key name", "POST", keys, `{"product":"registry","env":"test","name":"ci "}`, "", 400, `write "ci"`},
		// A body that is not one JSON object.
		{"null creates no consumer", "POST", consumers, `null`, "", 400, "body: the top level must be a JSON object, not null"},
		{"null issues no key", "POST", keys, ` null `, "", 400, "body: the top level must be a JSON object, not null"},
		{"null patch of a key", "PATCH", key, `null`, "", 400, "body: the top level must be a JSON object, not null"},
		{"null patch of a consumer", "PATCH", consumer, `null`, "", 400, "body: the top level must be a JSON object, not null"},
		{"null rotate", "POST", key + "/rotate", `null`, "", 400, "body: the top level must be a JSON object, not null"},
		{"null purge", "POST", keys + "/purge", `null`, "", 400, "body: the top level must be a JSON object, not null"},
		{"null portal session", "POST", sessions, `null`, "", 400, "body: the top level must be a JSON object, not null"},
		{"array body", "POST", consumers, `[{"name":"a"}]`, "", 400, "body: the top level must be a JSON object, not an array"},
		{"string body", "POST", consumers, `"Acme"`, "", 400, "body: the top level must be a JSON object, not a string"},
		{"number body", "POST", keys, `1`, "", 400, "body: the top level must be a JSON object, not a number"},
		{"boolean body", "PATCH", key, `true`, "", 400, "body: the top level must be a JSON object, not a boolean"},
		// A charset other than UTF-8.
		{"utf-16 charset", "POST", consumers, `{"name":"Acme 2"}`, "Content-Type: application/json; charset=utf-16", 415, "Content-Type: charset=\"utf-16\""},
		{"UTF-16LE charset on issue", "POST", keys, issue, "Content-Type: application/json; charset=UTF-16LE", 415, "Content-Type: charset=\"UTF-16LE\""},
		{"latin1 charset on a patch", "PATCH", key, `{"name":"x"}`, "Content-Type: application/json; charset=latin1", 415, "Content-Type: charset=\"latin1\""},
		{"iso-8859-1 quoted", "POST", sessions, `{"consumer":"` + conAcme + `"}`, `Content-Type: application/json; charset="iso-8859-1"`, 415, "Content-Type: charset=\"iso-8859-1\""},
		{"two charsets", "POST", consumers, `{"name":"Acme 2"}`, "Content-Type: application/json; charset=utf-8; charset=utf-16", 415, "Content-Type: "},
		// A query parameter given twice, on every endpoint that reads one
		// and on those that read none.
		{"limit twice on consumers", "GET", consumers + "?limit=1&limit=1000", "", "", 400, "limit: given 2 times"},
		{"limit twice on keys", "GET", keys + "?limit=1000&limit=1", "", "", 400, "limit: given 2 times"},
		{"product twice on keys", "GET", keys + "?product=registry&product=extraction", "", "", 400, "product: given 2 times"},
		{"cursor twice", "GET", keys + "?cursor=a&cursor=b", "", "", 400, "cursor: given 2 times"},
		{"since twice on usage", "GET", key + "/usage?since=1h&since=720h", "", "", 400, "since: given 2 times"},
		{"since twice on migration", "GET", "/v1/migration?since=1h&since=24h", "", "", 400, "since: given 2 times"},
		{"actor twice on audit events", "GET", "/v1/audit-events?actor=a&actor=b", "", "", 400, "actor: given 2 times"},
		{"a parameter twice on a create", "POST", consumers + "?x=1&x=2", `{"name":"Acme 2"}`, "", 400, "x: given 2 times"},
		{"a query that cannot be read", "GET", consumers + "?limit=1;limit=1000", "", "", 400, "query: cannot be read"},
		// An address range with host bits: named, with its canonical form.
		{"host bits on a consumer", "POST", consumers, `{"name":"Acme 2","allowed_cidrs":["10.1.2.3/8"]}`, "", 400, `allowed_cidrs[0]: "10.1.2.3/8" has host bits set; write the range as 10.0.0.0/8`},
		{"host bits on an issue", "POST", keys, `{"product":"registry","env":"test","allowed_cidrs":["192.0.2.0/24","198.51.100.7/24"]}`, "", 400, `allowed_cidrs[1]: "198.51.100.7/24" has host bits set; write the range as 198.51.100.0/24`},
		{"host bits on a key patch", "PATCH", key, `{"allowed_cidrs":["10.1.2.3/8"]}`, "", 400, "write the range as 10.0.0.0/8"},
		{"host bits on a consumer patch", "PATCH", consumer, `{"allowed_cidrs":["2001:db8::1/32"]}`, "", 400, "write the range as 2001:db8::/32"},
		{"host bits in a mapped range", "PATCH", key, `{"allowed_cidrs":["::ffff:10.1.2.3/104"]}`, "", 400, "write the range as 10.0.0.0/8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hs []string
			if tc.header != "" {
				hs = append(hs, tc.header)
			}
			r := f.do(t, allToken, tc.method, tc.path, tc.body, hs...)
			m := checkProblem(t, r, tc.status)
			if d, _ := m["detail"].(string); !strings.Contains(d, tc.want) {
				t.Fatalf("detail %q, want it to contain %q", d, tc.want)
			}
		})
	}

	// Nothing was stored: the fixture's records are as written.
	recs, err := f.store.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.ID == keyAcme && (rec.Name != "acme-prod" || len(rec.AllowedCIDRs) != 0) {
			t.Fatalf("key changed: %+v", rec)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d keys, want the fixture's 2", len(recs))
	}
	cons, err := f.store.ListConsumers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cons {
		if c.ID == conAcme && (c.Name != "Acme Corp" || len(c.AllowedCIDRs) != 0) {
			t.Fatalf("consumer changed: %+v", c)
		}
	}
	if len(cons) != 2 {
		t.Fatalf("%d consumers, want the fixture's 2", len(cons))
	}
	for _, e := range f.audit.Events() {
		if e.Err == nil {
			t.Fatalf("audit records a change made: %+v", e)
		}
	}
}

// What the checks must not refuse: UTF-8 in any spelling of its charset,
// no charset, names of any script with a joiner where the script needs
// one, canonical ranges and bare addresses, each parameter once.
func TestInputsAccepted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct{ method, path, body, header string }{
		{"POST", "/v1/consumers", `{"name":"Zoë – 東京 ☕"}`, "Content-Type: application/json; charset=utf-8"},
		{"POST", "/v1/consumers", `{"name":"O'Brien & Co."}`, "Content-Type: application/json; charset=UTF-8"},
		{"POST", "/v1/consumers", `{"name":"क्\u200dष Labs"}`, `Content-Type: application/json; charset="utf-8"`},
		{"POST", "/v1/consumers", `{"name":"Acme 2","allowed_cidrs":["10.0.0.0/8","203.0.113.7","2001:db8::/32"]}`, "Content-Type: application/json"},
		{"PATCH", "/v1/keys/" + keyAcme, `{"allowed_cidrs":["10.0.0.0/8"]}`, ""},
		{"GET", "/v1/keys?limit=1&product=extraction", "", ""},
	} {
		var hs []string
		if tc.header != "" {
			hs = append(hs, tc.header)
		}
		if r := f.do(t, allToken, tc.method, tc.path, tc.body, hs...); r.status >= 300 {
			t.Fatalf("%s %s %s (%s): %d %s", tc.method, tc.path, tc.body, tc.header, r.status, r.body)
		}
	}
	cons, err := f.store.ListConsumers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(cons) != 6 {
		t.Fatalf("%d consumers, want the fixture's 2 and 4 more", len(cons))
	}
	for _, c := range cons {
		if c.Name == "Acme 2" && strings.Join(c.AllowedCIDRs, ",") != "10.0.0.0/8,203.0.113.7/32,2001:db8::/32" {
			t.Fatalf("allowed_cidrs stored as %v", c.AllowedCIDRs)
		}
	}
}
