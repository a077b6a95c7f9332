package secretscan_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/secretscan"
)

func status(t *testing.T, f *fixture, id string) keystore.Record {
	t.Helper()
	rec, err := f.svc.GetKey(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func leakEvents(f *fixture) []keyops.Event {
	var out []keyops.Event
	for _, e := range f.audit.Events() {
		if e.Action == "key.leak" {
			out = append(out, e)
		}
	}
	return out
}

// TestAlertRevokesLiveKey: a signed alert for a live key revokes it through
// keyops (audited as key.revoke and key.leak with url, source, consumer
// and action), tells the owner, and labels it true_positive; a replay of
// the same body gets the same answer and acts no second time.
func TestAlertRevokesLiveKey(t *testing.T) {
	f := newFixture(t, nil, nil)
	body := alert(t, secretscan.Match{Token: f.live, Type: "keygate_live_key", URL: "https://github.com/o/r/blob/abc/app.py", Source: "content"})
	w := f.signed(t, body)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	fb := feedback(t, w)
	if len(fb) != 1 || fb[0].Label != secretscan.TruePositive || fb[0].TokenHash != tokenHash(f.live) || fb[0].TokenType != "keygate_live_key" {
		t.Fatalf("feedback %+v", fb)
	}
	if strings.Contains(w.Body.String(), f.live) {
		t.Error("the answer echoes the token")
	}
	if rec := status(t, f, f.liveID); rec.Status != keystore.Revoked || rec.Leak == nil || rec.Leak.URL != "https://github.com/o/r/blob/abc/app.py" || rec.Leak.Action != "revoke" || rec.Leak.FoundAt.IsZero() {
		t.Fatalf("live key is %s with leak %+v, want revoked and marked", rec.Status, rec.Leak)
	}
	ev := leakEvents(f)
	if len(ev) != 1 || ev[0].Target != f.liveID || ev[0].Changes["url"] != "https://github.com/o/r/blob/abc/app.py" || ev[0].Changes["source"] != "content" || ev[0].Changes["action"] != "revoke" {
		t.Fatalf("leak events %+v", ev)
	}
	select {
	case n := <-f.notified:
		if n.KeyID != f.liveID || n.Action != "revoke" || n.URL == "" {
			t.Fatalf("notice %+v", n)
		}
	default:
		t.Fatal("no notice")
	}
	n := len(f.audit.Events())
	w2 := f.signed(t, body) // a fresh signature over the same body: a replay
	if w2.Code != w.Code || !bytes.Equal(w2.Body.Bytes(), w.Body.Bytes()) {
		t.Fatalf("replay answered %d %s, want %d %s", w2.Code, w2.Body, w.Code, w.Body)
	}
	if len(f.audit.Events()) != n || len(f.notified) != 0 {
		t.Fatal("the replay acted again")
	}
	noTokenLogged(t, f.logs, f.live, f.test)
}

// TestAlertPolicies: quarantine shortens expires_at and keeps the key
// working; notify changes nothing; both are audited and told.
func TestAlertPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action keyops.LeakAction
	}{{"quarantine", keyops.LeakQuarantine}, {"notify", keyops.LeakNotify}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[keystore.Env]keyops.LeakAction{keystore.Test: tc.action}, nil)
			before := status(t, f, f.testID)
			w := f.signed(t, alert(t, secretscan.Match{Token: f.test, Type: "keygate_test_key", URL: "https://gist.github.com/x", Source: "gist"}))
			if fb := feedback(t, w); len(fb) != 1 || fb[0].Label != secretscan.TruePositive {
				t.Fatalf("feedback %+v", fb)
			}
			after := status(t, f, f.testID)
			if after.Leak == nil || after.Leak.Action != string(tc.action) || after.Leak.Source != "gist" {
				t.Fatalf("leak mark %+v", after.Leak)
			}
			if after.StateAt(time.Now()) != keystore.Active {
				t.Fatalf("key is %s, want still active", after.StateAt(time.Now()))
			}
			switch tc.action {
			case keyops.LeakQuarantine:
				if after.ExpiresAt.IsZero() || after.ExpiresAt.After(time.Now().Add(time.Hour+time.Second)) {
					t.Fatalf("expires_at %v, want within the grace of an hour", after.ExpiresAt)
				}
				if after.StateAt(time.Now().Add(time.Hour+time.Second)) != keystore.Expired {
					t.Fatal("the key still works after the grace period")
				}
			case keyops.LeakNotify:
				if !after.ExpiresAt.Equal(before.ExpiresAt) || after.Status != before.Status {
					t.Fatalf("notify changed the key: %+v", after)
				}
			}
			if ev := leakEvents(f); len(ev) != 1 || ev[0].Changes["action"] != string(tc.action) {
				t.Fatalf("leak events %+v", ev)
			}
			if n := <-f.notified; n.Action != string(tc.action) {
				t.Fatalf("notice %+v", n)
			}
			noTokenLogged(t, f.logs, f.test)
		})
	}
}

