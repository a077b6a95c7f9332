package ratelimit_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"go.yaml.in/yaml/v3"
)

func TestDefaultConfigIsValid(t *testing.T) {
	t.Parallel()
	if err := ratelimit.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigFromYAML(t *testing.T) {
	t.Parallel()
	const doc = `
ratelimit:
  backend: redis
  failure_mode: closed
  status: 403
  replicas: 3
  redis_timeout: 50ms
  lease: 20ms
  local_max_keys: 5000
  limits:
    live: { rate: 100, per: 1m, burst: 20 }
    test: { rate: 5, per: 1s, burst: 10, quota: { requests: 1000, per: 24h } }
`
	var file struct {
		RateLimit ratelimit.Config `yaml:"ratelimit"`
	}
	file.RateLimit = ratelimit.DefaultConfig()
	if err := yaml.Unmarshal([]byte(doc), &file); err != nil {
		t.Fatal(err)
	}
	c := file.RateLimit
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := policy.Limit{Rate: 100, Per: time.Minute, Burst: 20}
	if c.Backend != "redis" || c.FailureMode != ratelimit.FailClosed || c.Status != 403 || c.Replicas != 3 ||
		c.RedisTimeout != 50*time.Millisecond || c.Lease != 20*time.Millisecond || c.LocalMaxKeys != 5000 || c.Limits["live"] != want ||
		c.Limits["test"].Quota != (policy.Quota{Requests: 1000, Per: 24 * time.Hour}) ||
		c.BreakerBackoff != ratelimit.DefaultBreakerBackoff {
		t.Fatalf("decoded %+v", c)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*ratelimit.Config)
		want   string
	}{
		{"unknown backend", func(c *ratelimit.Config) { c.Backend = "memcached" }, `backend: must be "local" or "redis", got "memcached"`},
		{"unknown failure mode", func(c *ratelimit.Config) { c.FailureMode = "maybe" }, "failure_mode: "},
		{"status other than 429 or 403", func(c *ratelimit.Config) { c.Status = 500 }, "status: must be 429 or 403, got 500"},
		{"no replicas", func(c *ratelimit.Config) { c.Replicas = 0 }, "replicas: must be at least 1"},
		{"zero redis timeout", func(c *ratelimit.Config) { c.RedisTimeout = 0 }, "redis_timeout: must be positive"},
		{"negative lease", func(c *ratelimit.Config) { c.Lease = -time.Millisecond }, "lease: must be between 0 (off) and 1s, got -1ms"},
		{"lease over a second", func(c *ratelimit.Config) { c.Lease = 2 * time.Second }, "lease: must be between 0 (off) and 1s, got 2s"},
		{"zero local keys", func(c *ratelimit.Config) { c.LocalMaxKeys = 0 }, "local_max_keys: must be at least 1"},
		{"zero breaker failures", func(c *ratelimit.Config) { c.BreakerFailures = 0 }, "breaker_failures: "},
		{"zero breaker back-off", func(c *ratelimit.Config) { c.BreakerBackoff = 0 }, "breaker_backoff: "},
		{"no limits", func(c *ratelimit.Config) { c.Limits = nil }, "limits: must name the limits of live and test"},
		{"zero burst", func(c *ratelimit.Config) { l := c.Limits["test"]; l.Burst = 0; c.Limits["test"] = l }, "limits.test.burst: must be from 1 to 1000000000, got 0"},
		{"zero rate", func(c *ratelimit.Config) { l := c.Limits["live"]; l.Rate = 0; c.Limits["live"] = l }, "limits.live.rate: must be from 0.01 to 1e+06"},
		{"tiny rate", func(c *ratelimit.Config) { l := c.Limits["live"]; l.Rate = 1e-300; c.Limits["live"] = l }, "limits.live.rate: must be from 0.01"},
		{"huge rate", func(c *ratelimit.Config) { l := c.Limits["live"]; l.Rate = 1e308; c.Limits["live"] = l }, "limits.live.rate: "},
		{"rate over a million per second", func(c *ratelimit.Config) {
			l := c.Limits["live"]
			l.Rate, l.Per = 1e6, time.Millisecond
			c.Limits["live"] = l
		}, "limits.live.rate: 1e+06 per 1ms is 1e+09 requests per second"},
		{"one request per century", func(c *ratelimit.Config) {
			l := c.Limits["live"]
			l.Rate, l.Per = 0.01, 366*24*time.Hour
			c.Limits["live"] = l
		}, "limits.live.rate: 0.01 per 8784h0m0s lets one request through every"},
		{"huge burst", func(c *ratelimit.Config) { l := c.Limits["test"]; l.Burst = math.MaxInt; c.Limits["test"] = l }, "limits.test.burst: must be from 1 to 1000000000"},
		{"per of a nanosecond", func(c *ratelimit.Config) { l := c.Limits["live"]; l.Per = time.Nanosecond; c.Limits["live"] = l }, "limits.live.per: must be a duration from 1ms to 8784h0m0s"},
		{"per over a year", func(c *ratelimit.Config) { l := c.Limits["live"]; l.Per = 367 * 24 * time.Hour; c.Limits["live"] = l }, "limits.live.per: "},
		{"huge quota", func(c *ratelimit.Config) {
			l := c.Limits["test"]
			l.Quota = policy.Quota{Requests: math.MaxInt64, Per: time.Nanosecond}
			c.Limits["test"] = l
		}, "limits.test.quota.requests: must be from 1 to 1000000000000"},
		{"quota per a nanosecond", func(c *ratelimit.Config) { l := c.Limits["test"]; l.Quota.Per = time.Nanosecond; c.Limits["test"] = l }, "limits.test.quota.per: must be a duration from 1ms"},
		{"plan out of bounds", func(c *ratelimit.Config) {
			c.Plans = map[string]policy.Plan{"pro": {Limit: policy.Limit{Rate: 10, Per: time.Second, Burst: 2e9}}}
		}, "plans.pro.burst: must be from 1 to 1000000000"},
		{"missing per", func(c *ratelimit.Config) { l := c.Limits["live"]; l.Per = 0; c.Limits["live"] = l }, "limits.live.per: "},
		{"quota without period", func(c *ratelimit.Config) { l := c.Limits["test"]; l.Quota.Per = 0; c.Limits["test"] = l }, "limits.test.quota.per: "},
		{"quota without requests", func(c *ratelimit.Config) { l := c.Limits["test"]; l.Quota.Requests = 0; c.Limits["test"] = l }, "limits.test.quota.requests: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ratelimit.DefaultConfig()
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to contain %q", err, tc.want)
			}
			if _, err := c.NewRedis(ratelimit.RedisDeps{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}); err == nil {
				t.Fatal("NewRedis accepted an invalid config")
			}
		})
	}
}

