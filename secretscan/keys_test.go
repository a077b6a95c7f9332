package secretscan_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/secretscan"
)

// TestKeysRefresh: a URL's keys are fetched once, refetched when an
// unknown identifier arrives (GitHub rotated its key), but at most once per
// MinRefresh however many made-up identifiers arrive.
func TestKeysRefresh(t *testing.T) {
	a, b := newSigner(t, "old"), newSigner(t, "new")
	ks := newKeysServer(t, publishedKeys(t, a))
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	keys, err := secretscan.NewKeys(context.Background(), secretscan.KeysConfig{URL: ks.URL, MinRefresh: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok := keys.Key(ctx, "old"); !ok || ks.fetches.Load() != 1 {
		t.Fatalf("old key: ok=%v after %d fetches", ok, ks.fetches.Load())
	}
	doc := publishedKeys(t, a, b)
	ks.doc.Store(&doc)
	for i := 0; i < 50; i++ {
		if _, ok := keys.Key(ctx, "made-up"); ok {
			t.Fatal("a made-up id was accepted")
		}
	}
	if _, ok := keys.Key(ctx, "new"); ok {
		t.Fatal("new key before the refresh interval")
	}
	if got := ks.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches within the refresh interval, want 1", got)
	}
	now.Add(int64(time.Minute))
	if _, ok := keys.Key(ctx, "new"); !ok {
		t.Fatal("new key not found after the refresh interval")
	}
	if got := ks.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches, want 2", got)
	}
}

// TestKeysFile: keys from a file; bad documents are refused with the
// entry named.
func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	s := newSigner(t, "k1")
	good := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(good, publishedKeys(t, s), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := secretscan.NewKeys(context.Background(), secretscan.KeysConfig{File: good})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := keys.Key(context.Background(), "k1"); !ok {
		t.Fatal("k1 not found")
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"empty list", `{"public_keys":[]}`, "empty"},
		{"not PEM", `{"public_keys":[{"key_identifier":"x","key":"abc"}]}`, "public_keys[0] (x)"},
		{"no id", `{"public_keys":[{"key":"abc"}]}`, "key_identifier"},
		{"not JSON", `nope`, "signing keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "bad.json")
			if err := os.WriteFile(p, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := secretscan.NewKeys(context.Background(), secretscan.KeysConfig{File: p})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// FuzzParseKeys: no document panics the keys parser.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte(`{"public_keys":[{"key_identifier":"a","key":"-----BEGIN PUBLIC KEY-----\nAA==\n-----END PUBLIC KEY-----\n","is_current":true}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = secretscan.ParseKeys(b)
	})
}
