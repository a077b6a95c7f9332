package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// issueMany issues n keys through admin and returns them.
func issueMany(t *testing.T, admin adminStore, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		k, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	return keys
}

func openPaged(t *testing.T, c redis.UniversalClient, page int) *keystore.RedisStore {
	t.Helper()
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c, Timeout: testTimeout, PageSize: page, PollInterval: 200 * time.Millisecond, ResyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRedisLoadsInPagesOnEveryLayout: a store loads every key in pages
// of two, from a single Redis and from a 3-node Cluster, where the keys
// spread over every node, and no command of the load reads the whole
// key set (no HGETALL reaches the server).
func TestRedisLoadsInPagesOnEveryLayout(t *testing.T) {
	t.Parallel()
	setups := []struct {
		name  string
		addrs func(t *testing.T) ([]string, []*redistest.Server)
	}{
		{"single", func(t *testing.T) ([]string, []*redistest.Server) {
			rs := redistest.Start(t)
			return []string{rs.Addr}, []*redistest.Server{rs}
		}},
		{"cluster", func(t *testing.T) ([]string, []*redistest.Server) {
			cl := redistest.StartCluster(t, 3)
			return cl.Addrs, cl.Nodes
		}},
	}
	for _, tc := range setups {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addrs, nodes := tc.addrs(t)
			admin := &keystore.RedisAdmin{Client: redisClient(t, addrs...)}
			keys := issueMany(t, admin, 60)
			for _, n := range nodes {
				if _, err := n.Do("CONFIG", "RESETSTAT"); err != nil {
					t.Fatal(err)
				}
			}
			s := openPaged(t, redisClient(t, addrs...), 2)
			testkit.Eventually(t, testkit.HangCheck, "ready", func() error { return testkit.True(s.Ready(), "not ready") })
			if s.Len() != len(keys) {
				t.Errorf("loaded %d keys, want %d", s.Len(), len(keys))
			}
			for _, k := range keys {
				if state(t, s, k) != keystore.Active {
					t.Fatalf("key not active after the load")
				}
			}
			for _, n := range nodes {
				stats, err := n.Do("INFO", "commandstats")
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(stats, "cmdstat_hgetall") {
					t.Errorf("%s: the load sent HGETALL:\n%s", n.Addr, stats)
				}
				if len(nodes) > 1 {
					if size, _ := n.Do("DBSIZE"); size == "0" {
						t.Errorf("%s holds no keystore key: the key set is not spread over the cluster", n.Addr)
					}
				}
			}
			// A change reaches the loaded store.
			recs, err := admin.List(context.Background())
			if err != nil || len(recs) != len(keys) {
				t.Fatalf("list: %d, %v", len(recs), err)
			}
			if _, err := admin.Revoke(context.Background(), recs[0].ID); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, testkit.HangCheck, "revocation", func() error {
				n := 0
				for _, k := range keys {
					if state(t, s, k) == keystore.Revoked {
						n++
					}
				}
				return testkit.Equal(n, 1)
			})
		})
	}
}

// TestRedisLostMessageCostsTheChange: a change that is logged but whose
// message is lost reaches the store by its poll of the change log, and
// a log trimmed past the store's position makes it re-read everything,
// changes that were never logged included.
func TestRedisLostMessageCostsTheChange(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	s := openPaged(t, c, 2)
	testkit.Eventually(t, testkit.HangCheck, "ready", func() error { return testkit.True(s.Ready(), "not ready") })
	ctx := context.Background()
	// Issue on another prefix, copy the record over and log it by hand,
	// with no message.
	other := &keystore.RedisAdmin{Client: c, Prefix: "other:"}
	copyOver := func() (string, keystore.Record) {
		key, rec, err := other.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
		if err != nil {
			t.Fatal(err)
		}
		bucket := fmt.Sprintf("keystore:{ks:%02x}:records", rec.Hash[0])
		v, err := c.HGet(ctx, "other:"+bucket, rec.Hash.String()).Result()
		if err != nil {
			t.Fatal(err)
		}
		c.HSet(ctx, "keygate:"+bucket, rec.Hash.String(), v)
		return key, rec
	}
	key, rec := copyOver()
	c.XAdd(ctx, &redis.XAddArgs{Stream: "keygate:keystore:{ks}:log", Values: []string{"c", rec.Hash.String()}})
	testkit.Eventually(t, testkit.HangCheck, "logged change without a message", func() error { return testkit.Equal(s.Len(), 1) })
	if state(t, s, key) != keystore.Active {
		t.Error("key not active")
	}

	// Trim the log entirely, store a record without logging it, then log
	// another change: the store finds its position gone and re-reads.
	c.Del(ctx, "keygate:keystore:{ks}:log")
	unlogged, _ := copyOver()
	admin := &keystore.RedisAdmin{Client: c}
	logged := issueMany(t, admin, 1)[0]
	testkit.Eventually(t, testkit.HangCheck, "full re-read after the gap", func() error { return testkit.Equal(s.Len(), 3) })
	for _, k := range []string{unlogged, logged} {
		if state(t, s, k) != keystore.Active {
			t.Error("key not active after the re-read")
		}
	}
}

