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
