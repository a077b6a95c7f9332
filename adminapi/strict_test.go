package adminapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Bodies that parsers read differently, text that would print as
// something else, and limits the limiter cannot honour are all a 400
// problem that names what is wrong, on every endpoint that takes a body;
// nothing is stored and the audit log records no change made.
func TestStrictInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const (
		keys      = "/v1/keys"
		consumers = "/v1/consumers"
		key       = "/v1/keys/" + keyAcme
		consumer  = "/v1/consumers/" + conAcme
		sessions  = "/v1/portal-sessions"
	)
	issue := func(extra string) string {
		return `{"product":"registry","env":"test"` + extra + `}`
	}
	cases := []struct {
		name, method, path, body, want string
	}{
		// JSON that parsers disagree on.
		{"duplicate name on create", "POST", consumers, `{"name":"a","name":"b"}`, "duplicate object member name"},
		{"duplicate name on issue", "POST", keys, issue(`,"name":"a","name":"b"`), "duplicate object member name"},
		{"duplicate name on patch", "PATCH", key, `{"name":"a","name":"b"}`, "duplicate object member name"},
		{"duplicate in override", "PATCH", key, `{"override":{"rate":5,"rate":5000}}`, "duplicate object member name"},
		{"duplicate in metadata", "POST", consumers, `{"name":"a","metadata":{"k":"1","k":"2"}}`, "duplicate object member name"},
		{"duplicate on portal session", "POST", sessions, `{"consumer":"` + conAcme + `","consumer":"` + conEmpty + `"}`, "duplicate object member name"},
		{"case variant on create", "POST", consumers, `{"name":"a","NAME":"b"}`, `"name" and "NAME"`},
		{"case variant on patch", "PATCH", consumer, `{"name":"a","Name":"b"}`, `"name" and "Name"`},
		{"case variant alone", "POST", consumers, `{"Name":"b"}`, `unknown member "Name"`},
		{"case variant in override", "PATCH", key, `{"override":{"rate":5,"RATE":5000}}`, `"rate" and "RATE"`},
		{"case variant in metadata", "PATCH", consumer, `{"metadata":{"crm":"1","CRM":"2"}}`, `"crm" and "CRM"`},
		{"case variant on issue", "POST", keys, issue(`,"name":"a","naMe":"b"`), `"name" and "naMe"`},
		{"invalid UTF-8 in a name", "POST", consumers, "{\"name\":\"a\xffb\"}", "invalid UTF-8"},
		{"invalid UTF-8 in a key name", "POST", keys, issue(",\"name\":\"\xc3\""), "invalid UTF-8"},
		{"invalid UTF-8 in metadata", "PATCH", consumer, "{\"metadata\":{\"k\xfe\":\"v\"}}", "invalid UTF-8"},
		{"invalid UTF-8 in a subject", "POST", sessions, "{\"consumer\":\"" + conAcme + "\",\"subject\":\"\xff\"}", "invalid UTF-8"},
		{"trailing data", "POST", consumers, `{"name":"a"} {"name":"b"}`, "after top-level value"},
		{"trailing brace", "POST", consumers, `{"name":"a"}}`, "invalid character"},
		// Control and formatting characters.
		{"ESC in a consumer name", "POST", consumers, `{"name":"a\u001b[31mb"}`, "name: must not contain control"},
		{"newline in a consumer name", "PATCH", consumer, `{"name":"a\nb"}`, "name: must not contain control"},
		{"C1 CSI in a key name", "POST", keys, issue(`,"name":"a\u009b2J"`), "name: must not contain control"},
		{"bidi override in a key name", "PATCH", key, `{"name":"abc\u202edcba"}`, "name: must not contain control"},
		{"newline in a metadata value", "POST", consumers, `{"name":"a","metadata":{"k":"x\ny"}}`, "metadata.k: must not contain control"},
		{"ESC in a metadata key", "PATCH", consumer, `{"metadata":{"k\u001b":"v"}}`, "metadata key: must not contain control"},
		{"newline in a subject", "POST", sessions, `{"consumer":"` + conAcme + `","subject":"alice\n2026-11-24 key.revoke ok"}`, "subject: must not contain control"},
		{"ESC in a subject", "POST", sessions, `{"consumer":"` + conAcme + `","subject":"\u001b[2Kroot"}`, "subject: must not contain control"},
		{"line separator in a subject", "POST", sessions, `{"consumer":"` + conAcme + `","subject":"a\u2028b"}`, "subject: must not contain control"},
		// Limits out of bounds, by field.
		{"rate 1e-300", "PATCH", key, `{"override":{"rate":1e-300}}`, "override.rate: "},
		{"rate 1e308", "PATCH", key, `{"override":{"rate":1e308}}`, "override.rate: "},
		{"rate 0", "PATCH", key, `{"override":{"rate":0}}`, "override.rate: "},
		{"negative rate", "PATCH", consumer, `{"override":{"rate":-1}}`, "override.rate: "},
		{"rate 1e6 per 1ms", "PATCH", key, `{"override":{"rate":1000000,"per":"1ms"}}`, "override.rate: "},
		{"per 1ns", "PATCH", key, `{"override":{"per":"1ns"}}`, "override.per: "},
		{"per 0", "PATCH", key, `{"override":{"per":"0s"}}`, "override.per: "},
		{"per 400 days", "PATCH", key, `{"override":{"per":"9600h"}}`, "override.per: "},
		{"burst MaxInt64", "PATCH", key, `{"override":{"burst":9223372036854775807}}`, "override.burst: "},
		{"burst 0", "PATCH", key, `{"override":{"burst":0}}`, "override.burst: "},
		{"burst 2e9", "POST", consumers, `{"name":"a","override":{"burst":2000000000}}`, "override.burst: "},
		{"quota MaxInt64/1ns", "PATCH", key, `{"override":{"quota":"9223372036854775807/1ns"}}`, "override.quota.requests: "},
		{"quota 10/1ns", "PATCH", key, `{"override":{"quota":"10/1ns"}}`, "override.quota.per: "},
		{"quota object MaxInt64", "PATCH", consumer, `{"override":{"quota":{"requests":9223372036854775807,"per":"24h"}}}`, "override.quota.requests: "},
		{"quota object 0/0s", "PATCH", consumer, `{"override":{"quota":{"requests":0,"per":"0s"}}}`, "override.quota.requests: "},
		{"quota object per 1ns", "PATCH", key, `{"override":{"quota":{"requests":10,"per":"1ns"}}}`, "override.quota.per: "},
		{"rate over a float64", "PATCH", key, `{"override":{"rate":1e400}}`, "override: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, allToken, tc.method, tc.path, tc.body)
			m := checkProblem(t, r, http.StatusBadRequest)
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
		if rec.ID == keyAcme && (rec.Name != "acme-prod" || rec.Override != nil) {
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
		if c.ID == conAcme && (c.Name != "Acme Corp" || c.Override != nil || len(c.Metadata) != 1) {
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

	// The bounds themselves are accepted, and printable Unicode is text.
	for _, body := range []string{
		`{"override":{"rate":1000000,"per":"1s","burst":1000000000,"quota":"1000000000000/8784h"}}`,
		`{"name":"Zoë – 東京 ☕"}`,
	} {
		if r := f.do(t, allToken, "PATCH", key, body); r.status != http.StatusOK {
			t.Fatalf("PATCH %s: %d %s", body, r.status, r.body)
		}
	}
}

// FuzzBody feeds any body to every endpoint that decodes one: the answer
// is a success or a 4xx problem, never a 5xx or a panic.
func FuzzBody(f *testing.F) {
	for _, s := range []string{
		`{"name":"a"}`, `{"name":"a","NAME":"b"}`, `{"override":{"rate":5,"quota":{"requests":1,"per":"1h"}}}`,
		`{"override":{"quota":"10/1h","until":"2030-01-01T00:00:00Z"}}`, `{"metadata":{"k":null}}`, `{"consumer":"` + conAcme + `"}`,
		`{"product":"registry","env":"test","name":"x"}`, `{"grace":"1h"}`, "{\"name\":\"\xff\"}", `[]`, `null`, `{"expires_at":null}`,
	} {
		for i := range 5 {
			f.Add(uint8(i), []byte(s))
		}
	}
	fx := newFixture(f, nil)
	targets := []struct{ method, path string }{
		{"POST", "/v1/consumers"}, {"PATCH", "/v1/consumers/" + conAcme}, {"POST", "/v1/keys"},
		{"PATCH", "/v1/keys/" + keyAcme}, {"POST", "/v1/portal-sessions"},
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		tg := targets[int(which)%len(targets)]
		req := httptest.NewRequest(tg.method, tg.path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+allToken)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		fx.api.Handler().ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", tg.method, tg.path, body, w.Code, w.Body)
		}
		if w.Code >= 400 && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %s %q: %d without a problem", tg.method, tg.path, body, w.Code)
		}
	})
}

// Fields from different sources, each in bounds, may not be together:
// the limit a key ends up with is checked whole.
func TestEffectiveLimitBounds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if r := f.do(t, allToken, "PATCH", "/v1/keys/"+keyAcme, `{"override":{"rate":0.01}}`); r.status != http.StatusOK {
		t.Fatalf("key rate 0.01 per the plan's 1s: %d %s", r.status, r.body)
	}
	r := f.do(t, allToken, "PATCH", "/v1/consumers/"+conAcme, `{"override":{"per":"8784h"}}`)
	m := checkProblem(t, r, http.StatusBadRequest)
	if d, _ := m["detail"].(string); !strings.Contains(d, keyAcme) || !strings.Contains(d, "rate: 0.01 per 8784h0m0s lets one request through every") {
		t.Fatalf("detail %q", d)
	}
	if r := f.do(t, allToken, "PATCH", "/v1/keys/"+keyAcme, `{"override":{"per":"8784h"}}`); r.status != http.StatusBadRequest {
		t.Fatalf("key per 8784h with its rate 0.01: %d %s", r.status, r.body)
	}
}
