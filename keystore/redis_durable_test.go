package keystore_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// startReplicated runs a primary and a replica of it (replicaof), and
// waits until the primary counts the replica as connected and in sync.
func startReplicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t)
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	deadline := time.Now().Add(testkit.HangCheck)
	for {
		p, _ := primary.Do("INFO", "replication")
		r, _ := replica.Do("INFO", "replication")
		if strings.Contains(p, "connected_slaves:1") && strings.Contains(r, "master_link_status:up") {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not in sync within %v (hang check):\n%s\n%s", testkit.HangCheck, p, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisAdminWaitsForReplicas: with a replica in sync, an issue and a
// revocation are answered once the replica holds them (the replica's copy
// has them at once); with the replica frozen (its link stalls, as a host
// with replication lag), an issue answers ErrNotDurable and leaves its
// key revoked, a revocation answers ErrNotDurable and stands on the
// primary, each WAIT timeout is counted; and a standalone Redis is not
// waited for at all.
func TestRedisAdminWaitsForReplicas(t *testing.T) {
	t.Parallel()
	primary, replica := startReplicated(t)
	ctx := context.Background()
	var timeouts atomic.Int32
	// A generous timeout while the replica runs (a loaded CI machine may
	// take a while to ack), a short one once it is frozen.
	c := redisClient(t, primary.Addr)
	a := &keystore.RedisAdmin{Client: c, WaitReplicas: 1, WaitTimeout: 10 * time.Second,
		OnWaitTimeout: func(string) { timeouts.Add(1) }}
	onReplica := &keystore.RedisAdmin{Client: redisClient(t, replica.Addr)}

	_, kept, err := a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	_, revoked, err := a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: "revoked"})
	if err != nil {
		t.Fatal(err)
	}
	// Acknowledged means on the replica, without waiting.
	if r, err := onReplica.Get(ctx, kept.ID); err != nil || r.Status != keystore.Active {
		t.Fatalf("acknowledged issue not on the replica: %+v %v", r, err)
	}
	if _, err := a.Revoke(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := onReplica.Get(ctx, revoked.ID); err != nil || r.Status != keystore.Revoked {
		t.Fatalf("acknowledged revocation not on the replica: %+v %v", r, err)
	}

	replica.Freeze()
	t.Cleanup(replica.Thaw)
	a = &keystore.RedisAdmin{Client: c, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond,
		OnWaitTimeout: func(string) { timeouts.Add(1) }}
	key, lost, err := a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Name: "lost"})
	if !errors.Is(err, keystore.ErrNotDurable) || key != "" {
		t.Fatalf("issue with a frozen replica: key given %v, err %v; want no key and ErrNotDurable", key != "", err)
	}
	if !keystore.IssueFailedAfterStore(err) || lost.ID == "" {
		t.Fatalf("the failed issue does not name its stored record: %+v %v", lost, err)
	}
	if r, err := a.Get(ctx, lost.ID); err != nil || r.Status != keystore.Revoked {
		t.Errorf("the record of an issue that was not confirmed: %+v %v; want revoked", r, err)
	}
	if _, err := a.Revoke(ctx, kept.ID); !errors.Is(err, keystore.ErrNotDurable) {
		t.Errorf("revocation with a frozen replica: %v, want ErrNotDurable", err)
	}
	if r, err := a.Get(ctx, kept.ID); err != nil || r.Status != keystore.Revoked {
		t.Errorf("a revocation that was not confirmed must stand on the primary: %+v %v", r, err)
	}
	if timeouts.Load() < 2 {
		t.Errorf("WAIT timeouts counted: %d, want at least 2", timeouts.Load())
	}
	t.Logf("WAIT timeouts: %d", timeouts.Load())

	// A standalone Redis has no replica to wait for.
	alone := redistest.Start(t)
	sa := &keystore.RedisAdmin{Client: redisClient(t, alone.Addr), WaitReplicas: 1, WaitTimeout: time.Minute}
	done := make(chan error, 1)
	go func() {
		_, _, err := sa.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an issue on a standalone Redis waited for replicas")
	}
}

// TestRedisAdminWaitsOnClusterShards: on a Redis Cluster, a change waits
// on the primaries that hold what it wrote. One primary gets a replica
// (added with redis-cli --cluster add-node --cluster-slave); with it in
// sync, changes are answered; with it frozen, a change of a key whose
// bucket (or the change log) lives on that primary answers ErrNotDurable.
func TestRedisAdminWaitsOnClusterShards(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal(err)
	}
	rep := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
	if out, err := exec.Command(cli, "--cluster", "add-node", rep.Addr, cl.Addrs[0], "--cluster-slave").CombinedOutput(); err != nil {
		t.Fatalf("add-node: %v\n%s", err, out)
	}
	testkit.Eventually(t, 20*time.Second, "the replica in sync", func() error {
		r, _ := rep.Do("INFO", "replication")
		return testkit.True(strings.Contains(r, "master_link_status:up"), "%s", r)
	})
	var master *redistest.Server
	for _, n := range cl.Nodes {
		if p, _ := n.Do("INFO", "replication"); strings.Contains(p, "connected_slaves:1") {
			master = n
		}
	}
	if master == nil {
		t.Fatal("no primary counts the new replica")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ReadTimeout: testTimeout, WriteTimeout: testTimeout, MaxRedirects: 8})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	var timeouts atomic.Int32
	a := &keystore.RedisAdmin{Client: c, WaitReplicas: 1, WaitTimeout: 10 * time.Second, OnWaitTimeout: func(string) { timeouts.Add(1) }}
	var recs []keystore.Record
	for range 8 {
		_, r, err := a.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := a.CreateConsumer(ctx, keystore.Consumer{ID: "con_acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}

	rep.Freeze()
	t.Cleanup(rep.Thaw)
	a = &keystore.RedisAdmin{Client: c, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond, OnWaitTimeout: func(string) { timeouts.Add(1) }}
	// Every change writes the change log, in one slot of one primary;
	// whichever primary holds it or the record, a revocation touches
	// the frozen replica's primary for some of the keys.
	notDurable := 0
	for _, r := range recs {
		if _, err := a.Revoke(ctx, r.ID); errors.Is(err, keystore.ErrNotDurable) {
			notDurable++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("revocations not confirmed: %d of %d; timeouts %d", notDurable, len(recs), timeouts.Load())
	if notDurable == 0 {
		t.Error("no revocation waited for the frozen replica's primary")
	}
	for _, r := range recs {
		if got, err := a.Get(ctx, r.ID); err != nil || got.Status != keystore.Revoked {
			t.Errorf("%s: %+v %v; want revoked on its primary", r.ID, got.Status, err)
		}
	}
}
