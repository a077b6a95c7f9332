package auth_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keystore"
)

// BenchmarkAPIKeyLookup is one x-api-key check against the file keystore:
// parse and checksum, SHA-256, lookup, constant-time compare, for a known
// key and for an unknown one (which must cost the same work).
func BenchmarkAPIKeyLookup(b *testing.B) {
	path := filepath.Join(b.TempDir(), "keys.yaml")
	admin := &keystore.FileAdmin{Path: path}
	key, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: "3f2b8c1e-6a4d-4e8b-9c2a-7d5e1f0a9b34"})
	if err != nil {
		b.Fatal(err)
	}
	unknown, err := keystore.Generate(keystore.Live)
	if err != nil {
		b.Fatal(err)
	}
	store := keystoretest.OpenFile(b, path)
	keys, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, key string
		ok        bool
	}{{"known", key, true}, {"unknown", unknown, false}} {
		b.Run(c.name, func(b *testing.B) {
			r, _ := http.NewRequest(http.MethodPost, "http://gw/sync", nil)
			r.Header.Set("X-Api-Key", c.key)
			b.ReportAllocs()
			for b.Loop() {
				v, err := keys.Authenticate(r)
				if err != nil || v.OK != c.ok {
					b.Fatalf("verdict %+v, %v", v, err)
				}
			}
		})
	}
}
