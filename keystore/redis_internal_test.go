package keystore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestRedisServesWhileLoading: while the first load is held up, the store
// is not ready, yet every key in Redis is served (a miss asks Redis for
// that key) and an unknown key is unknown, not unavailable; the store is
// ready once the load completes.
func TestRedisServesWhileLoading(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = c.Close() })
	admin := &RedisAdmin{Client: c}
	ctx := context.Background()
	key, _, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	s, err := OpenRedis(RedisConfig{Client: c, Timeout: 2 * time.Second, PageSize: 1, beforePage: func() { <-hold }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	if s.Ready() {
		t.Fatal("ready before the load")
	}
	rec, ok, err := s.Lookup(ctx, HashKey(key))
	if err != nil || !ok || rec.StateAt(time.Now()) != Active {
		t.Fatalf("key during the load: found %v, err %v", ok, err)
	}
	unknown, _ := Generate(Live)
	if _, ok, err := s.Lookup(ctx, HashKey(unknown)); err != nil || ok {
		t.Fatalf("unknown key during the load: found %v, err %v", ok, err)
	}
	if s.Ready() {
		t.Fatal("ready before the load completed")
	}
	// A consumer's keys cannot be told from a partial index: its lists
	// read the store instead.
	if _, ok := s.ConsumerKeys("con_0123456789abcdef"); ok {
		t.Fatal("ConsumerKeys answered before the load completed")
	}
	close(hold)
	released = true
	testkit.Eventually(t, testkit.HangCheck, "ready after the load", func() error { return testkit.True(s.Ready(), "not ready") })
	if hs, ok := s.ConsumerKeys("con_0123456789abcdef"); !ok || len(hs) != 0 {
		t.Fatalf("ConsumerKeys of a consumer with no key after the load = %v, %v; want none, true", hs, ok)
	}
}

// TestRedisWriteNewClaimsTheID: a new record whose id another record
// holds is refused and leaves nothing behind, the holder untouched; a
// write that finds its own earlier claim (a retry) goes through.
func TestRedisWriteNewClaimsTheID(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := rs.Client(t)
	admin := &RedisAdmin{Client: c}
	ctx := context.Background()
	_, holder, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live})
	if err != nil {
		t.Fatal(err)
	}
	_, clash, err := NewRecord(IssueRequest{Product: Registry, Env: Live}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	clash.ID = holder.ID
	if err := admin.writeNew(ctx, clash); err == nil {
		t.Fatal("a record with a used id was stored")
	}
	k := admin.keys()
	if n, err := c.HExists(ctx, k.recordsOf(clash.Hash), clash.Hash.String()).Result(); err != nil || n {
		t.Errorf("the refused record is left in its bucket (%v, %v)", n, err)
	}
	if got, err := admin.Get(ctx, holder.ID); err != nil || got.Hash != holder.Hash {
		t.Errorf("the id's holder: %+v, %v", got, err)
	}

	_, retry, err := NewRecord(IssueRequest{Product: Registry, Env: Live}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, k.idsOf(retry.ID), retry.ID, retry.Hash.String()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.writeNew(ctx, retry); err != nil {
		t.Fatalf("a retry that finds its own claim: %v", err)
	}
	if got, err := admin.Get(ctx, retry.ID); err != nil || got.Hash != retry.Hash {
		t.Errorf("after the retry: %+v, %v", got, err)
	}
}
