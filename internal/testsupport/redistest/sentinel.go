package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of StartSentinel monitor.
const SentinelMaster = "keygate"

// Sentinel is a Sentinel-managed Redis: one primary, one replica that
// replicates through a Relay (so that a test can stall replication), and
// three Sentinels, all real processes on free loopback ports.
type Sentinel struct {
	Primary   *Server
	Replica   *Server
	Relay     *Relay    // between Replica and Primary
	Sentinels []*Server // the three Sentinels
	Addrs     []string  // the Sentinels' host:port, for a FailoverClient
}

// SentinelOptions shape StartSentinelWith.
type SentinelOptions struct {
	// DownAfter is down-after-milliseconds: how long the primary may not
	// answer before a Sentinel deems it down. Zero means 1s.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout. Zero means 3s.
	FailoverTimeout time.Duration
}

// StartSentinel runs a primary, a replica replicating through a Relay
// and three Sentinels (quorum 2) with short timeouts, waits until the
// replica is in sync and every Sentinel sees the replica and the other
// Sentinels, and stops them all when the test ends.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return StartSentinelWith(t, SentinelOptions{})
}

// StartSentinelWith is StartSentinel shaped by o.
func StartSentinelWith(t testing.TB, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.DownAfter <= 0 {
		o.DownAfter = time.Second
	}
	if o.FailoverTimeout <= 0 {
		o.FailoverTimeout = 3 * time.Second
	}
	st := &Sentinel{Primary: Start(t)}
	st.Relay = StartRelay(t, st.Primary.Addr)
	_, rport, _ := net.SplitHostPort(st.Relay.Addr)
	st.Replica = Start(t, "--replicaof", "127.0.0.1", rport)
	waitFor(t, 10*time.Second, "the replica to sync", func() bool {
		info, err := st.Replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s %[4]d\n"+
			"sentinel parallel-syncs %[1]s 1\n",
			SentinelMaster, st.Primary.Port, o.DownAfter.Milliseconds(), o.FailoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s := start(t, dir, []string{conf, "--sentinel"}, nil)
		st.Sentinels = append(st.Sentinels, s)
		st.Addrs = append(st.Addrs, s.Addr)
	}
	waitFor(t, 20*time.Second, "every Sentinel to see the replica and the other Sentinels", func() bool {
		for _, s := range st.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			m, err := c.Master(context.Background(), SentinelMaster).Result()
			_ = c.Close()
			if err != nil || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return false
			}
		}
		return true
	})
	return st
}

// PrimaryAddr is the primary's address as the first live Sentinel
// answers it.
func (st *Sentinel) PrimaryAddr(t testing.TB) string {
	t.Helper()
	for _, s := range st.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		a, err := c.GetMasterAddrByName(context.Background(), SentinelMaster).Result()
		_ = c.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1])
		}
	}
	t.Fatal("no Sentinel answers the primary's address")
	return ""
}

// WaitSwitch waits until every Sentinel names the replica as the
// primary and it answers as one (role:master), and returns when that
// was first seen.
func (st *Sentinel) WaitSwitch(t testing.TB, within time.Duration) time.Time {
	t.Helper()
	waitFor(t, within, "Sentinel to promote the replica", func() bool {
		if st.PrimaryAddr(t) != st.Replica.Addr {
			return false
		}
		info, err := st.Replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "role:master")
	})
	return time.Now()
}

// waitFor polls cond every 20ms until it holds, failing the test after
// within (a hang check, not a timing assertion).
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: waited %s for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
