package ratelimit

import (
	"github.com/keygate/keygate/policy"

	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.uber.org/zap"
)

// FailureLimitConfig is the `auth.failure_limit:` section: how many failed
// authentications one source address may make before it is refused
// outright. Get the defaults from DefaultFailureLimitConfig.
type FailureLimitConfig struct {
	// Enabled turns the limit on.
	Enabled bool `yaml:"enabled"`
	// Rate failures per Per are allowed on average, in bursts of up to
	// Burst. Past that, the address is refused (429) until a failure would
	// be allowed again, whatever credential it sends.
	Rate  float64       `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
	Burst int           `yaml:"burst"`
	// MaxAddresses bounds the addresses whose failures are remembered in
	// memory; the least recently seen is forgotten first.
	MaxAddresses int `yaml:"max_addresses"`
}

// DefaultFailureLimitConfig is on: 30 failures per minute, in bursts of up
// to 60, remembered for up to 100000 addresses.
func DefaultFailureLimitConfig() FailureLimitConfig {
	return FailureLimitConfig{Enabled: true, Rate: 30, Per: time.Minute, Burst: 60, MaxAddresses: DefaultLocalMaxKeys}
}

// Limit is the token bucket the failures of one address draw from.
func (c FailureLimitConfig) Limit() policy.Limit {
	return policy.Limit{Rate: c.Rate, Per: c.Per, Burst: c.Burst}
}

// Validate reports every problem in c, each naming its field by YAML path.
// A disabled limit is not checked further.
func (c FailureLimitConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	var v fieldpath.First
	bad := v.Bad
	var fe *policy.FieldError
	if errors.As(policy.CheckFields(policy.Fields{Rate: &c.Rate, Per: &c.Per, Burst: &c.Burst}), &fe) {
		bad(fe.Field, "%s", fe.Msg)
	}
	if c.MaxAddresses < 1 {
		bad("max_addresses", "must be at least 1, got %d", c.MaxAddresses)
	}
	return v.Err()
}

// FailuresConfig configures Failures. Limit is required; Redis is optional.
type FailuresConfig struct {
	Limit FailureLimitConfig
	// Redis, when set, keeps the counts in Redis so that every replica
	// sees every failure. Without it each replica counts on its own.
	Redis Client
	// KeyPrefix starts every Redis key; "" means DefaultKeyPrefix. The
	// counts live under KeyPrefix + "authfail:".
	KeyPrefix string
	// Timeout bounds each Redis call; zero means DefaultRedisTimeout.
	Timeout time.Duration
	// Replicas divides the limit while Redis is unavailable and each
	// replica counts locally; zero means 1.
	Replicas int
	// BreakerFailures and BreakerBackoff are as in RedisConfig.
	BreakerFailures int
	BreakerBackoff  time.Duration
	// Logger logs the Redis breaker's state changes; nil means none.
	Logger *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// FailureStats are counters since the Failures was built, for metrics.
type FailureStats struct {
	Counted   uint64 // failed authentications counted against an address
	Throttled uint64 // requests refused because their address was over the limit
	// Fallback is how many failures were counted locally because Redis was
	// unavailable (the limit fails open to a local count, never to an
	// error).
	Fallback uint64
	// Errors is how many failures could not be counted at all (the caller
	// went away while Redis answered); they were let through as 401s.
	Errors uint64
}

// Failures limits failed authentications per source address, to slow down
// guessing. Fail counts one failure and says whether the address is now
// over its limit; Blocked says, without counting anything and without a
// Redis call, whether an address is refused right now. IPv6 addresses are
// counted per /64, since one client commonly holds a whole /64.
//
// The zero value is not usable; build one with NewFailures. A nil
// *Failures limits nothing. It is safe for concurrent use.
type Failures struct {
	limit   policy.Limit
	local   *Local
	redis   *Resilient
	now     func() time.Time
	blocked *lru.Cache[netip.Addr, time.Time]
	// latest is the end (UnixNano) of the latest block ever set; while now
	// is past it no address is blocked, and Blocked answers without a lock.
	latest atomic.Int64

	counted, throttled, errs atomic.Uint64
}

// NewFailures builds the limit cfg describes, or nil when it is disabled.
func NewFailures(cfg FailuresConfig) (*Failures, error) {
	if !cfg.Limit.Enabled {
		return nil, nil
	}
	if err := cfg.Limit.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	blocked, err := lru.New[netip.Addr, time.Time](cfg.Limit.MaxAddresses)
	if err != nil {
		return nil, fieldpath.Errorf("max_addresses", "%w", err)
	}
	f := &Failures{limit: cfg.Limit.Limit(), now: cfg.Now, blocked: blocked}
	if cfg.Redis == nil {
		f.local = NewLocal(LocalConfig{MaxKeys: cfg.Limit.MaxAddresses, Now: cfg.Now})
		return f, nil
	}
	prefix := cfg.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	r, err := NewRedis(RedisConfig{Client: cfg.Redis, KeyPrefix: prefix + "authfail:", Timeout: cfg.Timeout})
	if err != nil {
		return nil, err
	}
	f.redis, err = NewResilient(r, ResilientConfig{
		FailureMode:      FailOpen,
		Replicas:         cfg.Replicas,
		LocalMaxKeys:     cfg.Limit.MaxAddresses,
		BlockedCacheSize: min(cfg.Limit.MaxAddresses, DefaultBlockedCache),
		BreakerFailures:  cfg.BreakerFailures,
		BreakerBackoff:   cfg.BreakerBackoff,
		Logger:           cfg.Logger,
		Now:              cfg.Now,
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// sourceKey is what an address is counted under: itself for IPv4, its /64
// for IPv6.
func sourceKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.Addr()
	}
	return a
}

// Blocked reports whether addr is over its limit, and for how long it
// stays so. It costs an atomic load while no address is blocked, and never
// calls Redis. An invalid addr is never blocked.
func (f *Failures) Blocked(addr netip.Addr) (time.Duration, bool) {
	if f == nil || !addr.IsValid() {
		return 0, false
	}
	now := f.now()
	if now.UnixNano() >= f.latest.Load() {
		return 0, false
	}
	until, ok := f.blocked.Peek(sourceKey(addr))
	if !ok || !now.Before(until) {
		return 0, false
	}
	f.throttled.Add(1)
	return until.Sub(now), true
}

// Fail counts one failed authentication from addr. It reports whether addr
// is now over its limit, and for how long; from then on Blocked refuses it
// until that time. With Redis it makes one round trip (none while the
// address is known to be over the limit); when Redis is unavailable the
// failure is counted locally. An invalid addr is not counted.
func (f *Failures) Fail(ctx context.Context, addr netip.Addr) (time.Duration, bool) {
	if f == nil || !addr.IsValid() {
		return 0, false
	}
	k := sourceKey(addr)
	f.counted.Add(1)
	var d Decision
	var err error
	if f.redis != nil {
		d, err = f.redis.Allow(ctx, k.String(), f.limit)
	} else {
		d, err = f.local.Allow(ctx, k.String(), f.limit)
	}
	if err != nil || d.Allowed {
		if err != nil {
			f.errs.Add(1)
		}
		return 0, false
	}
	retry := max(d.RetryAfter, time.Millisecond)
	until := f.now().Add(retry)
	f.blocked.Add(k, until)
	for {
		cur := f.latest.Load()
		if until.UnixNano() <= cur || f.latest.CompareAndSwap(cur, until.UnixNano()) {
			break
		}
	}
	f.throttled.Add(1)
	return retry, true
}

// Stats returns the counters since f was built.
func (f *Failures) Stats() FailureStats {
	if f == nil {
		return FailureStats{}
	}
	s := FailureStats{Counted: f.counted.Load(), Throttled: f.throttled.Load(), Errors: f.errs.Load()}
	if f.redis != nil {
		s.Fallback = f.redis.Stats().FallbackDecisions
	}
	return s
}

// Degraded reports whether the Redis counts are being bypassed (always
// false without Redis).
func (f *Failures) Degraded() bool { return f != nil && f.redis != nil && f.redis.Degraded() }
