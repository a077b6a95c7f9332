package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/secretscan"
	"github.com/keygate/keygate/server"
)

// ghSigner stands in for GitHub's secret-scanning signing key.
type ghSigner struct {
	id   string
	priv *ecdsa.PrivateKey
}

// published is the signer's key in GitHub's published-keys shape.
func (g ghSigner) published(t *testing.T) []byte {
	der, err := x509.MarshalPKIXPublicKey(&g.priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"public_keys": []map[string]any{{
		"key_identifier": g.id, "key": string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), "is_current": true,
	}}})
	return b
}

// post sends body to base's alert endpoint, signed as GitHub does
// (ECDSA P-256 over the SHA-256 of the body, DER, base64) unless unsigned.
func (g ghSigner) post(h *harness, base string, body []byte, signed bool) result {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+secretscan.Path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if signed {
		d := sha256.Sum256(body)
		der, err := ecdsa.SignASN1(rand.Reader, g.priv, d[:])
		if err != nil {
			h.t.Fatal(err)
		}
		req.Header.Set(secretscan.HeaderKeyID, g.id)
		req.Header.Set(secretscan.HeaderSignature, base64.StdEncoding.EncodeToString(der))
	}
	return h.do(req)
}

// scanReplicas runs two replicas on one Redis keystore with
// secret_scanning on: GitHub's keys from a local published-keys server,
// notices to a local webhook that checks their signature.
func scanReplicas(t *testing.T, more ...func(*config.Config)) (a, b *harness, admin *keystore.RedisAdmin, rs *redistest.Server, g ghSigner, notices chan secretscan.Notice) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g = ghSigner{id: "gh-test-key", priv: priv}
	doc := g.published(t)
	keysSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }))
	t.Cleanup(keysSrv.Close)
	const secret = "webhook-secret-for-tests"
	notices = make(chan secretscan.Notice, 8)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !hmac.Equal([]byte(r.Header.Get(secretscan.SignatureHeader)), []byte(secretscan.Sign([]byte(secret), body))) {
			t.Errorf("webhook signature %q does not verify", r.Header.Get(secretscan.SignatureHeader))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var n secretscan.Notice
		if err := json.Unmarshal(body, &n); err != nil {
			t.Error(err)
		}
		notices <- n
	}))
	t.Cleanup(hook.Close)

	rs = redistest.Start(t)
	admin = &keystore.RedisAdmin{Client: rs.Client(t), Prefix: "ss:"}
	mod := withTokenEndpoint(func(c *config.Config) {
		useRedis(c, rs.Addr)
		c.Redis.KeyPrefix = "ss:"
		c.Keystore.Backend = "redis"
		c.RateLimit.Limits = map[string]policy.Limit{"live": {Rate: 1000, Per: time.Second, Burst: 1000}, "test": {Rate: 1000, Per: time.Second, Burst: 1000}}
		c.SecretScanning.Enabled = true
		c.SecretScanning.KeysURL = keysSrv.URL
		c.SecretScanning.MaxBodyBytes = 4096
		c.SecretScanning.MaxMatches = 3
		c.SecretScanning.Webhook.URL = hook.URL
		c.SecretScanning.Webhook.SecretEnv = "KEYGATE_TEST_WEBHOOK_SECRET"
		c.SecretScanning.Webhook.Backoff = 10 * time.Millisecond
		for _, m := range more {
			m(c)
		}
	})
	deps := func(d *server.Deps) {
		d.Getenv = func(k string) string {
			if k == "KEYGATE_TEST_WEBHOOK_SECRET" {
				return secret
			}
			return ""
		}
	}
	a = newHarness(t, setup{mod: mod, deps: deps})
	b = newHarness(t, setup{mod: mod, deps: deps})
	return a, b, admin, rs, g, notices
}

