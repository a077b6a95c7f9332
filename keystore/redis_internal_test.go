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
	s, err := OpenRedis(RedisConfig{Client: c, PageSize: 1, beforePage: func() { <-hold }})
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
	close(hold)
	released = true
	testkit.Eventually(t, 2*time.Second, "ready after the load", func() error { return testkit.True(s.Ready(), "not ready") })
}
