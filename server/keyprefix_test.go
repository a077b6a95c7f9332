package server_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/pebbletest"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// TestRedisKeyPrefixCoversEveryKey runs keygate with everything in Redis
// (key records, rate limits, quotas, ACME certificates and their locks)
// under a custom redis.key_prefix, exercises each, then scans Redis: no
// key and no pub/sub channel may lie outside the prefix, or two deployments
// that share a Redis would share buckets, quotas or certificates.
func TestRedisKeyPrefixCoversEveryKey(t *testing.T) {
	t.Parallel()
	const prefix = "tenant-a:"
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()

	admin := &keystore.RedisAdmin{Client: client, Prefix: prefix}
	liveKey, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "live"})
	if err != nil {
		t.Fatal(err)
	}
	testKey, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Test, Context: ctxA, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}

	const domain = "prefix.server.keygate.test"
	apiAddr := testkit.FreeAddr(t)
	p := pebbletest.Start(t, pebbletest.TLSPort(portOf(t, apiAddr)))
	h := newHarness(t, setup{roots: p.IssuerRoots, serverName: domain, mod: func(c *config.Config) {
		c.Server.Listen = apiAddr
		c.TLS.Mode = "acme"
		c.TLS.Domains = []string{domain}
		c.TLS.CA, c.TLS.CARoot = p.DirectoryURL, p.CARootFile
		c.TLS.Challenges = []string{"tls-alpn-01"}
		c.TLS.Storage = "redis"
		c.Redis.Addrs = []string{rs.Addr}
		c.Redis.KeyPrefix = prefix
		c.Redis.ReadTimeout, c.Redis.WriteTimeout = 2*time.Second, 2*time.Second
		c.Keystore.Backend = "redis"
		c.RateLimit.Backend = "redis"
		c.RateLimit.RedisTimeout = 2 * time.Second // no fallback on a busy machine
		c.RateLimit.Limits = map[string]policy.Limit{
			"live": {Rate: 1, Per: time.Minute, Burst: 2},
			"test": {Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 2, Per: 24 * time.Hour}},
		}
	}})
	h.secret(liveKey)
	h.secret(testKey)

	testkit.Eventually(t, 60*time.Second, "a certificate from Pebble", func() error {
		c, err := tls.Dial("tcp", apiAddr, &tls.Config{RootCAs: p.IssuerRoots, ServerName: domain})
		if err != nil {
			return err
		}
		return c.Close()
	})
	for name, key := range map[string]string{"live (burst)": liveKey, "test (quota)": testKey} {
		for i := range 2 {
			if r := h.sync(keyCred(key), ctxA); r.Status != 200 {
				t.Fatalf("%s: request %d: %d %s", name, i+1, r.Status, r.Body)
			}
		}
		if r := h.sync(keyCred(key), ctxA); r.Status != 429 {
			t.Errorf("%s: request 3: %d %s, want 429", name, r.Status, r.Body)
		}
	}

	seen := map[string]bool{}
	iter := client.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if !strings.HasPrefix(k, prefix) {
			t.Errorf("Redis key %q lies outside redis.key_prefix %q", k, prefix)
			continue
		}
		for _, kind := range []string{"rl:", "q:", "keystore:", "certmagic:"} {
			if strings.HasPrefix(k, prefix+kind) {
				seen[kind] = true
			}
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"rl:", "q:", "keystore:", "certmagic:"} {
		if !seen[kind] {
			t.Errorf("no %s%s… key in Redis: that part did not run against Redis", prefix, kind)
		}
	}
	chans, err := client.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(chans) == 0 {
		t.Error("no pub/sub channel: the Redis keystore is not subscribed")
	}
	for _, c := range chans {
		if !strings.HasPrefix(c, prefix) {
			t.Errorf("pub/sub channel %q lies outside redis.key_prefix %q", c, prefix)
		}
	}
}
