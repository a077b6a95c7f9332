package ratelimit

import (
	"fmt"
	"sort"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/policy"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Backends of Config.Backend.
const (
	BackendLocal = "local"
	BackendRedis = "redis"
)

// Config is the `ratelimit:` section of the configuration file. Get the
// defaults from DefaultConfig; check it with Validate.
type Config struct {
	// Backend is "local" (each replica limits on its own) or "redis"
	// (limits shared by all replicas through Redis).
	Backend string `yaml:"backend"`
	// FailureMode is what the redis backend does while Redis is
	// unavailable: "open" decides locally at limit/replicas, "closed"
	// refuses with 503.
	FailureMode FailureMode `yaml:"failure_mode"`
	// Status is the HTTP status of a refusal: 429, or 403 for clients that
	// expect it.
	Status int `yaml:"status"`
	// Replicas is the number of gateway replicas; failure_mode open
	// divides each limit by it during an outage.
	Replicas int `yaml:"replicas"`
	// RedisTimeout bounds each Redis call.
	RedisTimeout time.Duration `yaml:"redis_timeout"`
	// Lease, with the redis backend, lets a replica take several cells of
	// a busy key's bucket from Redis at once and admit the key's next
	// requests from them for up to this long (see Leases). Zero (the
	// default) decides every request in Redis.
	Lease time.Duration `yaml:"lease"`
	// LocalMaxKeys bounds the ids whose state the local limiter (the
	// backend or the fallback) keeps.
	LocalMaxKeys int `yaml:"local_max_keys"`
	// BreakerFailures is the number of consecutive Redis failures after
	// which Redis is bypassed.
	BreakerFailures int `yaml:"breaker_failures"`
	// BreakerBackoff is how long Redis is bypassed before one request
	// probes it again.
	BreakerBackoff time.Duration `yaml:"breaker_backoff"`
	// Limits maps a key's environment ("live", "test") to its limit; both
	// are required, and other names are allowed but unused.
	Limits map[string]policy.Limit `yaml:"limits"`
	// MaxConcurrent caps the requests one credential may have in flight at
	// once; past it the answer is Status. It is counted per replica (in
	// memory), whatever the backend. 0 means no cap.
	MaxConcurrent int `yaml:"max_concurrent"`
	// Headers chooses the rate-limit response fields: "draft" sends
	// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers,
	// RFC 9651 structured fields) with the bucket and the quota as two
	// policies; "legacy" sends RateLimit-Limit, -Remaining and -Reset for
	// the tighter of the two. Both by default; an empty list sends none.
	Headers []string `yaml:"headers"`
	// Plans names limit sets that keys and consumers may be put on
	// (`keygate keys update ID --plan NAME`); see policy.Plan and policy.Resolver.
	// Empty by default.
	Plans map[string]policy.Plan `yaml:"plans"`
}

// Values of Config.Headers.
const (
	HeadersDraft  = "draft"
	HeadersLegacy = "legacy"
)

// MaxLease bounds Config.Lease: a lease stretches the burst by rate×lease,
// and a second is already more than any limit's burst should stretch.
const MaxLease = time.Second

// DefaultMaxConcurrent is the default cap on one credential's requests in
// flight.
const DefaultMaxConcurrent = 16

// DefaultConfig returns the defaults: local backend, fail open, 429, one
// replica, 100ms Redis timeout, 100000 local keys, 16 requests in flight
// per credential, live 50/s burst 100, test 5/s burst 10 with 1000
// requests per 24h.
func DefaultConfig() Config {
	return Config{
		Backend:         BackendLocal,
		FailureMode:     FailOpen,
		Status:          429,
		Replicas:        1,
		RedisTimeout:    DefaultRedisTimeout,
		LocalMaxKeys:    DefaultLocalMaxKeys,
		BreakerFailures: DefaultBreakerFailures,
		BreakerBackoff:  DefaultBreakerBackoff,
		MaxConcurrent:   DefaultMaxConcurrent,
		Headers:         []string{HeadersDraft, HeadersLegacy},
		Limits: map[string]policy.Limit{
			"live": {Rate: 50, Per: time.Second, Burst: 100},
			"test": {Rate: 5, Per: time.Second, Burst: 10, Quota: policy.Quota{Requests: 1000, Per: 24 * time.Hour}},
		},
	}
}

// Validate reports the first problem in c, naming its field by YAML path.
func (c Config) Validate() error {
	var v fieldpath.First
	bad := v.Bad
	if c.Backend != BackendLocal && c.Backend != BackendRedis {
		bad("backend", "must be %q or %q, got %q", BackendLocal, BackendRedis, c.Backend)
	}
	if c.FailureMode != FailOpen && c.FailureMode != FailClosed {
		bad("failure_mode", "must be %q or %q, got %q", FailOpen, FailClosed, c.FailureMode)
	}
	if c.Status != 429 && c.Status != 403 {
		bad("status", "must be 429 or 403, got %d", c.Status)
	}
	seen := map[string]bool{}
	for i, h := range c.Headers {
		switch {
		case h != HeadersDraft && h != HeadersLegacy:
			bad(fmt.Sprintf("headers[%d]", i), "must be %q or %q, got %q", HeadersDraft, HeadersLegacy, h)
		case seen[h]:
			bad(fmt.Sprintf("headers[%d]", i), "%q is listed twice", h)
		}
		seen[h] = true
	}
	if c.Replicas < 1 {
		bad("replicas", "must be at least 1, got %d", c.Replicas)
	}
	if c.RedisTimeout <= 0 {
		bad("redis_timeout", "must be positive, got %s", c.RedisTimeout)
	}
	if c.Lease < 0 || c.Lease > MaxLease {
		bad("lease", "must be between 0 (off) and %s, got %s", MaxLease, c.Lease)
	}
	if c.LocalMaxKeys < 1 {
		bad("local_max_keys", "must be at least 1, got %d", c.LocalMaxKeys)
	}
	if c.BreakerFailures < 1 {
		bad("breaker_failures", "must be at least 1, got %d", c.BreakerFailures)
	}
	if c.BreakerBackoff <= 0 {
		bad("breaker_backoff", "must be positive, got %s", c.BreakerBackoff)
	}
	if c.MaxConcurrent < 0 {
		bad("max_concurrent", "must not be negative (0 turns the cap off), got %d", c.MaxConcurrent)
	}
	if len(c.Limits) == 0 {
		bad("limits", "must name the limits of live and test")
	}
	names := make([]string, 0, len(c.Limits))
	for name := range c.Limits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		policy.ValidateLimit(c.Limits[name], "limits."+name, bad)
	}
	for _, env := range []string{"live", "test"} {
		if _, ok := c.Limits[env]; !ok && len(c.Limits) > 0 {
			bad("limits."+env, "required: every key is live or test, and each environment needs a limit")
		}
	}
	policy.ValidatePlans(c.Plans, bad)
	return v.Err()
}

