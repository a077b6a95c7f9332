package usage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/usage"
)

// TestRedisLastUsesReadThePreviousLayoutUntilMoved: last uses that a
// replica of the build before the buckets wrote (one sorted set per name)
// are read beside the buckets', the later of the two winning; a purge
// forgets both; MoveLastUses moves the old sets' members into the
// buckets, keeping the later last use, and deletes them, after which
// every read answers the same.
func TestRedisLastUsesReadThePreviousLayoutUntilMoved(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// This build flushes key_b and key_c at minute 5.
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	c := usage.NewCounters(0)
	c.Record("key_b", usage.ByAPIKey, usage.Admitted, 1, at(5))
	c.Record("key_c", usage.ByAPIKey, usage.Admitted, 1, at(5))
	c.Record("key_gone", usage.ByAPIKey, usage.Admitted, 1, at(5))
	if err := s.Flush(ctx, c.Drain(), at(5)); err != nil {
		t.Fatal(err)
	}
	// The previous build's replicas wrote key_a and key_b earlier, and
	// key_c later.
	for _, set := range []string{"kg:usage:last", "kg:usage:last_api_key"} {
		client.ZAdd(ctx, set, redis.Z{Score: float64(at(1).UnixMilli()), Member: "key_a"},
			redis.Z{Score: float64(at(2).UnixMilli()), Member: "key_b"},
			redis.Z{Score: float64(at(9).UnixMilli()), Member: "key_c"},
			redis.Z{Score: float64(at(3).UnixMilli()), Member: "key_gone"})
	}
	want := map[string]time.Time{"key_a": at(1), "key_b": at(5), "key_c": at(9)}
	ids := []string{"key_a", "key_b", "key_c", "key_never"}
	check := func(stage string, s *usage.RedisStore) {
		t.Helper()
		got, err := s.LastUsed(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: LastUsed = %v, want %v", stage, got, want)
		}
		_, last, err := s.Read(ctx, ids, time.Hour, at(10))
		if err != nil || fmt.Sprint(last) != fmt.Sprint(want) {
			t.Errorf("%s: Read's last uses = %v, %v; want %v", stage, last, err, want)
		}
		m, err := s.Methods(ctx, ids, 24*time.Hour, at(10))
		if err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			if !m[id].LastAPIKey.Equal(w) {
				t.Errorf("%s: Methods' last API key use of %s = %v, want %v", stage, id, m[id].LastAPIKey, w)
			}
		}
	}
	fresh := func() *usage.RedisStore { return &usage.RedisStore{Client: client, Prefix: "kg:"} }
	check("both layouts", fresh())

	// A purge forgets a key in both.
	if err := fresh().Forget(ctx, []string{"key_gone"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := fresh().LastUsed(ctx, []string{"key_gone"}); len(got) != 0 {
		t.Errorf("a forgotten key still has a last use: %v", got)
	}

	mover := fresh()
	moved, err := mover.MoveLastUses(ctx)
	if err != nil || moved != 6 {
		t.Fatalf("MoveLastUses: %d, %v; want 6 (3 keys in 2 sets)", moved, err)
	}
	if n, _ := client.Exists(ctx, "kg:usage:last", "kg:usage:last_api_key").Result(); n != 0 {
		t.Errorf("%d sorted sets of the previous layout left after the move", n)
	}
	check("after the move", mover)
	check("after the move, a fresh store", fresh())
	if moved, err := mover.MoveLastUses(ctx); err != nil || moved != 0 {
		t.Errorf("a second MoveLastUses: %d, %v; want none", moved, err)
	}
}

// TestRedisLastUsesSpreadOverTheCluster: on a 3-node Cluster, the last
// uses of many keys land on every node, and read back whole.
func TestRedisLastUsesSpreadOverTheCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	now := time.Now().Truncate(time.Millisecond)
	c := usage.NewCounters(0)
	var ids []string
	for i := range 300 {
		id := fmt.Sprintf("key_%04d", i)
		ids = append(ids, id)
		c.Record(id, usage.ByAPIKey, usage.Admitted, 1, now)
	}
	if err := s.Flush(ctx, c.Drain(), now); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		if got, err := n.Do("KEYS", "kg:usage:last:{lu:*}"); err != nil || got == "0" {
			t.Errorf("node %s holds no sorted set of last uses (%q, %v)", n.Addr, got, err)
		}
	}
	got, err := s.LastUsed(ctx, ids)
	if err != nil || len(got) != len(ids) {
		t.Fatalf("LastUsed on the cluster: %d of %d, %v", len(got), len(ids), err)
	}
	for id, at := range got {
		if !at.Equal(now.UTC()) {
			t.Errorf("%s: last use %v, want %v", id, at, now.UTC())
		}
	}
}