// TestAlertRefusals: every refusal is clear, revokes nothing and logs no
// token; the signature is checked before the JSON is read.
func TestAlertRefusals(t *testing.T) {
	f := newFixture(t, nil, nil)
	other := newSigner(t, "gh-key-1") // same id, different key
	good := alert(t, secretscan.Match{Token: f.live, Type: "t", URL: "u", Source: "s"})
	many := alert(t, secretscan.Match{Token: f.live}, secretscan.Match{Token: "a"}, secretscan.Match{Token: "b"}, secretscan.Match{Token: "c"}, secretscan.Match{Token: "d"}, secretscan.Match{Token: "e"})
	big := append([]byte(`[{"token":"`+f.live+`","url":"`), bytes.Repeat([]byte("x"), 5000)...)
	big = append(big, `"}]`...)
	malformed := []byte(`[{"token":"` + f.live + `",}`)
	for _, tc := range []struct {
		name   string
		body   []byte
		keyID  string
		sig    string
		status int
	}{
		{"missing signature", good, f.sig.id, "", http.StatusUnauthorized},
		{"missing key id", good, "", f.sig.sign(t, good), http.StatusUnauthorized},
		{"signature by another key", good, f.sig.id, other.sign(t, good), http.StatusUnauthorized},
		{"signature of another body", good, f.sig.id, f.sig.sign(t, []byte("[]")), http.StatusUnauthorized},
		{"signature not base64", good, f.sig.id, "!!!", http.StatusUnauthorized},
		{"unknown key id", good, "gh-key-9", f.sig.sign(t, good), http.StatusUnauthorized},
		{"unsigned malformed JSON", malformed, f.sig.id, "", http.StatusUnauthorized},
		{"oversized body", big, f.sig.id, f.sig.sign(t, big), http.StatusRequestEntityTooLarge},
		{"too many matches", many, f.sig.id, f.sig.sign(t, many), http.StatusRequestEntityTooLarge},
		{"malformed JSON", malformed, f.sig.id, f.sig.sign(t, malformed), http.StatusBadRequest},
		{"not an array", []byte(`{"token":"x"}`), f.sig.id, f.sig.sign(t, []byte(`{"token":"x"}`)), http.StatusBadRequest},
		{"match without token", []byte(`[{"type":"x"}]`), f.sig.id, f.sig.sign(t, []byte(`[{"type":"x"}]`)), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(t, tc.body, tc.keyID, tc.sig)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if !strings.Contains(w.Body.String(), `"StateText":"ERROR"`) || strings.Contains(w.Body.String(), f.live) {
				t.Fatalf("body %s: want the spec's error shape without the token", w.Body)
			}
		})
	}
	if rec := status(t, f, f.liveID); rec.Status != keystore.Active {
		t.Fatalf("a refused alert revoked the key (%s)", rec.Status)
	}
	if n := len(f.audit.Events()); n != 2 { // the two issues of the fixture
		t.Fatalf("%d audit events, want only the fixture's 2", n)
	}
	noTokenLogged(t, f.logs, f.live)
}

// TestAlertFalsePositives: tokens that are not keys of this keystore, or
// fail their checksum, are false_positive, with no store write, no audit
// event and no log line carrying them.
func TestAlertFalsePositives(t *testing.T) {
	f := newFixture(t, nil, nil)
	unknown, err := keystore.Generate(keystore.Live)
	if err != nil {
		t.Fatal(err)
	}
	toks := []string{unknown, keystoretest.Mistype(f.live), "svc_live_notakey", "ghp_0123456789abcdef", f.live[:len(f.live)-1]}
	var ms []secretscan.Match
	for _, tok := range toks {
		ms = append(ms, secretscan.Match{Token: tok, Type: "keygate_live_key", URL: "https://github.com/o/r", Source: "commit"})
	}
	before, err := f.admin.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := f.signed(t, alert(t, ms...))
	fb := feedback(t, w)
	if len(fb) != len(toks) {
		t.Fatalf("feedback %+v", fb)
	}
	for i, e := range fb {
		if e.Label != secretscan.FalsePositive || e.TokenHash != tokenHash(toks[i]) {
			t.Errorf("match %d: feedback %+v, want false_positive", i, e)
		}
	}
	after, err := f.admin.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || after[0].Status != before[0].Status || after[1].Status != before[1].Status {
		t.Fatal("the store changed")
	}
	if n := len(f.audit.Events()); n != 2 {
		t.Fatalf("%d audit events, want the fixture's 2", n)
	}
	noTokenLogged(t, f.logs, toks...)
}

// TestAlertRevokesAdminToken: a leaked admin token is revoked at once
// whatever the policy (audited as admin_token.revoke by the scanner) and
// labelled true_positive; a mistyped one is a false_positive.
func TestAlertRevokesAdminToken(t *testing.T) {
	f := newFixture(t, map[keystore.Env]keyops.LeakAction{keystore.Live: keyops.LeakNotify}, nil)
	tok, rec, err := f.tokens.Create(context.Background(), keyops.Actor{ID: "cli:test"}, admintoken.CreateRequest{Name: "ci", Scopes: []string{"keys:read"}})
	if err != nil {
		t.Fatal(err)
	}
	w := f.signed(t, alert(t, secretscan.Match{Token: tok, Type: "keygate_admin_token", URL: "https://github.com/o/r/blob/1/ci.yml", Source: "content"},
		secretscan.Match{Token: keystoretest.Mistype(tok), Type: "keygate_admin_token", URL: "u", Source: "s"}))
	fb := feedback(t, w)
	if len(fb) != 2 || fb[0].Label != secretscan.TruePositive || fb[1].Label != secretscan.FalsePositive {
		t.Fatalf("feedback %+v", fb)
	}
	ts, err := f.admin.ListAdminTokens(context.Background())
	if err != nil || len(ts) != 1 || ts[0].ID != rec.ID || ts[0].Status != keystore.Revoked {
		t.Fatalf("admin tokens %+v (%v): want the token revoked", ts, err)
	}
	var revoked bool
	for _, e := range f.audit.Events() {
		revoked = revoked || (e.Action == "admin_token.revoke" && e.Target == rec.ID && e.Actor.ID == "secret-scanning:github")
	}
	if !revoked {
		t.Fatalf("audit %+v: want admin_token.revoke by the scanner", f.audit.Events())
	}
	noTokenLogged(t, f.logs, tok)
}
