package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

const ctxUUID = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"

// testTimeout bounds each Redis call in the tests that do not test a
// timeout. The product's 100 ms is for a server under a gateway's load; a
// CI machine running the whole suite on two cores stalls a loopback read
// that long now and then, and a lookup that failed for that reason says
// nothing about what these tests check.
const testTimeout = 2 * time.Second

// redisClient is a client with testTimeout's deadlines and no retries.
func redisClient(t *testing.T, addrs ...string) redis.UniversalClient {
	t.Helper()
	return newRedisClient(t, testTimeout, addrs...)
}

// outageClient has the product's 100 ms deadlines, for the tests that
// stop or freeze Redis and want a lookup to fail fast.
func outageClient(t *testing.T, addrs ...string) redis.UniversalClient {
	t.Helper()
	return newRedisClient(t, 100*time.Millisecond, addrs...)
}

func newRedisClient(t *testing.T, timeout time.Duration, addrs ...string) redis.UniversalClient {
	t.Helper()
	c := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: addrs, ReadTimeout: timeout, WriteTimeout: timeout,
		DialTimeout: timeout, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openRedisStore(t *testing.T, c redis.UniversalClient) *keystore.RedisStore {
	t.Helper()
	return openRedisStoreTimeout(t, c, testTimeout)
}

func openRedisStoreTimeout(t *testing.T, c redis.UniversalClient, timeout time.Duration) *keystore.RedisStore {
	t.Helper()
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c, Timeout: timeout, ResyncInterval: 300 * time.Millisecond, BreakerBackoff: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func state(t *testing.T, s *keystore.RedisStore, key string) keystore.Status {
	rec, ok, err := s.Lookup(context.Background(), keystore.HashKey(key))
	if err != nil || !ok {
		return ""
	}
	return rec.StateAt(time.Now())
}

// TestRedisChangesReachEveryReplica: issue, revoke and rotate through the
// admin reach three stores (three replicas, three clients).
func TestRedisChangesReachEveryReplica(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
	var stores []*keystore.RedisStore
	for i := 0; i < 3; i++ {
		stores = append(stores, openRedisStore(t, redisClient(t, rs.Addr)))
	}
	for _, s := range stores {
		testkit.Eventually(t, testkit.HangCheck, "store loaded and subscribed", func() error {
			return testkit.True(s.Ready() && !s.Degraded(), "ready %v, degraded %v", s.Ready(), s.Degraded())
		})
	}
	ctx := context.Background()
	key, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		testkit.Eventually(t, testkit.HangCheck, "issued key on replica "+string(rune('0'+i)), func() error { return testkit.Equal(state(t, s, key), keystore.Active) })
	}
	newKey, _, err := admin.Rotate(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		testkit.Eventually(t, testkit.HangCheck, "rotation", func() error {
			old, next := state(t, s, key), state(t, s, newKey)
			return testkit.True(old == keystore.Revoked && next == keystore.Active, "old key %s, new key %s", old, next)
		})
	}
	recs, err := admin.List(ctx)
	if err != nil || len(recs) != 2 {
		t.Fatalf("list: %d, %v", len(recs), err)
	}
	active := recs[0]
	if active.Status != keystore.Active {
		active = recs[1]
	}
	if _, err := admin.Revoke(ctx, active.ID); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		testkit.Eventually(t, testkit.HangCheck, "revocation", func() error { return testkit.Equal(state(t, s, newKey), keystore.Revoked) })
	}
	if _, err := admin.Revoke(ctx, "key_0000000000000000"); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("revoke unknown id: %v", err)
	}
}

// TestRedisMissedMessageIsResynced: a record written without an
// announcement (a lost message) is picked up by the periodic resync.
func TestRedisMissedMessageIsResynced(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	s := openRedisStore(t, c)
	testkit.Eventually(t, testkit.HangCheck, "ready", func() error { return testkit.True(s.Ready(), "not ready") })
	// Write through a second admin on another prefix, then copy the record
	// over by hand, so no message is published for it.
	other := &keystore.RedisAdmin{Client: c, Prefix: "other:"}
	key, rec, err := other.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
	if err != nil {
		t.Fatal(err)
	}
	bucket := fmt.Sprintf("keystore:{ks:%02x}:records", rec.Hash[0])
	v, _ := c.HGet(context.Background(), "other:"+bucket, rec.Hash.String()).Result()
	c.HSet(context.Background(), "keygate:"+bucket, rec.Hash.String(), v)
	// A lookup before the resync may already find it (a miss asks Redis);
	// what matters is that the copy holds it without any lookup.
	testkit.Eventually(t, testkit.HangCheck, "resync", func() error { return testkit.Equal(s.Len(), 1) })
	if state(t, s, key) != keystore.Active {
		t.Error("resynced key not active")
	}
}

