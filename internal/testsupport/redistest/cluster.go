package redistest

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of real redis-server processes, each a
// primary without replicas, on free loopback ports.
type Cluster struct {
	Nodes []*Server
	Addrs []string // host:port of each node, the seeds for a ClusterClient
}

// StartCluster runs n (at least 3) cluster-enabled redis-servers, joins
// them with `redis-cli --cluster create`, waits until every node reports
// cluster_state:ok, and stops them when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest.StartCluster: a cluster needs at least 3 primaries, got %d", n)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found on PATH: install it with `apt-get install -y redis-tools`: %v", err)
	}
	c := &Cluster{}
	for range n {
		// nodes.conf is relative to the server's own --dir.
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Nodes {
		for {
			info, err := s.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
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