func alertBody(t *testing.T, ms ...secretscan.Match) []byte {
	b, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLeakedKeyRevokedOnEveryReplica: a signed alert for a live key, sent
// to one replica without any API key, revokes it: the key and its OAuth
// token get 401 on both replicas; the feedback says true_positive; the
// shared audit log holds the leak with url, source and action; the metric
// counts it; the operator's webhook receives a signed notice. No log line
// carries the key or the token.
func TestLeakedKeyRevokedOnEveryReplica(t *testing.T) {
	t.Parallel()
	a, b, admin, rs, g, notices := scanReplicas(t)
	key, rec, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "leaky", Consumer: ""})
	if err != nil {
		t.Fatal(err)
	}
	a.secret(key)
	b.secret(key)
	for _, h := range []*harness{a, b} {
		testkit.Eventually(t, testkit.HangCheck, "the new key works", func() error {
			if r := h.sync(keyCred(key), ctxA); r.Status != 200 {
				return errStatus(r.Status)
			}
			return nil
		})
	}
	tok := b.mustExchange(rec.ID, key)
	a.secret(tok)

	const where = "https://github.com/octo/app/blob/0123abc/config.py"
	r := g.post(a, a.API, alertBody(t, secretscan.Match{Token: key, Type: "keygate_live_key", URL: where, Source: "content"}), true)
	revoked := time.Now()
	if r.Status != 200 {
		t.Fatalf("alert: %d %s", r.Status, r.Body)
	}
	var fb []secretscan.Feedback
	if err := json.Unmarshal(r.Body, &fb); err != nil || len(fb) != 1 || fb[0].Label != secretscan.TruePositive {
		t.Fatalf("feedback %s (%v)", r.Body, err)
	}
	for _, h := range []*harness{a, b} {
		testkit.Eventually(t, testkit.HangCheck, "the leaked key and its token refused", func() error {
			if r := h.sync(keyCred(key), ctxA); r.Status != 401 {
				return errStatus(r.Status)
			}
			if r := h.sync(tokCred(tok), ctxA); r.Status != 401 {
				return errStatus(r.Status)
			}
			return nil
		})
	}
	// Logged, not asserted: the machine is shared (the bound is the
	// keystore's change log, which its own tests hold to a second).
	t.Logf("key and token refused on both replicas %s after the alert's answer", time.Since(revoked))

	evs, _, err := audit.StreamEvents(context.Background(), rs.Client(t), audit.StreamKey("ss:"), audit.Query{Target: rec.ID})
	if err != nil {
		t.Fatal(err)
	}
	var leak, revoke bool
	for _, e := range evs {
		switch e.Action {
		case "key.leak":
			leak = e.Changes["url"] == where && e.Changes["source"] == "content" && e.Changes["action"] == "revoke" && e.Actor == "secret-scanning:github"
		case "key.revoke":
			revoke = true
		}
	}
	if !leak || !revoke {
		t.Fatalf("audit events %+v: want key.leak (url, source, action revoke) and key.revoke", evs)
	}
	if v := a.metric("keygate_leaked_keys_total", "action", "revoke"); v != 1 {
		t.Errorf("keygate_leaked_keys_total{action=revoke} = %v, want 1", v)
	}
	select {
	case n := <-notices:
		if n.KeyID != rec.ID || n.URL != where || n.Action != "revoke" {
			t.Errorf("notice %+v", n)
		}
	case <-time.After(testkit.HangCheck):
		t.Fatal("the webhook received no notice (hang check)")
	}
	// A replay to the other replica: answered, but that replica has not
	// seen the body, so it acts; the key is revoked already: no action.
	r2 := g.post(b, b.API, alertBody(t, secretscan.Match{Token: key, Type: "keygate_live_key", URL: where, Source: "content"}), true)
	if r2.Status != 200 || !strings.Contains(string(r2.Body), secretscan.TruePositive) {
		t.Fatalf("replay on B: %d %s", r2.Status, r2.Body)
	}
	if v := b.metric("keygate_leaked_keys_total", "action", "revoke"); v != 0 {
		t.Errorf("replica B counted a second revocation: %v", v)
	}
}

// TestSecretScanRefusalsThroughTheGateway: the route needs no API key,
// refuses unsigned alerts and oversized bodies in the spec's error shape,
// and revokes nothing.
func TestSecretScanRefusalsThroughTheGateway(t *testing.T) {
	t.Parallel()
	a, _, admin, _, g, _ := scanReplicas(t)
	key, rec, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err != nil {
		t.Fatal(err)
	}
	a.secret(key)
	body := alertBody(t, secretscan.Match{Token: key, Type: "t", URL: "u", Source: "s"})
	assertError(t, g.post(a, a.API, body, false), 401, "signature")
	big := alertBody(t, secretscan.Match{Token: key, URL: strings.Repeat("x", 5000)})
	r := g.post(a, a.API, big, true)
	if r.Status != 413 {
		t.Fatalf("oversized: %d %s", r.Status, r.Body)
	}
	many := alertBody(t, secretscan.Match{Token: key}, secretscan.Match{Token: "a"}, secretscan.Match{Token: "b"}, secretscan.Match{Token: "c"})
	assertError(t, g.post(a, a.API, many, true), 413, "too many matches")
	assertError(t, g.post(a, a.API, []byte(`[{"token":`), true), 400, "match 0")
	got, err := admin.Get(context.Background(), rec.ID)
	if err != nil || got.Status != keystore.Active {
		t.Fatalf("key after refusals: %v %v", got.Status, err)
	}
}

