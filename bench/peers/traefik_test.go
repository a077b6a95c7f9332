package main

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

// TestTraefikRedisLimit: traefik-redis's configuration (its templates,
// with a limit of one request a minute instead of the bench's) limits
// each x-api-key on its own, in its Redis: a key's second request is
// refused with 429 and a Retry-After, another key still passes, and
// their buckets are keys of the redis-server. So the bench's Traefik
// decides every request in Redis, by the key, as keygate-redis does.
func TestTraefikRedisLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Traefik and redis-server")
	}
	needTools(t, "traefik", "redis-server")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{dir: t.TempDir(), stderr: os.Stderr, self: self}
	defer b.stopAll()
	upAddr, err := benchproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.start("upstream", self, "-role", "upstream", "-listen", upAddr); err != nil {
		t.Fatal(err)
	}
	redisAddr, _, err := b.startRedis()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := benchproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	args, err := b.traefikConfig("traefik-redis", traefikBin(), addr, upAddr, redisAddr, redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.start("traefik-redis", args...); err != nil {
		t.Fatal(err)
	}
	// The first request of key-a that passes (Traefik answers 404 until
	// it has loaded its routers, before the limiter).
	b.key = "key-a"
	if err := b.waitReady("traefik-redis", addr); err != nil {
		t.Fatal(err)
	}
	client := b.client()
	defer client.CloseIdleConnections()
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		want int
	}{
		{"key-a", http.StatusTooManyRequests},
		{"key-b", http.StatusOK},
		{"key-b", http.StatusTooManyRequests},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/sync", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", c.key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.key, resp.StatusCode, c.want)
		}
		if c.want == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", c.key)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	t.Logf("redis-server's keys: %q", keys)
	for _, k := range []string{"key-a", "key-b"} {
		if !slices.ContainsFunc(keys, func(rk string) bool { return strings.HasSuffix(rk, ":"+k) }) {
			t.Errorf("no bucket for %s in Redis: keys %q", k, keys)
		}
	}
}
