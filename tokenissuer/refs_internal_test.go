package tokenissuer

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/keygate/keygate/keystore"
)

// TestRefsCacheIsBoundedAndRereads: the replica's cache of key references
// holds at most its size, and a key whose reference it evicted still
// resolves, from the Store.
func TestRefsCacheIsBoundedAndRereads(t *testing.T) {
	ctx := context.Background()
	store := NewFileStore(filepath.Join(t.TempDir(), "tokens.json"))
	i := &Issuer{deps: Deps{Store: store}, refs: newRefCache(3)}
	hash := func(n int) keystore.Hash {
		h, err := keystore.ParseHash(fmt.Sprintf("sha256:%064x", n))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for n := range 8 {
		if err := store.PutRef(ctx, fmt.Sprintf("key_%016x", n), hash(n).String()); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		for n := range 8 {
			h, ok, err := i.hashOf(ctx, fmt.Sprintf("key_%016x", n))
			if err != nil || !ok || h != hash(n) {
				t.Fatalf("key %d: %v %v %v", n, h, ok, err)
			}
			if i.refs.Len() > 3 {
				t.Fatalf("the cache holds %d references, more than its 3", i.refs.Len())
			}
		}
	}
	if _, ok, err := i.hashOf(ctx, "key_unknown"); ok || err != nil {
		t.Errorf("an unknown key resolved: %v %v", ok, err)
	}
}