// NewLocal builds the local backend's limiter (backend local). now is
// the clock; nil means time.Now.
func (c Config) NewLocal(now func() time.Time) *Local {
	return NewLocal(LocalConfig{MaxKeys: c.LocalMaxKeys, Now: now})
}

// RedisDeps are what the redis backend needs besides the configuration.
type RedisDeps struct {
	// Client is the shared Redis client (see package redisconn).
	Client redis.UniversalClient
	// KeyPrefix starts every Redis key; "" means DefaultKeyPrefix.
	KeyPrefix string
	// Logger logs breaker state changes; nil means none.
	Logger *zap.Logger
	// Now is the local clock; nil means time.Now.
	Now func() time.Time
	// OnBreakerStateChange is passed to ResilientConfig.
	OnBreakerStateChange func(from, to string)
}

// NewRedis builds the redis backend's limiter: the Redis limiter composed
// with its local fallback, breaker and over-limit cache as the section
// says (failure_mode, replicas, breaker_*, local_max_keys).
func (c Config) NewRedis(deps RedisDeps) (*Resilient, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if deps.Client == nil {
		return nil, fieldpath.Errorf("backend", "redis needs a Redis client (is the redis section configured?)")
	}
	r, err := NewRedis(RedisConfig{Client: deps.Client, KeyPrefix: deps.KeyPrefix, Timeout: c.RedisTimeout})
	if err != nil {
		return nil, err
	}
	var primary Allower = r
	if c.Lease > 0 {
		primary = NewLeases(r, LeaseConfig{TTL: c.Lease, Now: deps.Now})
	}
	return NewResilient(primary, ResilientConfig{
		FailureMode:          c.FailureMode,
		Replicas:             c.Replicas,
		LocalMaxKeys:         c.LocalMaxKeys,
		BreakerFailures:      c.BreakerFailures,
		BreakerBackoff:       c.BreakerBackoff,
		Logger:               deps.Logger,
		Now:                  deps.Now,
		OnBreakerStateChange: deps.OnBreakerStateChange,
	})
}

// Resolver returns the resolver of c's env defaults and plans.
func (c Config) Resolver() (*policy.Resolver, error) { return policy.NewResolver(c.Limits, c.Plans) }
