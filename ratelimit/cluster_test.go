package ratelimit_test

import (
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/redis/go-redis/v9"
)

func TestRedisClusterQuotaIsExact(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	var replicas []*ratelimit.Resilient
	for range 3 {
		r := newRedis(t, c.Addrs, ratelimit.ResilientConfig{Replicas: 3})
		replicas = append(replicas, r)
	}
	if _, ok := newClient(t, time.Second, c.Addrs...).(*redis.ClusterClient); !ok {
		t.Fatal("several addresses did not give a ClusterClient")
	}
	lim := policy.Limit{Rate: 1e6, Per: time.Second, Burst: 1e6, Quota: policy.Quota{Requests: 20, Per: time.Hour}}
	const ids = 8 // spread over the cluster's slots
	expectAdmitted(t, []allower{replicas[0], replicas[1], replicas[2]}, 3, 40, ids, lim, 20)
	for i, r := range replicas {
		if st := r.Stats(); st.FallbackDecisions != 0 || st.RedisErrors != 0 {
			t.Errorf("replica %d: %+v", i, st)
		}
	}
	// The keys landed on more than one node.
	nodesWithKeys := 0
	for _, n := range c.Nodes {
		if size, _ := n.Do("DBSIZE"); size != "0" {
			nodesWithKeys++
		}
	}
	if nodesWithKeys < 2 {
		t.Errorf("keys on %d node(s), want them spread", nodesWithKeys)
	}
}

// Leases on a Cluster: a lease is one script call on its id's slot, and
// three replicas with leases admit each id's bucket exactly.
func TestRedisClusterLeasesAdmitTheBucketExactly(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	var replicas []allower
	var leases []*ratelimit.Leases
	for range 3 {
		pure, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: newClient(t, 2*time.Second, c.Addrs...), Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l := ratelimit.NewLeases(pure, ratelimit.LeaseConfig{TTL: time.Minute})
		replicas, leases = append(replicas, l), append(leases, l)
	}
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 40} // leases of up to 10 cells
	// Each id gets 900 requests for its 40 cells: every lease is used up
	// by its replica's later requests.
	expectAdmitted(t, replicas, 3, 200, 8, lim, 40)
	var leased uint64
	for _, l := range leases {
		leased += l.Leased()
	}
	if leased == 0 {
		t.Error("no decision came from a lease")
	}
}
