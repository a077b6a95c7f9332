package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

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
	Limits map[string]Limit `yaml:"limits"`
	// MaxConcurrent caps the requests one credential may have in flight at
	// once; past it the answer is Status. It is counted per replica (in
	// memory), whatever the backend. 0 means no cap.
	MaxConcurrent int `yaml:"max_concurrent"`
	// Plans names limit sets that keys and consumers may be put on
	// (`keygate keys update ID --plan NAME`); see Plan and Resolver.
	// Empty by default.
	Plans map[string]Plan `yaml:"plans"`
}

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
		Limits: map[string]Limit{
			"live": {Rate: 50, Per: time.Second, Burst: 100},
			"test": {Rate: 5, Per: time.Second, Burst: 10, Quota: Quota{Requests: 1000, Per: 24 * time.Hour}},
		},
	}
}

// Validate reports the first problem in c, naming its field by YAML path.
func (c Config) Validate() error {
	var first error
	bad := func(path, format string, args ...any) {
		if first == nil {
			first = fmt.Errorf("ratelimit.%s: "+format, append([]any{path}, args...)...)
		}
	}
	if c.Backend != BackendLocal && c.Backend != BackendRedis {
		bad("backend", "must be %q or %q, got %q", BackendLocal, BackendRedis, c.Backend)
	}
	if c.FailureMode != FailOpen && c.FailureMode != FailClosed {
		bad("failure_mode", "must be %q or %q, got %q", FailOpen, FailClosed, c.FailureMode)
	}
	if c.Status != 429 && c.Status != 403 {
		bad("status", "must be 429 or 403, got %d", c.Status)
	}
	if c.Replicas < 1 {
		bad("replicas", "must be at least 1, got %d", c.Replicas)
	}
	if c.RedisTimeout <= 0 {
		bad("redis_timeout", "must be positive, got %s", c.RedisTimeout)
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
		validateLimit(c.Limits[name], "limits."+name, bad)
	}
	for _, env := range []string{"live", "test"} {
		if _, ok := c.Limits[env]; !ok && len(c.Limits) > 0 {
			bad("limits."+env, "required: every key is live or test, and each environment needs a limit")
		}
	}
	validatePlans(c.Plans, bad)
	return first
}

// Deps are what New needs besides the configuration.
type Deps struct {
	// Redis is required for the redis backend (see package redisconn).
	Redis redis.UniversalClient
	// Logger logs breaker state changes; nil means none.
	Logger *zap.Logger
	// KeyPrefix starts every Redis key; "" means DefaultKeyPrefix.
	KeyPrefix string
	// Now is the local clock; nil means time.Now.
	Now func() time.Time
	// OnBreakerStateChange is passed to RedisConfig.
	OnBreakerStateChange func(from, to string)
}

// Limiter is the limiter New builds from a Config: a Local, or a Redis
// with its fallback. The zero value is not usable; it is safe for
// concurrent use.
type Limiter struct {
	local  *Local
	redis  *Redis
	limits map[string]Limit
	status int
}

// New builds the limiter that cfg describes.
func New(cfg Config, deps Deps) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{limits: make(map[string]Limit, len(cfg.Limits)), status: cfg.Status}
	for k, v := range cfg.Limits {
		l.limits[k] = v
	}
	if cfg.Backend == BackendLocal {
		l.local = NewLocal(LocalConfig{MaxKeys: cfg.LocalMaxKeys, Now: deps.Now})
		return l, nil
	}
	if deps.Redis == nil {
		return nil, errors.New("ratelimit.backend: redis needs a Redis client (is the redis section configured?)")
	}
	r, err := NewRedis(RedisConfig{
		Client:               deps.Redis,
		KeyPrefix:            deps.KeyPrefix,
		Timeout:              cfg.RedisTimeout,
		FailureMode:          cfg.FailureMode,
		Replicas:             cfg.Replicas,
		LocalMaxKeys:         cfg.LocalMaxKeys,
		BreakerFailures:      cfg.BreakerFailures,
		BreakerBackoff:       cfg.BreakerBackoff,
		Logger:               deps.Logger,
		Now:                  deps.Now,
		OnBreakerStateChange: deps.OnBreakerStateChange,
	})
	if err != nil {
		return nil, err
	}
	l.redis = r
	return l, nil
}

// Allow decides whether the request of id (the key's public id) may
// proceed under lim. See Local.Allow and Redis.Allow.
func (l *Limiter) Allow(ctx context.Context, id string, lim Limit) (Decision, error) {
	if l.redis != nil {
		return l.redis.Allow(ctx, id, lim)
	}
	return l.local.Allow(ctx, id, lim)
}

// Limit returns the configured limit named name (such as "live").
func (l *Limiter) Limit(name string) (Limit, bool) {
	lim, ok := l.limits[name]
	return lim, ok
}

// Status is the configured HTTP status of a refusal (429 or 403).
func (l *Limiter) Status() int { return l.status }

// Degraded reports whether Redis is being bypassed; always false for the
// local backend.
func (l *Limiter) Degraded() bool { return l.redis != nil && l.redis.Degraded() }

// Stats returns the Redis backend's counters; the zero Stats (with
// BreakerState "") for the local backend.
func (l *Limiter) Stats() Stats {
	if l.redis == nil {
		return Stats{}
	}
	return l.redis.Stats()
}
