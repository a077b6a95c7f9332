package keystore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// purger is what both admins offer for purges.
type purger interface {
	adminStore
	Purge(ctx context.Context, q keystore.PurgeQuery, each func([]keystore.Record) error) (more bool, err error)
}

// purge runs p's purge and returns the records it handed to each, in
// batches of at most max.
func purge(t *testing.T, p purger, q keystore.PurgeQuery, max int) (recs []keystore.Record, more bool, err error) {
	t.Helper()
	more, err = p.Purge(context.Background(), q, func(batch []keystore.Record) error {
		if len(batch) == 0 || len(batch) > max {
			t.Errorf("a batch of %d records, want 1 to %d", len(batch), max)
		}
		recs = append(recs, batch...)
		return nil
	})
	return recs, more, err
}

// TestPurgeOnEveryBackend: a purge deletes exactly the keys that ended
// (revoked, expired, past a rotation's grace) before its cutoff, and
// keeps active keys and the ones that ended since; a dry run names the
// same keys and deletes nothing; a limit purges that many and says there
// are more; the replicas stop knowing the purged keys (an unknown key:
// 401) and still know the others.
func TestPurgeOnEveryBackend(t *testing.T) {
	t.Parallel()
	limits := testLimits(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	backends := map[string]func(t *testing.T, clock func() time.Time) (purger, lookupStore){
		"file": func(t *testing.T, clock func() time.Time) (purger, lookupStore) {
			path := filepath.Join(t.TempDir(), "keys.yaml")
			admin := &keystore.FileAdmin{Path: path, Now: clock}
			if _, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test}); err != nil {
				t.Fatal(err) // the file exists before the store opens it
			}
			s, err := keystore.OpenFile(keystore.FileConfig{Path: path, Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return admin, s
		},
		"redis": func(t *testing.T, clock func() time.Time) (purger, lookupStore) {
			rs := redistest.Start(t)
			return &keystore.RedisAdmin{Client: redisClient(t, rs.Addr), Now: clock, PageSize: 2}, openSubscribed(t, rs.Addr, limits) // batches of 2
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var at atomic.Int64
			set := func(t time.Time) { at.Store(t.UnixNano()) }
			clock := func() time.Time { return time.Unix(0, at.Load()).UTC() }
			set(now.Add(-200 * 24 * time.Hour))
			admin, store := open(t, clock)
			keys := map[string]string{} // name → key
			recs := map[string]keystore.Record{}
			issue := func(name string, expiresIn time.Duration) {
				t.Helper()
				k, r, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: name, ExpiresIn: expiresIn})
				if err != nil {
					t.Fatal(err)
				}
				keys[name], recs[name] = k, r
			}
			issue("active", 0)
			issue("revoked long ago", 0)
			issue("revoked lately", 0)
			issue("expired long ago", 100*24*time.Hour+time.Hour)
			issue("expires later", 300*24*time.Hour)
			issue("rotated long ago", 0)
			set(now.Add(-100 * 24 * time.Hour))
			if _, err := admin.Revoke(ctx, recs["revoked long ago"].ID); err != nil {
				t.Fatal(err)
			}
			k, r, err := admin.Rotate(ctx, recs["rotated long ago"].ID, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			keys["its successor"], recs["its successor"] = k, r
			set(now.Add(-2 * time.Hour))
			issue("expired lately", 30*time.Minute)
			if _, err := admin.Revoke(ctx, recs["revoked lately"].ID); err != nil {
				t.Fatal(err)
			}
			set(now)

			gone := []string{"revoked long ago", "expired long ago", "rotated long ago"}
			kept := []string{"active", "revoked lately", "expires later", "its successor", "expired lately"}
			names := func(rs []keystore.Record) []string {
				var out []string
				for _, r := range rs {
					for n, x := range recs {
						if x.ID == r.ID {
							out = append(out, n)
						}
					}
				}
				slices.Sort(out)
				return out
			}
			want := slices.Sorted(slices.Values(gone))
			q := keystore.PurgeQuery{Before: now.Add(-24 * time.Hour), Now: now}

			dry := q
			dry.DryRun = true
			recs0, more, err := purge(t, admin, dry, 3)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(recs0); !slices.Equal(got, want) || more {
				t.Errorf("dry run: %v, more %v; want %v", got, more, want)
			}
			all, err := admin.List(ctx)
			if err != nil || len(all) < len(recs) {
				t.Fatalf("after a dry run the store lists %d keys (%v), want all %d", len(all), err, len(recs))
			}

			first := q
			first.Limit = 2
			purged, more, err := purge(t, admin, first, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(purged) != 2 || !more {
				t.Errorf("limit 2: purged %v, more %v; want 2 and more", names(purged), more)
			}
			rest, more, err := purge(t, admin, q, 3)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(append(purged, rest...)); !slices.Equal(got, want) || more {
				t.Errorf("purged %v (more %v), want %v", got, more, want)
			}
			if again, _, err := purge(t, admin, q, 3); err != nil || len(again) != 0 {
				t.Errorf("a second purge: %v, %v; want nothing", names(again), err)
			}
			left, err := admin.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, w := names(left), slices.Sorted(slices.Values(kept)); !slices.Equal(got, w) {
				t.Errorf("after the purge the store lists %v, want %v", got, w)
			}
			testkit.Eventually(t, testkit.HangCheck, "the replica drops the purged keys and keeps the others", func() error {
				for _, n := range append(slices.Clone(gone), kept...) {
					_, ok, err := store.Lookup(ctx, keystore.HashKey(keys[n]))
					if err != nil {
						return err
					}
					if ok == slices.Contains(gone, n) {
						return fmt.Errorf("%s: known %v", n, ok)
					}
				}
				return nil
			})
		})
	}
}

