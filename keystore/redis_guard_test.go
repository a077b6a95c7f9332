package keystore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// guardEvents collects what a RedisStore reports through its hooks.
type guardEvents struct {
	mu       sync.Mutex
	losses   []string
	blocked  []keystore.Record
	logGaps  atomic.Int32
	observed *observer.ObservedLogs
}

func (g *guardEvents) config(c redis.UniversalClient, failClosed bool) keystore.RedisConfig {
	core, logs := observer.New(zap.InfoLevel)
	g.observed = logs
	return keystore.RedisConfig{
		Client: c, Timeout: testTimeout, ResyncInterval: time.Hour, PollInterval: 100 * time.Millisecond,
		BreakerBackoff: 200 * time.Millisecond, FailClosed: failClosed, Logger: zap.New(core),
		OnDataLoss: func(r string) { g.mu.Lock(); g.losses = append(g.losses, r); g.mu.Unlock() },
		OnBlocked:  func(r keystore.Record) { g.mu.Lock(); g.blocked = append(g.blocked, r); g.mu.Unlock() },
		OnLogGap:   func() { g.logGaps.Add(1) },
	}
}

func (g *guardEvents) lossCount() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.losses) }

func (g *guardEvents) logged(level zap.AtomicLevel, substr string) bool {
	for _, e := range g.observed.All() {
		if level.Enabled(e.Level) && strings.Contains(e.Message, substr) {
			return true
		}
	}
	return false
}

