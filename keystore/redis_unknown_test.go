package keystore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// TestRedisUnknownKeyIsRememberedForNegativeTTL: a key the store looked up
// and Redis did not hold stays unknown for NegativeTTL even once it is in
// Redis (written without a change message, so only the TTL can end it),
// and is found by a lookup after the TTL.
func TestRedisUnknownKeyIsRememberedForNegativeTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		ttl       time.Duration
		foundSoon bool
	}{
		{"an hour: still unknown", time.Hour, false},
		{"100ms: found after it", 100 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			c := redisClient(t, rs.Addr)
			ctx := context.Background()
			s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c, Timeout: testTimeout, NegativeTTL: tc.ttl})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			testkit.Eventually(t, 10*time.Second, "ready", func() error { return testkit.True(s.Ready(), "not ready") })

			// Issue on another prefix (no message reaches s), then look the
			// key up before and after copying its record over by hand.
			key, rec, err := (&keystore.RedisAdmin{Client: c, Prefix: "other:"}).Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.Lookup(ctx, keystore.HashKey(key)); err != nil || ok {
				t.Fatalf("lookup before the copy: found %v, err %v; want unknown", ok, err)
			}
			bucket := fmt.Sprintf("keystore:{ks:%02x}:records", rec.Hash[0])
			v, err := c.HGet(ctx, "other:"+bucket, rec.Hash.String()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.HSet(ctx, "keygate:"+bucket, rec.Hash.String(), v).Err(); err != nil {
				t.Fatal(err)
			}
			if !tc.foundSoon {
				if _, ok, err := s.Lookup(ctx, keystore.HashKey(key)); err != nil || ok {
					t.Errorf("lookup within the TTL: found %v, err %v; want still unknown", ok, err)
				}
				return
			}
			start := time.Now()
			testkit.Eventually(t, 20*time.Second, "found after the TTL", func() error {
				_, ok, err := s.Lookup(ctx, keystore.HashKey(key))
				if err != nil {
					return err
				}
				return testkit.True(ok, "still unknown")
			})
			t.Logf("found %v after the copy (NegativeTTL %v)", time.Since(start), tc.ttl)
		})
	}
}

// TestRedisCloseLeavesNoGoroutine: after Close, a RedisStore that served
// known and unknown keys has no goroutine left (its subscription, its
// sync loop, its cache of unknown keys). Not parallel: it counts
// goroutines, and other tests' stores would be counted.
func TestRedisCloseLeavesNoGoroutine(t *testing.T) {
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	ctx := context.Background()
	key, _, err := (&keystore.RedisAdmin{Client: c}).Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
	if err != nil {
		t.Fatal(err)
	}
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, 10*time.Second, "ready", func() error { return testkit.True(s.Ready(), "not ready") })
	if state(t, s, key) != keystore.Active {
		t.Fatal("issued key not active")
	}
	unknown, _ := keystore.Generate(keystore.Test)
	if _, ok, err := s.Lookup(ctx, keystore.HashKey(unknown)); err != nil || ok {
		t.Fatalf("unknown key: found %v, err %v", ok, err)
	}
	if n := len(storeGoroutines()); n == 0 {
		t.Fatal("no goroutine of the running store found: the check below would prove nothing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.Eventually(t, 20*time.Second, "the store's goroutines ended", func() error {
		if g := storeGoroutines(); len(g) > 0 {
			return fmt.Errorf("%d left:\n%s", len(g), strings.Join(g, "\n\n"))
		}
		return nil
	})
	t.Logf("goroutines ended %v after Close", time.Since(start))
}

// storeGoroutines are the stacks of the goroutines, other than tests',
// running code of the keystore package or of golang-lru.
func storeGoroutines() []string {
	buf := testkit.Stacks()
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") {
			continue // a test's own goroutine (this one, the paused parallel ones)
		}
		if strings.Contains(g, "keygate/keystore.") || strings.Contains(g, "hashicorp/golang-lru") {
			out = append(out, g)
		}
	}
	return out
}
