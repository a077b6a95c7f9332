package secretscan_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/internal/testsupport/audittest"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/secretscan"
)

const ctxA = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"

// signer stands in for GitHub: a P-256 key pair and its identifier.
type signer struct {
	id   string
	priv *ecdsa.PrivateKey
}

func newSigner(t testing.TB, id string) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{id: id, priv: k}
}

// pem is the public key as GitHub publishes it.
func (s signer) pem(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&s.priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// sign signs body as GitHub's documentation shows: ECDSA P-256 over the
// SHA-256 of the raw body, ASN.1 DER, base64.
func (s signer) sign(t testing.TB, body []byte) string {
	t.Helper()
	d := sha256.Sum256(body)
	der, err := ecdsa.SignASN1(rand.Reader, s.priv, d[:])
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// publishedKeys is GitHub's published-keys document for signers.
func publishedKeys(t testing.TB, ss ...signer) []byte {
	t.Helper()
	type key struct {
		KeyIdentifier string `json:"key_identifier"`
		Key           string `json:"key"`
		IsCurrent     bool   `json:"is_current"`
	}
	var doc struct {
		PublicKeys []key `json:"public_keys"`
	}
	for i, s := range ss {
		doc.PublicKeys = append(doc.PublicKeys, key{s.id, s.pem(t), i == len(ss)-1})
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keysServer serves a published-keys document (swappable) and counts
// its fetches.
type keysServer struct {
	*httptest.Server
	doc     atomic.Pointer[[]byte]
	fetches atomic.Int64
}

func newKeysServer(t testing.TB, doc []byte) *keysServer {
	ks := &keysServer{}
	ks.doc.Store(&doc)
	ks.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ks.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*ks.doc.Load())
	}))
	t.Cleanup(ks.Close)
	return ks
}

// fixture is a keystore with one live and one test key, keyops on it,
// and a Handler that trusts sig.
type fixture struct {
	sig      signer
	svc      *keyops.Service
	admin    *keystore.FileAdmin
	store    *keystore.FileStore
	audit    *audittest.Recorder
	tokens   *admintoken.Service
	logs     *observer.ObservedLogs
	h        *secretscan.Handler
	live     string // the live key
	liveID   string
	test     string
	testID   string
	notified chan secretscan.Notice
}

type chanNotifier chan secretscan.Notice

func (c chanNotifier) Notify(n secretscan.Notice) { c <- n }

func newFixture(t *testing.T, policy map[keystore.Env]keyops.LeakAction, tweak func(*secretscan.Config)) *fixture {
	t.Helper()
	f := &fixture{sig: newSigner(t, "gh-key-1"), audit: &audittest.Recorder{}, notified: make(chan secretscan.Notice, 16)}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	f.admin = &keystore.FileAdmin{Path: path}
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	f.svc, err = keyops.New(keyops.Config{Store: f.admin, Limits: res, Auditor: f.audit})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cli := keyops.Actor{ID: "cli:test"}
	var rec keystore.Record
	if f.live, rec, err = f.svc.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	f.liveID = rec.ID
	if f.test, rec, err = f.svc.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Test, Context: ctxA, Name: "dev"}); err != nil {
		t.Fatal(err)
	}
	f.testID = rec.ID
	f.store = keystoretest.OpenFile(t, path)
	if f.tokens, err = admintoken.New(admintoken.Config{Store: f.admin, Auditor: f.audit}); err != nil {
		t.Fatal(err)
	}

	ks := newKeysServer(t, publishedKeys(t, f.sig))
	keys, err := secretscan.NewKeys(ctx, secretscan.KeysConfig{URL: ks.URL})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	f.logs = logs
	cfg := secretscan.Config{Keys: keys, Lookup: f.store, Reporter: f.svc, Policy: policy, QuarantineGrace: time.Hour,
		Notifier: chanNotifier(f.notified), Logger: zap.New(core), MaxMatches: 5, MaxBodyBytes: 4096,
		AdminTokens: f.admin, RevokeAdminToken: f.tokens}
	if tweak != nil {
		tweak(&cfg)
	}
	if f.h, err = secretscan.New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// post sends body with the given signature headers ("" leaves one out).
func (f *fixture) post(t *testing.T, body []byte, keyID, sig string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, secretscan.Path, strings.NewReader(string(body)))
	if keyID != "" {
		r.Header.Set(secretscan.HeaderKeyID, keyID)
	}
	if sig != "" {
		r.Header.Set(secretscan.HeaderSignature, sig)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// signed posts body signed by the fixture's signer.
func (f *fixture) signed(t *testing.T, body []byte) *httptest.ResponseRecorder {
	return f.post(t, body, f.sig.id, f.sig.sign(t, body))
}

func alert(t testing.TB, ms ...secretscan.Match) []byte {
	t.Helper()
	b, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func feedback(t *testing.T, w *httptest.ResponseRecorder) []secretscan.Feedback {
	t.Helper()
	var fb []secretscan.Feedback
	if err := json.Unmarshal(w.Body.Bytes(), &fb); err != nil {
		t.Fatalf("feedback %q: %v", w.Body, err)
	}
	return fb
}

func tokenHash(tok string) string {
	d := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(d[:])
}

// noTokenLogged fails if any captured log line, message or field, holds
// one of toks.
func noTokenLogged(t *testing.T, logs *observer.ObservedLogs, toks ...string) {
	t.Helper()
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + toString(v)
		}
		for _, tok := range toks {
			if strings.Contains(line, tok) {
				t.Errorf("log line carries a token: %q", e.Message)
			}
		}
	}
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
