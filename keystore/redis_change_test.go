package keystore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keystore"
)

// TestRedisConcurrentChangesLoseNothing: admins on several machines (a
// client each) changing the same key at once lose no change, and of
// racing revocations exactly one wins; changes of other keys in the same
// bucket do not get in their way.
func TestRedisConcurrentChangesLoseNothing(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ctx := context.Background()
	const workers, each = 6, 10
	admins := make([]*keystore.RedisAdmin, workers)
	for i := range admins {
		admins[i] = &keystore.RedisAdmin{Client: rs.Client(t)}
	}
	_, rec, err := admins[0].Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test, Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	// Neighbours: enough keys that some share rec's bucket.
	var others []keystore.Record
	for range 300 {
		_, o, err := admins[0].Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test, Name: "o"})
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, o)
	}
	var wg sync.WaitGroup
	for w, a := range admins {
		wg.Go(func() {
			for i := range each {
				if _, err := a.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) {
					r.Name += "x"
					return r, nil
				}); err != nil {
					t.Errorf("update: %v", err)
				}
				o := others[(w*each+i)%len(others)]
				if _, err := a.UpdateKey(ctx, o.ID, func(r keystore.Record) (keystore.Record, error) {
					r.Name += "y"
					return r, nil
				}); err != nil {
					t.Errorf("update of a neighbour: %v", err)
				}
			}
		})
	}
	wg.Wait()
	got, err := admins[0].Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "n" + strings.Repeat("x", workers*each); got.Name != want {
		t.Fatalf("after %d concurrent updates the name is %q (%d lost)", workers*each, got.Name, len(want)-len(got.Name))
	}
	var won, lost atomic.Int32
	for _, a := range admins {
		wg.Go(func() {
			_, err := a.Revoke(ctx, rec.ID)
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, keystore.ErrRevoked):
				lost.Add(1)
			default:
				t.Errorf("revoke: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || lost.Load() != workers-1 {
		t.Errorf("racing revocations: %d succeeded, %d found the key revoked; want 1 and %d", won.Load(), lost.Load(), workers-1)
	}
	if got, err := admins[0].Get(ctx, rec.ID); err != nil || got.Status != keystore.Revoked || got.Name != "n"+strings.Repeat("x", workers*each) {
		t.Errorf("after the revocations: %s %q, %v", got.Status, got.Name, err)
	}
}