// TestRedisPurgeKeepsAChangedKey: a key changed between the purge's read
// and its delete (another admin extends an expired key) is kept, and the
// purge does not count it.
func TestRedisPurgeKeepsAChangedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	now := time.Now()
	admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr), Now: func() time.Time { return now.Add(-48 * time.Hour) }}
	var ids []string
	for range 3 {
		_, r, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, ExpiresIn: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// The purge's client: just before its deletes go out, another admin
	// extends the second key.
	c := redisClient(t, rs.Addr)
	var once atomic.Bool
	c.AddHook(pipelineHook(func() {
		if once.CompareAndSwap(false, true) {
			u := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
			if _, err := u.UpdateKey(ctx, ids[1], func(r keystore.Record) (keystore.Record, error) {
				r.ExpiresAt = now.Add(time.Hour)
				return r, nil
			}); err != nil {
				t.Error(err)
			}
		}
	}))
	purging := &keystore.RedisAdmin{Client: c}
	recs, _, err := purge(t, purging, keystore.PurgeQuery{Before: now.Add(-time.Hour), Now: now}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if want := []string{ids[0], ids[2]}; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Errorf("purged %v, want %v (not the key extended meanwhile)", got, want)
	}
	if r, err := admin.Get(ctx, ids[1]); err != nil || !r.ExpiresAt.After(now) {
		t.Errorf("the extended key: %+v, %v", r, err)
	}
}

// pipelineHook runs before each pipeline the client sends with an EVALSHA
// in it (the purge's compare-and-delete page).
type pipelineHook func()

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				h()
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestRedisAdminScansInSmallPages: every HSCAN of the admin (lists, a
// purge, consumers, admin tokens) asks for at most 100 records, as a
// replica's full pass does: at a million keys a COUNT of 1000 kept
// redis-server busy 1.4 ms per HSCAN on average (up to 7.7 ms), with every
// replica's limiter calls waiting behind it; 100 took 0.14 ms.
func TestRedisAdminScansInSmallPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	var counts []int64
	var mu sync.Mutex
	c.AddHook(commandHook(func(cmd redis.Cmder) {
		if cmd.Name() == "hscan" {
			args := cmd.Args()
			mu.Lock()
			counts = append(counts, args[len(args)-1].(int64))
			mu.Unlock()
		}
	}))
	admin := &keystore.RedisAdmin{Client: c}
	for range 5 {
		if _, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.List(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ListConsumers(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ListAdminTokens(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := purge(t, admin, keystore.PurgeQuery{Before: time.Now(), Now: time.Now(), DryRun: true}, 1000); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(counts) < 2*256+2 {
		t.Fatalf("%d HSCANs, want the buckets' of two reads of every record and more", len(counts))
	}
	for _, n := range counts {
		if n > 100 {
			t.Fatalf("an HSCAN with COUNT %d, want at most 100", n)
		}
	}
}

// commandHook runs f on each command the client sends alone.
type commandHook func(redis.Cmder)

func (h commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h(cmd)
		return next(ctx, cmd)
	}
}
func (h commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