func TestNewBuildsTheConfiguredBackend(t *testing.T) {
	t.Parallel()
	c := ratelimit.DefaultConfig()
	live := c.Limits["live"]
	if d, err := c.NewLocal(nil).Allow(context.Background(), "key_a", live); err != nil || !d.Allowed || d.Limit != 100 {
		t.Fatalf("local: %+v %v", d, err)
	}

	c.Backend = ratelimit.BackendRedis
	if _, err := c.NewRedis(ratelimit.RedisDeps{}); err == nil || !strings.Contains(err.Error(), "backend") {
		t.Fatalf("redis backend without a client: %v", err)
	}
	s := redistest.Start(t)
	l, err := c.NewRedis(ratelimit.RedisDeps{Client: newClient(t, time.Second, s.Addr), KeyPrefix: "kg:"})
	if err != nil {
		t.Fatal(err)
	}
	// A bucket that does not refill during the test: its Redis key lives
	// for an hour, however slow the machine (live's would expire 21 ms
	// after the request), and each request's Remaining is exact.
	slow := policy.Limit{Rate: 1, Per: time.Hour, Burst: 100}
	if d, err := l.Allow(context.Background(), "key_a", slow); err != nil || !d.Allowed || l.Stats().RedisDecisions != 1 || l.Degraded() {
		t.Fatalf("redis: %+v %v %+v", d, err, l.Stats())
	}
	if n, _ := s.Do("EXISTS", "kg:rl:{key_a}"); n != "1" {
		t.Fatal("the key prefix from RedisDeps was not used")
	}

	// With a lease, a busy key's second request takes two cells and its
	// third is admitted without Redis.
	c.Lease = ratelimit.MaxLease
	l, err = c.NewRedis(ratelimit.RedisDeps{Client: newClient(t, time.Second, s.Addr), KeyPrefix: "kg:"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, err := l.Allow(context.Background(), "key_b", slow); err != nil || !d.Allowed || d.Remaining != int64(99-i) {
			t.Fatalf("leased request %d: %+v %v", i, d, err)
		}
	}
	if st := l.Stats(); st.RedisDecisions != 2 || st.LeasedDecisions != 1 {
		t.Fatalf("with a lease: %+v, want 2 Redis decisions and 1 leased", st)
	}
}
