package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of real redis-server processes on free
// loopback ports: Primaries primaries, each with the same number of
// replicas.
type Cluster struct {
	Nodes []*Server
	Addrs []string // host:port of each node, the seeds for a ClusterClient
}

// ClusterOptions shape a cluster for StartClusterWith.
type ClusterOptions struct {
	// Primaries is the number of primaries, at least 3.
	Primaries int
	// Replicas is the number of replicas of each primary.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node may not answer
	// before the others mark it failed and promote its replica. Zero
	// means 5s; a failover test wants about 1s.
	NodeTimeout time.Duration
}

// StartCluster runs n (at least 3) cluster-enabled redis-servers, each a
// primary without replicas, joins them with `redis-cli --cluster
// create`, waits until every node reports cluster_state:ok, and stops
// them when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{Primaries: n})
}

// StartClusterWith runs a cluster shaped by o, waits until every node
// reports cluster_state:ok and sees every replica attached, and stops
// them when the test ends.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Primaries < 3 {
		t.Fatalf("redistest.StartCluster: a cluster needs at least 3 primaries, got %d", o.Primaries)
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = 5 * time.Second
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found on PATH: install it with `apt-get install -y redis-tools`: %v", err)
	}
	c := &Cluster{}
	for range o.Primaries * (1 + o.Replicas) {
		// nodes.conf is relative to the server's own --dir.
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10))
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		for {
			info, err := s.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && (o.Replicas == 0 || c.replicasUp(s, o.Replicas)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis cluster node %s not ready: %v\n%s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// replicasUp reports whether s is a replica whose link to its primary is
// up, or a primary with want replicas attached.
func (c *Cluster) replicasUp(s *Server, want int) bool {
	info, err := s.Do("INFO", "replication")
	if err != nil {
		return false
	}
	if strings.Contains(info, "role:slave") {
		return strings.Contains(info, "master_link_status:up")
	}
	return strings.Contains(info, "connected_slaves:"+strconv.Itoa(want))
}

// PrimaryOf returns the live node that is now the primary serving the
// slot of key, by each node's own view (CLUSTER NODES, "myself,master").
func (c *Cluster) PrimaryOf(t testing.TB, key string) *Server {
	t.Helper()
	if s := c.ServingPrimary(key); s != nil {
		return s
	}
	t.Fatalf("no live primary serves the slot of %q", key)
	return nil
}

// ServingPrimary is PrimaryOf, or nil while no live node serves the slot.
func (c *Cluster) ServingPrimary(key string) *Server {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		slot, err1 := rdb.ClusterKeySlot(context.Background(), key).Result()
		nodes, err2 := rdb.ClusterNodes(context.Background()).Result()
		_ = rdb.Close()
		if err1 == nil && err2 == nil && servesSlot(nodes, int(slot)) {
			return s
		}
	}
	return nil
}

// servesSlot reports whether the node whose CLUSTER NODES output this is
// is a primary serving slot.
func servesSlot(nodes string, slot int) bool {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && l <= slot && slot <= h {
				return true
			}
		}
	}
	return false
}

// StateOK reports whether every live node reports cluster_state:ok.
func (c *Cluster) StateOK() bool {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}