// TestRedisStoreRepairsAStoreThatLostData: a Redis restarted empty (here
// FLUSHALL, as a restart without persistence leaves it) is found by its
// missing epoch; the replica never stops serving its keys meanwhile (no
// valid key turns unknown, the revoked one stays refused), logs an error
// line and reports the loss, and writes back every key, consumer and
// admin token it holds; afterwards Redis itself has them (a new replica
// and the admin read them) and the revoked key is revoked there too.
func TestRedisStoreRepairsAStoreThatLostData(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: redisClient(t, srv.Addr)}
	con := keystore.Consumer{ID: "con_acme", Name: "Acme"}
	if err := admin.CreateConsumer(ctx, con); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var recs []keystore.Record
	for i := range 12 {
		req := keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID}
		if i == 0 {
			req.Consumer = con.ID
		}
		k, r, err := admin.Issue(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		keys, recs = append(keys, k), append(recs, r)
	}
	if _, err := admin.Revoke(ctx, recs[1].ID); err != nil {
		t.Fatal(err)
	}
	tok, trec, err := keystore.NewAdminToken("ops", []string{"keys:read"}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateAdminToken(ctx, trec); err != nil {
		t.Fatal(err)
	}

	var ev guardEvents
	s, err := keystore.OpenRedis(ev.config(redisClient(t, srv.Addr), false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "first load", func() error { return testkit.True(s.Ready(), "not ready") })

	// served checks every key as a request would see it.
	served := func() string {
		for i, k := range keys {
			r, ok, err := s.Lookup(ctx, keystore.HashKey(k))
			want := keystore.Active
			if i == 1 {
				want = keystore.Revoked
			}
			if err != nil || !ok || r.StateAt(time.Now()) != want {
				return recs[i].ID + ": " + string(r.StateAt(time.Now())) + ", want " + string(want)
			}
		}
		return ""
	}
	if msg := served(); msg != "" {
		t.Fatal(msg)
	}
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testkit.HangCheck)
	for ev.lossCount() == 0 || s.DataLoss() != "" {
		if msg := served(); msg != "" {
			t.Fatalf("while Redis lost its data: %s", msg)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no repair within %v (hang check): losses %v, data loss %q", testkit.HangCheck, ev.losses, s.DataLoss())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("reported: %v", ev.losses)
	if !strings.Contains(ev.losses[0], "epoch") {
		t.Errorf("reason %q does not say the epoch is gone", ev.losses[0])
	}
	if !ev.logged(zap.NewAtomicLevelAt(zap.ErrorLevel), "Redis lost keystore data") {
		t.Error("no error line says Redis lost data")
	}
	if ev.logGaps.Load() == 0 {
		t.Error("the lost change-log position was not reported")
	}
	if msg := served(); msg != "" {
		t.Fatalf("after the repair: %s", msg)
	}
	// Redis itself holds them again.
	for i, r := range recs {
		got, err := admin.Get(ctx, r.ID)
		if err != nil {
			t.Fatalf("%s after the repair: %v", r.ID, err)
		}
		if want := map[bool]keystore.Status{true: keystore.Revoked, false: keystore.Active}[i == 1]; got.Status != want {
			t.Errorf("%s in Redis after the repair: %s, want %s", r.ID, got.Status, want)
		}
	}
	if _, err := admin.GetConsumer(ctx, con.ID); err != nil {
		t.Errorf("consumer after the repair: %v", err)
	}
	if got, ok, err := admin.LookupAdminToken(ctx, keystore.HashKey(tok)); err != nil || !ok || got.ID != trec.ID {
		t.Errorf("admin token after the repair: %v %v", ok, err)
	}
	fresh := openRedisStore(t, redisClient(t, srv.Addr))
	testkit.Eventually(t, testkit.HangCheck, "a new replica loads the repaired store", func() error {
		return testkit.True(fresh.Ready() && fresh.Len() == len(keys), "has %d", fresh.Len())
	})
}

// TestRedisStoreFailClosedOnDataLoss: with FailClosed, a lookup while
// Redis has lost data is ErrUnavailable (503), never "unknown" (401).
func TestRedisStoreFailClosedOnDataLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: redisClient(t, srv.Addr)}
	key, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
	if err != nil {
		t.Fatal(err)
	}
	var ev guardEvents
	cfg := ev.config(redisClient(t, srv.Addr), true)
	// Hold the repair back, so the test sees the store while degraded.
	var hold sync.Mutex
	hold.Lock()
	released := false
	t.Cleanup(func() {
		if !released {
			hold.Unlock()
		}
	})
	cfg.OnDataLoss = func(string) { hold.Lock(); hold.Unlock() }
	s, err := keystore.OpenRedis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "first load", func() error { return testkit.True(s.Ready(), "not ready") })
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "data loss found", func() error { return testkit.True(s.DataLoss() != "", "not yet") })
	_, ok, err := s.Lookup(ctx, keystore.HashKey(key))
	if ok || !errors.Is(err, keystore.ErrUnavailable) {
		t.Errorf("lookup while degraded, fail closed: ok %v err %v; want ErrUnavailable", ok, err)
	}
	if !s.Degraded() {
		t.Error("not degraded while Redis lost data")
	}
	hold.Unlock()
	released = true
	testkit.Eventually(t, testkit.HangCheck, "repaired", func() error { return testkit.True(s.DataLoss() == "", "still %q", s.DataLoss()) })
	if _, ok, err := s.Lookup(ctx, keystore.HashKey(key)); !ok || err != nil {
		t.Errorf("after the repair: %v %v", ok, err)
	}
}