// hscans is how many HSCANs the server has served.
func hscans(t *testing.T, c redis.UniversalClient) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_hscan:calls="); ok {
			var n int
			fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &n)
			return n
		}
	}
	return 0
}

// TestRedisGetReadsOneKey: the admin reads one key by id, as List has it,
// without scanning the key set (the admin API shows a key after every
// issue and revocation: a scan there made each change cost the whole
// key set).
func TestRedisGetReadsOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	admin := &keystore.RedisAdmin{Client: c}
	var ids []string
	for i := 0; i < 20; i++ {
		_, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	if _, err := admin.Revoke(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	all, err := admin.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := hscans(t, c)
	for _, want := range all {
		got, err := admin.Get(ctx, want.ID)
		if err != nil {
			t.Fatalf("Get(%s): %v", want.ID, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Get(%s) = %+v, List has %+v", want.ID, got, want)
		}
	}
	if _, err := admin.Get(ctx, "key_0000000000000000"); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v, want ErrNotFound", err)
	}
	// GetHashes (a consumer's keys by hash, in pages of 10 here)
	// reads the same records, in List's order, and leaves out a
	// hash with no record.
	hs := []keystore.Hash{keystore.HashKey("svc_live_unknown")}
	for i := len(all) - 1; i >= 0; i-- {
		hs = append(hs, all[i].Hash)
	}
	paged := &keystore.RedisAdmin{Client: c, PageSize: 10}
	got, err := paged.GetHashes(ctx, hs)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(all) {
		t.Errorf("GetHashes = %+v, List has %+v", got, all)
	}
	if n := hscans(t, c) - before; n != 0 {
		t.Errorf("Get and GetHashes of %d keys ran %d HSCANs", len(all), n)
	}
}

// TestRedisListMatchingKeepsWhatListHas: a filtered list (a consumer's
// keys where no replica's index can find them: `keygate keys list
// --consumer`, a replica still loading) lists exactly the records of List
// that the filter keeps, in List's order, while it holds only those it
// keeps (BenchmarkRedisListMatching).
func TestRedisListMatchingKeepsWhatListHas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	admin := &keystore.RedisAdmin{Client: c, PageSize: 3}
	var last keystore.Record
	for i := range 30 {
		_, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: fmt.Sprint("k", i%4)})
		if err != nil {
			t.Fatal(err)
		}
		last = rec
	}
	all, err := admin.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 30 {
		t.Fatalf("List has %d records, want 30", len(all))
	}
	for _, name := range []string{"k0", "k3", "k9"} {
		keep := func(r keystore.Record) bool { return r.Name == name || r.ID == last.ID }
		got, err := admin.ListMatching(ctx, keep)
		if err != nil {
			t.Fatal(err)
		}
		var want []keystore.Record
		for _, r := range all {
			if keep(r) {
				want = append(want, r)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ListMatching(name %s) = %v\nwant %v", name, got, want)
		}
	}
}

// BenchmarkRedisListMatching: a list of one consumer's keys read by a
// scan of 20,000 keys in redis-server holds those keys, not the key set:
// compare B/op of "every record" and "one consumer's" (-benchmem).
func BenchmarkRedisListMatching(b *testing.B) {
	ctx := context.Background()
	rs := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	b.Cleanup(func() { _ = c.Close() })
	admin := &keystore.RedisAdmin{Client: c}
	recs := make([]keystore.Record, 20000)
	for i := range recs {
		req := keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID}
		_, rec, err := keystore.NewRecord(req, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if i%1000 == 0 {
			rec.Consumer = "con_0000000000000001"
		}
		recs[i] = rec
	}
	if _, _, err := admin.Import(ctx, recs); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		keep func(keystore.Record) bool
	}{
		{"every record", func(keystore.Record) bool { return true }},
		{"one consumer's", func(r keystore.Record) bool { return r.Consumer == "con_0000000000000001" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := admin.ListMatching(ctx, bc.keep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
