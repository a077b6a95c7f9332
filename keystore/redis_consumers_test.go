package keystore_test

import (
	"context"
	"encoding/json"
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

// legacyConsumers is the hash that held every consumer before they were
// spread over buckets.
const legacyConsumers = "keygate:keystore:{ks}:consumers"

// layoutMarker says that the consumers have moved to buckets.
const layoutMarker = "keygate:keystore:{ks}:layout"

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
	testkit.Eventually(t, 5*time.Second, "replica ready", func() error { return testkit.True(s.Ready(), "not ready") })
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

// TestRedisPreviousConsumersLoadAndMove: a store whose consumers are in
// the one hash of the previous layout (as every store written before the
// buckets is) loads as it is: a replica resolves every key's plan, and an
// admin reads every consumer. Until `keygate keys migrate`, admins write
// consumers to that hash, where replicas of the previous build read
// them. MoveConsumers moves every consumer into its bucket and removes
// the old hash; the replica keeps every key's plan, a fresh replica
// loads the new layout, and an admin that wrote the old hash before the
// move writes the buckets after it.
func TestRedisPreviousConsumersLoadAndMove(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	ctx := context.Background()
	setup := &keystore.RedisAdmin{Client: c}
	plans := []string{"pro", "", "team", "pro", "", "team", "pro"}
	var cons []keystore.Consumer
	var keys []string
	for i, plan := range plans {
		con, err := keystore.NewConsumer(keystore.Consumer{Name: fmt.Sprintf("customer %d", i), Plan: plan}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := setup.CreateConsumer(ctx, con); err != nil {
			t.Fatal(err)
		}
		key, _, err := setup.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live, Consumer: con.ID})
		if err != nil {
			t.Fatal(err)
		}
		cons, keys = append(cons, con), append(keys, key)
	}
	// A new store keeps its consumers in buckets from its first write.
	// Put them back where the previous layout kept them, without the
	// marker.
	if n, _ := c.Exists(ctx, layoutMarker).Result(); n != 1 {
		t.Fatal("a new store has no layout marker after its first write")
	}
	for _, con := range cons {
		v, err := c.HGet(ctx, consumerBucket(con.ID), con.ID).Result()
		if err != nil {
			t.Fatalf("consumer %s is not in its bucket %s: %v", con.ID, consumerBucket(con.ID), err)
		}
		c.HSet(ctx, legacyConsumers, con.ID, v)
		c.HDel(ctx, consumerBucket(con.ID), con.ID)
	}
	c.Del(ctx, layoutMarker)

	s := openWithLimits(t, redisClient(t, rs.Addr))
	for i, key := range keys {
		if got := keyRate(t, s, key); got != planRates[plans[i]] {
			t.Errorf("key %d on the previous layout: rate %v, want %v (plan %q)", i, got, planRates[plans[i]], plans[i])
		}
	}
	if got := copied(t, s); len(got) != len(cons) {
		t.Errorf("the replica's copy holds %d consumers of the previous layout, want %d", len(got), len(cons))
	}

	admin := &keystore.RedisAdmin{Client: c, PageSize: 2}
	if got, err := admin.GetConsumer(ctx, cons[2].ID); err != nil || got.Plan != "team" {
		t.Errorf("GetConsumer on the previous layout: %+v, %v", got, err)
	}
	ids := []string{cons[0].ID, "con_missing", cons[6].ID, cons[3].ID}
	if got, err := admin.GetConsumers(ctx, ids); err != nil || len(got) != 3 || got[0].ID != ids[0] || got[1].ID != ids[2] || got[2].ID != ids[3] {
		t.Errorf("GetConsumers on the previous layout: %v, %v", got, err)
	}
	if all, err := admin.ListConsumers(ctx); err != nil || len(all) != len(cons) {
		t.Errorf("ListConsumers on the previous layout: %d, %v", len(all), err)
	}

	// Writes before the move go to the one hash, where a replica of the
	// previous build reads them.
	other := &keystore.RedisAdmin{Client: c}
	if _, err := other.UpdateConsumer(ctx, cons[1].ID, func(c keystore.Consumer) (keystore.Consumer, error) {
		c.Plan = "pro"
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	plans[1] = "pro"
	late, _ := keystore.NewConsumer(keystore.Consumer{Name: "late", Plan: "team"}, time.Now())
	if err := other.CreateConsumer(ctx, late); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{cons[1].ID, late.ID} {
		if ok, _ := c.HExists(ctx, legacyConsumers, id).Result(); !ok {
			t.Errorf("consumer %s written before the move is not in the one hash", id)
		}
		if ok, _ := c.HExists(ctx, consumerBucket(id), id).Result(); ok {
			t.Errorf("consumer %s written before the move is in its bucket", id)
		}
	}
	testkit.Eventually(t, 2*time.Second, "the change before the move", func() error { return testkit.Equal(keyRate(t, s, keys[1]), 200.0) })

	moved, err := admin.MoveConsumers(ctx)
	if err != nil || moved != len(cons)+1 {
		t.Fatalf("MoveConsumers: %d moved, %v; want %d", moved, err, len(cons)+1)
	}
	if n, _ := c.Exists(ctx, legacyConsumers).Result(); n != 0 {
		t.Error("the previous layout's hash of consumers is still there after the move")
	}
	for _, con := range append(cons, late) {
		if ok, _ := c.HExists(ctx, consumerBucket(con.ID), con.ID).Result(); !ok {
			t.Errorf("consumer %s is not in its bucket after the move", con.ID)
		}
	}
	testkit.Eventually(t, 2*time.Second, "the replica's copy after the move", func() error {
		return testkit.Equal(len(copied(t, s)), len(cons)+1)
	})
	for i, key := range keys {
		if got := keyRate(t, s, key); got != planRates[plans[i]] {
			t.Errorf("key %d after the move: rate %v, want %v", i, got, planRates[plans[i]])
		}
	}
	// The admin that wrote the one hash before the move writes the
	// bucket after it.
	if _, err := other.UpdateConsumer(ctx, cons[0].ID, func(c keystore.Consumer) (keystore.Consumer, error) {
		c.Plan = "team"
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	plans[0] = "team"
	if n, _ := c.Exists(ctx, legacyConsumers).Result(); n != 0 {
		t.Error("an admin wrote the one hash after the move")
	}
	testkit.Eventually(t, 2*time.Second, "a change after the move", func() error { return testkit.Equal(keyRate(t, s, keys[0]), 20.0) })
	if all, err := admin.ListConsumers(ctx); err != nil || len(all) != len(cons)+1 {
		t.Errorf("ListConsumers after the move: %d, %v", len(all), err)
	}
	fresh := openWithLimits(t, redisClient(t, rs.Addr))
	if got := copied(t, fresh); len(got) != len(cons)+1 {
		t.Errorf("a fresh replica's copy holds %d consumers, want %d", len(got), len(cons)+1)
	}
	for i, key := range keys {
		if got := keyRate(t, fresh, key); got != planRates[plans[i]] {
			t.Errorf("key %d on a fresh replica: rate %v, want %v", i, got, planRates[plans[i]])
		}
	}
	if moved, err := admin.MoveConsumers(ctx); err != nil || moved != 0 {
		t.Errorf("a second MoveConsumers: %d moved, %v; want none", moved, err)
	}
}

// TestRedisConsumersSpreadOverTheCluster: on a 3-node Cluster, the
// consumers are spread over every node (no hash holds them all), a
// replica reads every one of them, and a consumer's change reaches its
// key within a second.
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
		if got, err := n.Do("EXISTS", legacyConsumers); err == nil && got != "0" { // MOVED: another node's slot
			t.Errorf("node %s holds the one hash of every consumer", n.Addr)
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
	testkit.Eventually(t, time.Second, "the plan change on the cluster", func() error { return testkit.Equal(keyRate(t, s, key), 20.0) })
	if _, err := admin.UpdateConsumer(ctx, "con_missing", func(c keystore.Consumer) (keystore.Consumer, error) { return c, nil }); err == nil {
		t.Error("an update of a consumer that does not exist succeeded")
	}
}

// TestRedisConsumersGoWhereEveryReplicaReadsThem: where an admin writes a
// consumer, by the state of the store: a new store's first write marks
// it and writes buckets; a store that the previous build wrote (keys, no
// marker) gets its new consumers in the one hash, which that build's
// replicas read; and a consumer not yet moved while MoveConsumers runs
// (marker set, consumer in the one hash) is moved by its next change.
func TestRedisConsumersGoWhereEveryReplicaReadsThem(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ctx := context.Background()
	newConsumer := func(name string) keystore.Consumer {
		c, err := keystore.NewConsumer(keystore.Consumer{Name: name}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for db, tc := range []struct {
		name       string
		before     func(c redis.UniversalClient, admin *keystore.RedisAdmin)
		write      func(admin *keystore.RedisAdmin, con keystore.Consumer) error
		wantBucket bool
	}{
		{"a new store", nil, func(a *keystore.RedisAdmin, con keystore.Consumer) error { return a.CreateConsumer(ctx, con) }, true},
		{"keys of the previous build", func(c redis.UniversalClient, a *keystore.RedisAdmin) {
			if _, _, err := a.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live}); err != nil {
				t.Fatal(err)
			}
			c.Del(ctx, layoutMarker)
		}, func(a *keystore.RedisAdmin, con keystore.Consumer) error { return a.CreateConsumer(ctx, con) }, false},
		{"a consumer not moved yet", func(c redis.UniversalClient, a *keystore.RedisAdmin) {
			c.Set(ctx, layoutMarker, "consumers:buckets", 0)
		}, func(a *keystore.RedisAdmin, con keystore.Consumer) error {
			b, _ := json.Marshal(con)
			a.Client.HSet(ctx, legacyConsumers, con.ID, string(b))
			_, err := a.UpdateConsumer(ctx, con.ID, func(c keystore.Consumer) (keystore.Consumer, error) { c.Plan = "pro"; return c, nil })
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: rs.Addr, DB: db})
			t.Cleanup(func() { _ = c.Close() })
			if tc.before != nil {
				tc.before(c, &keystore.RedisAdmin{Client: c})
			}
			admin := &keystore.RedisAdmin{Client: c}
			con := newConsumer(tc.name)
			if err := tc.write(admin, con); err != nil {
				t.Fatal(err)
			}
			inBucket, _ := c.HExists(ctx, consumerBucket(con.ID), con.ID).Result()
			inOld, _ := c.HExists(ctx, legacyConsumers, con.ID).Result()
			if inBucket != tc.wantBucket || inOld == tc.wantBucket {
				t.Errorf("in its bucket %v, in the one hash %v; want the bucket %v", inBucket, inOld, tc.wantBucket)
			}
			if got, err := admin.GetConsumer(ctx, con.ID); err != nil || got.ID != con.ID {
				t.Errorf("GetConsumer: %+v, %v", got, err)
			}
		})
	}
}
