package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keystore"
)

const ctxA = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"

// failingStore is a store whose backend is down: a failure no real file
// store can produce on demand.
type failingStore struct{}

func (failingStore) Lookup(context.Context, keystore.Hash) (keystore.Record, bool, error) {
	return keystore.Record{}, false, errors.New("redis: connection refused")
}

func newKeys(t *testing.T) (*auth.APIKeys, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	a := &keystore.FileAdmin{Path: path}
	ctx := context.Background()
	keys := map[string]string{}
	var rec keystore.Record
	keys["live"], rec, _ = a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "app"})
	keys["live-id"] = rec.ID
	keys["registry"], _, _ = a.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
	keys["revoked"], rec, _ = a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	_, _ = a.Revoke(ctx, rec.ID)
	keys["expiring"], _, _ = a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, ExpiresIn: time.Hour})
	store := keystoretest.OpenFile(t, path)
	k, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: store, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	return k, keys
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	k, keys := newKeys(t)
	unknown, _ := keystore.Generate(keystore.Live)
	cases := []struct {
		name    string
		headers []string
		ok      bool
		reason  auth.Reason
		msgHas  string
	}{
		{"good key", []string{keys["live"]}, true, "", ""},
		{"same key twice", []string{keys["live"], keys["live"]}, true, "", ""},
		{"no header", nil, false, auth.ReasonMissing, "missing"},
		{"empty header", []string{""}, false, auth.ReasonMissing, "missing"},
		{"two different keys", []string{keys["live"], keys["registry"]}, false, auth.ReasonDuplicate, "more than one"},
		{"malformed", []string{"not-a-key"}, false, auth.ReasonMalformed, "invalid"},
		{"bad checksum", []string{keystoretest.Mistype(keys["live"])}, false, auth.ReasonChecksum, "invalid"},
		{"unknown", []string{unknown}, false, auth.ReasonUnknown, "invalid"},
		{"revoked", []string{keys["revoked"]}, false, auth.ReasonRevoked, "revoked"},
		{"expired", []string{keys["expiring"]}, false, auth.ReasonExpired, "expired"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/sync", nil)
			if c.headers != nil {
				r.Header["X-Api-Key"] = c.headers
			}
			v, err := k.Authenticate(r)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != c.ok || v.Reason != c.reason || !strings.Contains(strings.ToLower(v.Message), c.msgHas) {
				t.Fatalf("verdict = %+v", v)
			}
			for _, h := range c.headers {
				if h != "" && strings.Contains(v.Message, h) {
					t.Error("the message echoes the key")
				}
			}
			if c.ok {
				p := v.Principal
				if p.ID != keys["live-id"] || p.Context != ctxA || p.Env != "live" || !p.Allows("extraction") || p.Allows("registry") || p.Method != auth.MethodAPIKey {
					t.Errorf("principal = %+v", p)
				}
			}
		})
	}
}

func TestAPIKeysStoreFailureIsAnError(t *testing.T) {
	t.Parallel()
	k, _ := auth.NewAPIKeys(auth.APIKeysConfig{Store: failingStore{}})
	key, _ := keystore.Generate(keystore.Live)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Api-Key", key)
	if _, err := k.Authenticate(r); err == nil {
		t.Fatal("a store failure must be an error (503), not a refusal (401)")
	}
	// A malformed key never reaches the store.
	r.Header.Set("X-Api-Key", "svc_live_short")
	if v, err := k.Authenticate(r); err != nil || v.OK {
		t.Fatalf("malformed key with a failing store: %+v %v", v, err)
	}
}

// bearer is a stand-in second method: present when Authorization is set.
type bearer struct{ products []string }

func (bearer) Present(r *http.Request) bool { return r.Header.Get("Authorization") != "" }
func (b bearer) Authenticate(*http.Request) (auth.Verdict, error) {
	return auth.Verdict{OK: true, Principal: auth.Principal{ID: "oauth2:c", Products: b.products, Method: auth.MethodOAuth2}}, nil
}

func TestChain(t *testing.T) {
	t.Parallel()
	k, keys := newKeys(t)
	both, _ := auth.NewChain(
		auth.Option{Method: auth.MethodAPIKey, Credential: k, Products: []string{"registry"}},
		auth.Option{Method: auth.MethodOAuth2, Credential: bearer{products: []string{"extraction", "registry"}}},
	)
	keysOnly, _ := auth.NewChain(auth.Option{Method: auth.MethodAPIKey, Credential: k})
	cases := []struct {
		name          string
		chain         *auth.Chain
		key, authz    string
		ok            bool
		reason        auth.Reason
		products      []string
		wantChallenge bool
	}{
		{"key alone, product cut to registry", both, keys["live"], "", true, "", []string{}, false},
		{"token alone", both, "", "Bearer x", true, "", []string{"extraction", "registry"}, false},
		{"key and token together", both, keys["live"], "Bearer x", false, auth.ReasonAmbiguous, nil, false},
		{"nothing, tokens on: bearer challenge", both, "", "", false, auth.ReasonMissing, nil, true},
		{"nothing, keys only", keysOnly, "", "", false, auth.ReasonMissing, nil, false},
		{"a token where tokens are off", keysOnly, "", "Bearer x", false, auth.ReasonDisabled, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/sync", nil)
			if c.key != "" {
				r.Header.Set("X-Api-Key", c.key)
			}
			if c.authz != "" {
				r.Header.Set("Authorization", c.authz)
			}
			v, err := c.chain.Authenticate(r)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != c.ok || v.Reason != c.reason || (v.Challenge != "") != c.wantChallenge {
				t.Fatalf("verdict = %+v", v)
			}
			if c.ok && strings.Join(v.Principal.Products, ",") != strings.Join(c.products, ",") {
				t.Errorf("products = %v, want %v", v.Principal.Products, c.products)
			}
		})
	}
	if _, err := auth.NewChain(); err == nil {
		t.Error("an empty chain was accepted")
	}
}
