package keystore_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// consumerBucket is the hash that holds the consumer with id (the
// layout in redis_layout.go, written out again here).
func consumerBucket(id string) string {
	return fmt.Sprintf("keygate:keystore:{ks:%02x}:consumers", crc32.ChecksumIEEE([]byte(id))%256)
}

// keyRate is the rate a store resolves for key; 0 if it has none.
func keyRate(t *testing.T, s *keystore.RedisStore, key string) float64 {
	t.Helper()
	r, ok, err := s.Lookup(context.Background(), keystore.HashKey(key))
	if err != nil || !ok || r.Limits == nil {
		return 0
	}
	return r.Limits.Limit.Rate
}

// openWithLimits is a replica that resolves limits with testLimits.
func openWithLimits(t *testing.T, c redis.UniversalClient) *keystore.RedisStore {
	t.Helper()
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c, Timeout: testTimeout, PageSize: 3, PollInterval: 200 * time.Millisecond, ResyncInterval: time.Hour, Limits: testLimits(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "replica ready", func() error { return testkit.True(s.Ready(), "not ready") })
	return s
}

// copied lists the consumers in s's copy, as "id/plan".
func copied(t *testing.T, s *keystore.RedisStore) []string {
	t.Helper()
	var out []string
	if _, ok := s.ConsumersWhere(func(c *keystore.Consumer) bool { out = append(out, c.ID+"/"+c.Plan); return false }); !ok {
		t.Fatal("the replica holds no copy of the consumers")
	}
	return out
}

// planRates is what testLimits gives a key of a consumer on each plan
// ("" is the environment's default).
var planRates = map[string]float64{"": 50, "pro": 200, "team": 20}

// TestRedisConsumersSpreadOverTheCluster: on a 3-node Cluster, the
// consumers are spread over every node (no hash holds them all), a
// replica reads every one of them, and a consumer's change reaches its
// key.
func TestRedisConsumersSpreadOverTheCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: redisClient(t, cl.Addrs...), PageSize: 16}
	cons := make([]keystore.Consumer, 60)
	for i := range cons {
		c, err := keystore.NewConsumer(keystore.Consumer{Name: fmt.Sprintf("customer %d", i), Plan: []string{"", "pro", "team"}[i%3]}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cons[i] = c
	}
	if added, _, err := admin.ImportConsumers(ctx, cons); err != nil || added != len(cons) {
		t.Fatalf("import: %d added, %v", added, err)
	}
	key, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live, Consumer: cons[1].ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		if got, err := n.Do("KEYS", "keygate:keystore:{ks:*}:consumers"); err != nil || got == "0" {
			t.Errorf("node %s holds no bucket of consumers (%q, %v): the consumers are not spread", n.Addr, got, err)
		}
	}

	s := openWithLimits(t, redisClient(t, cl.Addrs...))
	seen := copied(t, s)
	var want []string
	for _, c := range cons {
		want = append(want, c.ID+"/"+c.Plan)
	}
	slices.Sort(seen)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Errorf("the replica read %d consumers, want the %d imported (%v)", len(seen), len(want), seen)
	}
	if got := keyRate(t, s, key); got != 200 {
		t.Errorf("the key of a consumer on plan pro: rate %v", got)
	}
	got, err := admin.GetConsumers(ctx, []string{cons[59].ID, cons[0].ID, cons[30].ID})
	if err != nil || len(got) != 3 || got[0].ID != cons[59].ID || got[1].ID != cons[0].ID || got[2].ID != cons[30].ID {
		t.Errorf("GetConsumers across the cluster: %v, %v", got, err)
	}
	if _, err := admin.UpdateConsumer(ctx, cons[1].ID, func(c keystore.Consumer) (keystore.Consumer, error) {
		c.Plan = "team"
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "the plan change on the cluster", func() error { return testkit.Equal(keyRate(t, s, key), 20.0) })
	if _, err := admin.UpdateConsumer(ctx, "con_missing", func(c keystore.Consumer) (keystore.Consumer, error) { return c, nil }); err == nil {
		t.Error("an update of a consumer that does not exist succeeded")
	}
}