// TestRedisOutage: with Redis killed or frozen, cached keys keep working,
// unknown keys fail fast with ErrUnavailable (never "unknown"), and the
// store recovers when Redis is back.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"kill", "freeze"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
			s := openRedisStoreTimeout(t, outageClient(t, rs.Addr), 100*time.Millisecond)
			key, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, testkit.HangCheck, "issued", func() error { return testkit.Equal(state(t, s, key), keystore.Active) })
			if mode == "kill" {
				rs.Kill()
			} else {
				rs.Freeze()
				defer rs.Thaw()
			}
			unknown, _ := keystore.Generate(keystore.Live)
			for i := 0; i < 10; i++ {
				done := make(chan error, 1)
				go func() {
					_, ok, err := s.Lookup(context.Background(), keystore.HashKey(unknown))
					if err == nil && ok {
						err = errors.New("found a key that does not exist")
					}
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, keystore.ErrUnavailable) {
						t.Fatalf("unknown key during outage: %v, want ErrUnavailable", err)
					}
				case <-time.After(testkit.HangCheck):
					t.Fatal("lookup hung during the outage (hang check)")
				}
				if state(t, s, key) != keystore.Active {
					t.Fatal("cached key stopped working during the outage")
				}
				unknown, _ = keystore.Generate(keystore.Live)
			}
			testkit.Eventually(t, testkit.HangCheck, "degraded", func() error { return testkit.True(s.Degraded(), "not degraded") })
			if mode == "kill" {
				rs.Restart()
			} else {
				rs.Thaw()
			}
			testkit.Eventually(t, testkit.HangCheck, "recovered", func() error {
				_, ok, err := s.Lookup(context.Background(), keystore.HashKey(unknown))
				return testkit.True(err == nil && !ok && !s.Degraded(), "lookup: found %v, err %v, degraded %v", ok, err, s.Degraded())
			})
		})
	}
}

// TestRedisCluster runs the admin and the store against a real 3-node
// Redis Cluster.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	admin := &keystore.RedisAdmin{Client: redisClient(t, cl.Addrs...)}
	s := openRedisStore(t, redisClient(t, cl.Addrs...))
	testkit.Eventually(t, testkit.HangCheck, "ready", func() error {
		return testkit.True(s.Ready() && !s.Degraded(), "ready %v, degraded %v", s.Ready(), s.Degraded())
	})
	key, rec, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Test, Context: ctxUUID})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "issued on cluster", func() error { return testkit.Equal(state(t, s, key), keystore.Active) })
	if _, err := admin.Revoke(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "revoked on cluster", func() error { return testkit.Equal(state(t, s, key), keystore.Revoked) })
}

// TestRedisImport moves a file keystore's records into Redis once.
func TestRedisImport(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	fa := &keystore.FileAdmin{Path: t.TempDir() + "/keys.yaml"}
	key, _, err := fa.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := fa.List(context.Background())
	admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
	if added, skipped, err := admin.Import(context.Background(), recs); err != nil || added != 1 || skipped != 0 {
		t.Fatalf("import: %d %d %v", added, skipped, err)
	}
	if added, skipped, err := admin.Import(context.Background(), recs); err != nil || added != 0 || skipped != 1 {
		t.Fatalf("second import: %d %d %v", added, skipped, err)
	}
	s := openRedisStore(t, redisClient(t, rs.Addr))
	testkit.Eventually(t, testkit.HangCheck, "imported key", func() error { return testkit.Equal(state(t, s, key), keystore.Active) })
}

// TestLookupAgain: each store's Lookup answers the same record twice,
// for a key in the index and for one a Redis replica reads on a miss
// (the first lookup), with the admin side's fields left zero.
func TestLookupAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: "a", Permissions: []string{"extraction:sync"}}
	rs := redistest.Start(t)
	radmin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
	indexed, _, err := radmin.Issue(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	rstore := openRedisStore(t, redisClient(t, rs.Addr))
	testkit.Eventually(t, testkit.HangCheck, "store loaded", func() error { return testkit.True(rstore.Ready(), "not ready") })
	// Issued behind the store's back (no announcement read yet, or
	// none at all): a miss that Redis answers.
	missed, _, err := (&keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}).Issue(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	fkey, _, err := (&keystore.FileAdmin{Path: path}).Issue(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fstore, err := keystore.OpenFile(keystore.FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fstore.Close() })
	type store interface {
		Lookup(context.Context, keystore.Hash) (keystore.Record, bool, error)
	}
	unknown := "svc_live_" + strings.Repeat("A", 30)
	tests := []struct {
		name  string
		store store
		key   string
		found bool
	}{
		{"redis, in the index", rstore, indexed, true},
		{"redis, read on a miss", rstore, missed, true},
		{"redis, unknown", rstore, unknown, false},
		{"file", fstore, fkey, true},
		{"file, unknown", fstore, unknown, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := keystore.HashKey(tc.key)
			// The first lookup of a key the replica has not heard of
			// yet is its miss, read from Redis.
			got, ok, err := tc.store.Lookup(ctx, h)
			if err != nil || ok != tc.found {
				t.Fatalf("first Lookup: found %v, %v; want found %v", ok, err, tc.found)
			}
			want, ok, err := tc.store.Lookup(ctx, h)
			if err != nil || ok != tc.found {
				t.Fatalf("second Lookup: found %v, %v; want found %v", ok, err, tc.found)
			}
			if !tc.found {
				want = keystore.Record{}
			} else if !got.CreatedAt.IsZero() || !got.RevokedAt.IsZero() || got.ReplacedBy != "" {
				// Lookup's comment: the admin side's fields are left
				// zero, by a record read from Redis on a miss too.
				t.Errorf("Lookup filled CreatedAt %v, RevokedAt %v, ReplacedBy %q; want them zero", got.CreatedAt, got.RevokedAt, got.ReplacedBy)
			}
			// A miss read from Redis and the index's answer after it
			// are the same record.
			if !reflect.DeepEqual(got, want) {
				t.Errorf("first Lookup %+v\nsecond %+v", got, want)
			}
		})
	}
}
