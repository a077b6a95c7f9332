package tokenissuer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/tokenissuer"
)

// TestRedisRefsSpread: on a single Redis and on a 3-node Cluster, the
// references of many keys land in hashes on every node (no one hash
// holds them all) and read back; a key with none has none.
func TestRedisRefsSpread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (redis.UniversalClient, []*redistest.Server)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			rs := redistest.Start(t)
			return rs.Client(t), []*redistest.Server{rs}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			cl := redistest.StartCluster(t, 3)
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
			t.Cleanup(func() { _ = c.Close() })
			return c, cl.Nodes
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, nodes := tc.start(t)
			ctx := context.Background()
			s := tokenissuer.NewRedisStore(c, "kg:")
			hash := func(i int) string { return fmt.Sprintf("sha256:%064x", i) }
			for i := range 200 {
				if err := s.PutRef(ctx, fmt.Sprintf("key_%016x", i), hash(i)); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range nodes {
				if got, err := n.Do("KEYS", "kg:tokenissuer:{kr:*}:key-refs"); err != nil || got == "0" {
					t.Errorf("node %s holds no hash of references (%q, %v)", n.Addr, got, err)
				}
			}
			for _, i := range []int{0, 77, 199} {
				if h, ok, err := s.GetRef(ctx, fmt.Sprintf("key_%016x", i)); err != nil || !ok || h != hash(i) {
					t.Errorf("key %d: %q %v %v", i, h, ok, err)
				}
			}
			if _, ok, err := s.GetRef(ctx, "key_none"); err != nil || ok {
				t.Errorf("a key with no reference: %v %v", ok, err)
			}
		})
	}
}
