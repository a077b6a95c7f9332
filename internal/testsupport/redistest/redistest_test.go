package redistest

import (
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if out, err := s.Do("SET", "k", "v"); err != nil || out != "OK" {
		t.Fatalf("SET = %q, %v", out, err)
	}
	if out, err := s.Do("GET", "k"); err != nil || out != "v" {
		t.Fatalf("GET = %q, %v", out, err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if out, err := s.Do("PING"); err != nil || out != "PONG" {
		t.Fatalf("PING after Restart = %q, %v", out, err)
	}
}

// TestSentinelStalledReplicationLosesWrites shows what the harness is
// for: a write the primary took while the relay stalled replication is
// gone after Sentinel promotes the replica, and one made before is not.
func TestSentinelStalledReplicationLosesWrites(t *testing.T) {
	t.Parallel()
	st := StartSentinel(t)
	if _, err := st.Primary.Do("SET", "before", "1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the write to replicate", func() bool {
		v, err := st.Replica.Do("GET", "before")
		return err == nil && v == "1"
	})
	st.Relay.Stall()
	if _, err := st.Primary.Do("SET", "during", "1"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	st.Primary.Kill()
	st.Relay.Close() // what waited in the link dies with the host
	switched := st.WaitSwitch(t, 20*time.Second)
	t.Logf("Sentinel promoted the replica %s after the kill", switched.Sub(killed).Round(time.Millisecond))
	if got := st.PrimaryAddr(t); got != st.Replica.Addr {
		t.Fatalf("primary = %s, want the replica %s", got, st.Replica.Addr)
	}
	if v, _ := st.Replica.Do("GET", "before"); v != "1" {
		t.Errorf("the write made before the stall is gone: GET = %q", v)
	}
	if v, _ := st.Replica.Do("GET", "during"); v != "" {
		t.Errorf("the write made during the stall survived (GET = %q): the relay did not stall replication", v)
	}
}

// TestClusterWithReplicasFailsOver kills a primary of a 3+3 cluster and
// sees its replica take over its slots.
func TestClusterWithReplicasFailsOver(t *testing.T) {
	t.Parallel()
	c := StartClusterWith(t, ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: time.Second})
	old := c.PrimaryOf(t, "k")
	killed := time.Now()
	old.Kill()
	waitFor(t, 30*time.Second, "a new primary for the slot and cluster_state:ok", func() bool {
		for _, s := range c.Nodes {
			if s.Running() {
				if nodes, err := s.Do("PING"); err != nil || nodes != "PONG" {
					return false
				}
			}
		}
		return c.StateOK() && c.ServingPrimary("k") != nil
	})
	t.Logf("the cluster recovered %s after the kill", time.Since(killed).Round(time.Millisecond))
	if p := c.PrimaryOf(t, "k"); p == old {
		t.Fatal("the dead node still serves the slot")
	}
}
