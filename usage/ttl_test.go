package usage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/usage"
)

// TestRedisFlushCutLeavesNoKeyWithoutTTL: a flush whose connection is
// cut part-way (Redis hangs, the client's write or read times out and it
// drops the connection; Redis then runs the commands that reached it)
// never leaves a usage hash without a TTL, which would keep an idle key's
// memory in Redis for good, on a single Redis and on a Cluster. Each
// round cuts a flush of many keys at another point.
func TestRedisFlushCutLeavesNoKeyWithoutTTL(t *testing.T) {
	short := func(o *redis.Options) { o.WriteTimeout, o.ReadTimeout = 50*time.Millisecond, 50*time.Millisecond }
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		cutFlushes(t, []*redistest.Server{srv}, func() redis.UniversalClient { return srv.Client(t, short) })
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		cutFlushes(t, cl.Nodes, func() redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRedirects: -1,
				WriteTimeout: 50 * time.Millisecond, ReadTimeout: 50 * time.Millisecond})
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
}

// cutFlushes flushes 20,000 keys into nodes, frozen, with a client of
// short timeouts from newClient, 8 times, and checks every usage hash on
// every node has a TTL.
func cutFlushes(t *testing.T, nodes []*redistest.Server, newClient func() redis.UniversalClient) {
	ctx := context.Background()
	now := time.Date(2026, 11, 24, 10, 30, 0, 0, time.UTC)
	checks := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		checks[i] = n.Client(t)
	}
	failed := 0
	for round := range 8 {
		// Redis has run what reached it of the last round's flush (some
		// hundred script calls) before this round's short timeouts start.
		for _, c := range checks {
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		client := newClient()
		s := &usage.RedisStore{Client: client, Prefix: "kg:"}
		// The connections are up before Redis hangs, and Redis knows the
		// flush's script, so that what reaches it runs.
		warm := usage.NewCounters(0)
		for i := range 100 {
			warm.Record(fmt.Sprintf("warm_%d", i), usage.ByAPIKey, usage.Admitted, 1, now)
		}
		if err := s.Flush(ctx, warm.Drain(), now); err != nil {
			t.Fatal(err)
		}
		c := usage.NewCounters(0)
		for i := range 20_000 {
			// Ids of another length each round move the cut to another
			// point of a key's commands.
			c.Record(fmt.Sprintf("key_%d_%0*d", round, 5+round, i), usage.ByAPIKey, usage.Admitted, 1000, now)
		}
		for _, n := range nodes {
			n.Freeze()
		}
		if err := s.Flush(ctx, c.Drain(), now); err != nil {
			failed++
		}
		for _, n := range nodes {
			n.Thaw()
		}
		_ = client.Close()
	}
	if failed == 0 {
		t.Fatal("no flush into a hung Redis failed: the test cut nothing")
	}
	keys, noTTL := 0, []string{}
	for _, check := range checks {
		if err := check.Ping(ctx).Err(); err != nil { // Redis has run what reached it
			t.Fatal(err)
		}
		var cursor uint64
		for {
			ks, next, err := check.Scan(ctx, cursor, "kg:usage:{key_*", 1000).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range ks {
				keys++
				if ttl, err := check.PTTL(ctx, k).Result(); err != nil || ttl == -1 {
					noTTL = append(noTTL, k)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	t.Logf("%d of 8 flushes cut; %d usage hashes of them written", failed, keys)
	if keys == 0 {
		t.Fatal("no part of a cut flush reached Redis: the test cut nothing that ran")
	}
	if len(noTTL) > 0 {
		t.Errorf("%d usage hashes have no TTL, e.g. %v", len(noTTL), noTTL[:min(3, len(noTTL))])
	}
}

// TestRedisClusterFlush: on a Redis Cluster (where a transaction may
// not span hash slots) a flush of keys in many slots arrives whole, each
// hash with its TTL.
func TestRedisClusterFlush(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	now := time.Now()
	c := usage.NewCounters(0)
	const n = 250
	for i := range n {
		c.Record(fmt.Sprintf("key_%03d", i), usage.ByAPIKey, usage.Admitted, 10, now)
	}
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	if err := s.Flush(ctx, c.Drain(), now); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("key_%03d", i)
	}
	got, last, err := s.Read(ctx, ids, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Admitted != n || got.BytesIn != 10*n || len(last) != n {
		t.Errorf("read back %+v and %d last uses, want %d admitted, %d bytes, %d last uses", got, len(last), n, 10*n, n)
	}
	for _, id := range ids[:10] {
		if ttl, err := client.PTTL(ctx, "kg:usage:{"+id+"}:"+now.UTC().Format("2006010215")).Result(); err != nil || ttl <= 0 {
			t.Errorf("%s: TTL %v, %v", id, ttl, err)
		}
	}
}

// TestRedisFlushGivesEveryHashItsTTL: whichever outcome or method first
// creates a key's hour hash or day hash, in whichever flush, the hash has
// its TTL (about Retention for the hour's, MethodRetention plus a day for
// the day's), and a later flush that adds new fields keeps one.
func TestRedisFlushGivesEveryHashItsTTL(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	now := time.Date(2026, 11, 24, 10, 30, 0, 0, time.UTC)
	flush := func(id string, m usage.Method, o usage.Outcome) {
		t.Helper()
		c := usage.NewCounters(0)
		c.Record(id, m, o, 7, now)
		if err := s.Flush(ctx, c.Drain(), now); err != nil {
			t.Fatal(err)
		}
	}
	flush("a", usage.ByAPIKey, usage.RefusedRate)
	flush("a", usage.ByAPIKey, usage.Admitted)
	flush("b", usage.ByToken, usage.Admitted)
	flush("b", usage.ByAPIKey, usage.RefusedQuota)
	flush("c", usage.ByToken, usage.RefusedContext)
	keys, err := client.Keys(ctx, "kg:usage:{*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 6 { // each key: an hour's hash and a day's hash by method
		t.Errorf("usage hashes %v, want 6", keys)
	}
	for _, k := range keys {
		ttl, err := client.TTL(ctx, k).Result()
		want := usage.Retention
		if strings.Contains(k, ":methods:") {
			want = usage.MethodRetention + 24*time.Hour
		}
		if err != nil || ttl <= want-time.Minute || ttl > want {
			t.Errorf("%s: TTL %v, %v; want about %v", k, ttl, err, want)
		}
	}
	got, _, err := s.Read(ctx, []string{"a", "b", "c"}, time.Hour, now)
	if err != nil || got.Admitted != 2 || got.Rate != 1 || got.Quota != 1 || got.Context != 1 || got.BytesIn != 5*7 {
		t.Errorf("read back %+v, %v", got, err)
	}
	m, err := s.Methods(ctx, []string{"a", "b", "c"}, 24*time.Hour, now)
	if err != nil || m["a"].APIKey != 2 || m["b"].APIKey != 1 || m["b"].Bearer != 1 || m["c"].Bearer != 1 {
		t.Errorf("methods %+v, %v", m, err)
	}
}