// TestRedisStoreKeepsRevocationsAcrossALaggingFailover: the revocation
// of a key reaches the primary but not its replica (the replica is cut
// off first, as a host with replication lag); the replica is then
// promoted and keygate follows it. Its re-read has the key active; the
// store keeps it revoked, reports and logs it at warn with the key id,
// and writes the revocation back to the new primary.
func TestRedisStoreKeepsRevocationsAcrossALaggingFailover(t *testing.T) {
	t.Parallel()
	primary, replica := startReplicated(t)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: redisClient(t, primary.Addr), WaitReplicas: 1, WaitTimeout: 10 * time.Second}
	key, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
	if err != nil {
		t.Fatal(err)
	}
	// keygate's client follows addr, as a Sentinel client follows the
	// primary.
	var addr atomic.Value
	addr.Store(primary.Addr)
	c := redis.NewClient(&redis.Options{
		MaxRetries: -1, ReadTimeout: testTimeout, WriteTimeout: testTimeout, DialTimeout: testTimeout, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr.Load().(string))
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	var ev guardEvents
	s, err := keystore.OpenRedis(ev.config(c, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "first load", func() error { return testkit.True(s.Ready(), "not ready") })

	// Cut the replica off, then revoke on the primary alone.
	if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	alone := &keystore.RedisAdmin{Client: redisClient(t, primary.Addr)}
	if _, err := alone.Revoke(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	refused := func() error {
		r, ok, err := s.Lookup(ctx, keystore.HashKey(key))
		if err != nil || !ok || r.StateAt(time.Now()) != keystore.Revoked {
			return testkit.True(false, "%s %v %v", r.StateAt(time.Now()), ok, err)
		}
		return nil
	}
	testkit.Eventually(t, testkit.HangCheck, "the revocation reaches the store", refused)

	// Failover to the lagging replica.
	addr.Store(replica.Addr)
	primary.Kill()
	onNew := &keystore.RedisAdmin{Client: redisClient(t, replica.Addr)}
	testkit.Eventually(t, testkit.HangCheck, "the revocation written back to the new primary", func() error {
		if err := refused(); err != nil {
			t.Fatalf("the revoked key was reinstated: %v", err)
		}
		r, err := onNew.Get(ctx, rec.ID)
		if err != nil {
			return err
		}
		return testkit.True(r.Status == keystore.Revoked, "new primary has it %s", r.Status)
	})
	for range 20 { // and it stays refused
		if err := refused(); err != nil {
			t.Fatalf("the revoked key was reinstated: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ev.mu.Lock()
	blocked := ev.blocked
	ev.mu.Unlock()
	if len(blocked) == 0 || blocked[0].ID != rec.ID {
		t.Errorf("blocked reinstatements reported: %+v, want %s", blocked, rec.ID)
	}
	found := false
	for _, e := range ev.observed.All() {
		if e.Level == zap.WarnLevel && strings.Contains(e.Message, "reinstate") && e.ContextMap()["key_id"] == rec.ID {
			found = true
		}
	}
	if !found {
		t.Error("no warning names the key whose reinstatement was blocked")
	}
}

// TestRedisStoreRefusesAReReadThatDropsMostKeys: records that vanish
// from Redis without a change (here deleted behind keygate's back, the
// epoch left in place) are not dropped when they are most of the store:
// the replica keeps serving them, reports the loss, and writes them back.
func TestRedisStoreRefusesAReReadThatDropsMostKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redisClient(t, srv.Addr)
	admin := &keystore.RedisAdmin{Client: c}
	var keys []string
	for range 12 {
		k, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	var ev guardEvents
	cfg := ev.config(redisClient(t, srv.Addr), false)
	cfg.ResyncInterval = 300 * time.Millisecond
	s, err := keystore.OpenRedis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "first load", func() error { return testkit.True(s.Ready(), "not ready") })
	// Delete every record bucket, leaving the epoch and the log.
	var cursor uint64
	for {
		ks, next, err := c.Scan(ctx, cursor, "keygate:keystore:{ks:*}:records", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if err := c.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	deadline := time.Now().Add(testkit.HangCheck)
	for {
		for _, k := range keys {
			if _, ok, err := s.Lookup(ctx, keystore.HashKey(k)); !ok || err != nil {
				t.Fatalf("a key was dropped: %v %v", ok, err)
			}
		}
		if n, _ := admin.Count(ctx); n == len(keys) && ev.lossCount() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not repaired within %v (hang check): losses %v", testkit.HangCheck, ev.losses)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(ev.losses[0], "drop") {
		t.Errorf("reason %q does not say a re-read would drop keys", ev.losses[0])
	}
}