// TestLeakedKeyQuarantineAndNotify: under quarantine a leaked test key
// keeps working, every response carrying a Warning and the key's Sunset,
// until the grace period ends; then it is refused. Under notify (live
// keys here) nothing changes: the key works, without a warning, and the
// leak is audited and told all the same.
func TestLeakedKeyQuarantineAndNotify(t *testing.T) {
	t.Parallel()
	a, b, admin, rs, g, notices := scanReplicas(t, func(c *config.Config) {
		c.SecretScanning.Policy.Test = "quarantine"
		c.SecretScanning.Policy.Live = "notify"
		c.SecretScanning.QuarantineGrace = 3 * time.Second
	})
	ctx := context.Background()
	testKey, testRec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Test, Context: ctxA, Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	liveKey, liveRec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*harness{a, b} {
		h.secret(testKey)
		h.secret(liveKey)
	}
	for _, k := range []string{testKey, liveKey} {
		testkit.Eventually(t, testkit.HangCheck, "the new key works", func() error {
			if r := b.sync(keyCred(k), ctxA); r.Status != 200 {
				return errStatus(r.Status)
			}
			return nil
		})
	}
	body := alertBody(t,
		secretscan.Match{Token: testKey, Type: "keygate_test_key", URL: "https://gist.github.com/dev/1", Source: "gist"},
		secretscan.Match{Token: liveKey, Type: "keygate_live_key", URL: "https://github.com/o/r/issues/7", Source: "issue_body"})
	r := g.post(a, a.API, body, true)
	var fb []secretscan.Feedback
	if err := json.Unmarshal(r.Body, &fb); err != nil || r.Status != 200 || len(fb) != 2 || fb[0].Label != secretscan.TruePositive || fb[1].Label != secretscan.TruePositive {
		t.Fatalf("alert: %d %s", r.Status, r.Body)
	}
	// Quarantined: still admitted on the other replica, with the warning.
	testkit.Eventually(t, testkit.HangCheck, "the quarantine's warning", func() error {
		r := b.sync(keyCred(testKey), ctxA)
		if r.Status != 200 || !strings.Contains(r.Header.Get("Warning"), "found in public") || r.Header.Get("Sunset") == "" {
			return errStatus(r.Status)
		}
		return nil
	})
	// Notify: the live key works, with no warning.
	if r := b.sync(keyCred(liveKey), ctxA); r.Status != 200 || r.Header.Get("Warning") != "" {
		t.Fatalf("notify: %d, Warning %q", r.Status, r.Header.Get("Warning"))
	}
	// The grace period ends: refused on both replicas.
	for _, h := range []*harness{a, b} {
		testkit.Eventually(t, testkit.HangCheck, "the quarantined key refused after its grace", func() error {
			if r := h.sync(keyCred(testKey), ctxA); r.Status != 401 {
				return errStatus(r.Status)
			}
			return nil
		})
	}
	if r := a.sync(keyCred(liveKey), ctxA); r.Status != 200 {
		t.Fatalf("notify: the live key got %d", r.Status)
	}
	got := map[string]string{}
	for i := 0; i < 2; i++ {
		select {
		case n := <-notices:
			got[n.KeyID] = n.Action
		case <-time.After(testkit.HangCheck):
			t.Fatal("a notice is missing (hang check)")
		}
	}
	if got[testRec.ID] != "quarantine" || got[liveRec.ID] != "notify" {
		t.Fatalf("notices %v", got)
	}
	evs, _, err := audit.StreamEvents(ctx, rs.Client(t), audit.StreamKey("ss:"), audit.Query{Target: liveRec.ID})
	if err != nil {
		t.Fatal(err)
	}
	var leak bool
	for _, e := range evs {
		leak = leak || (e.Action == "key.leak" && e.Changes["action"] == "notify")
		if e.Action == "key.revoke" || e.Action == "key.update" {
			t.Errorf("notify changed the key: %+v", e)
		}
	}
	if !leak {
		t.Fatalf("no key.leak event for the notified key: %+v", evs)
	}
	if v := a.metric("keygate_leaked_keys_total", "action", "quarantine"); v != 1 {
		t.Errorf("quarantine count %v", v)
	}
	if v := a.metric("keygate_leaked_keys_total", "action", "notify"); v != 1 {
		t.Errorf("notify count %v", v)
	}
}

// TestLeakReplayedToAnotherReplica: under notify, the same alert replayed
// to the other replica (which has not seen the body) tells the owner no
// second time.
func TestLeakReplayedToAnotherReplica(t *testing.T) {
	t.Parallel()
	a, b, admin, _, g, notices := scanReplicas(t, func(c *config.Config) { c.SecretScanning.Policy.Live = "notify" })
	key, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err != nil {
		t.Fatal(err)
	}
	a.secret(key)
	b.secret(key)
	body := alertBody(t, secretscan.Match{Token: key, Type: "keygate_live_key", URL: "https://github.com/o/r/blob/1/k", Source: "content"})
	for _, h := range []*harness{a, b, a} {
		if r := g.post(h, h.API, body, true); r.Status != 200 || !strings.Contains(string(r.Body), secretscan.TruePositive) {
			t.Fatalf("alert: %d %s", r.Status, r.Body)
		}
	}
	select {
	case <-notices:
	case <-time.After(testkit.HangCheck):
		t.Fatal("no notice (hang check)")
	}
	select {
	case n := <-notices:
		t.Fatalf("a second notice: %+v", n)
	case <-time.After(300 * time.Millisecond): // a hang check: a second notice would be queued already
	}
	if v := a.metric("keygate_leaked_keys_total", "action", "notify") + b.metric("keygate_leaked_keys_total", "action", "notify"); v != 1 {
		t.Errorf("notify counted %v times, want 1", v)
	}
}
