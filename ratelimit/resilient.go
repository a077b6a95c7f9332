package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
)

// FailureMode says what Redis does when Redis cannot be reached in time.
type FailureMode string

const (
	// FailOpen decides locally, at the limit divided by the number of
	// replicas, while Redis is unavailable.
	FailOpen FailureMode = "open"
	// FailClosed returns an error wrapping ErrUnavailable (the gateway
	// answers 503) while Redis is unavailable.
	FailClosed FailureMode = "closed"
)

// Defaults of RedisConfig.
const (
	DefaultRedisTimeout    = 100 * time.Millisecond
	DefaultBreakerFailures = 3
	DefaultBreakerBackoff  = time.Second
	DefaultBlockedCache    = 10_000
)

// RedisConfig configures a Redis limiter. Only Client is required; every
// other zero field takes the default named in its comment.
type RedisConfig struct {
	// Client runs the script. It should have ContextTimeoutEnabled set
	// (redisconn.New does) so that Timeout bounds each call.
	Client Scripter
	// KeyPrefix starts every key; "" means DefaultKeyPrefix.
	KeyPrefix string
	// Timeout bounds each Redis call; zero means DefaultRedisTimeout.
	Timeout time.Duration
	// FailureMode is FailOpen (also for "") or FailClosed.
	FailureMode FailureMode
	// Replicas is the number of gateway replicas sharing the limits; in
	// FailOpen each decides locally at limit/Replicas. Zero means 1.
	Replicas int
	// LocalMaxKeys bounds the fallback Local; zero means
	// DefaultLocalMaxKeys.
	LocalMaxKeys int
	// BlockedCacheSize bounds the cache of ids known to be over their
	// limit; zero means DefaultBlockedCache.
	BlockedCacheSize int
	// BreakerFailures is the number of consecutive Redis failures that
	// open the circuit breaker; zero means DefaultBreakerFailures.
	BreakerFailures int
	// BreakerBackoff is how long the breaker stays open before it lets one
	// probe through; zero means DefaultBreakerBackoff.
	BreakerBackoff time.Duration
	// Logger logs breaker state changes; nil means no logging.
	Logger *zap.Logger
	// Now is the local clock (for the blocked cache and the fallback);
	// nil means time.Now. Redis decisions use the Redis server's clock.
	Now func() time.Time
	// OnBreakerStateChange, when set, is called with the old and new state
	// ("closed", "half-open", "open") on each change. It must be quick and
	// must not call back into the limiter.
	OnBreakerStateChange func(from, to string)
}

// Stats are counters since the limiter was built, for metrics.
type Stats struct {
	RedisDecisions      uint64 // decided by the Redis script
	CachedRefusals      uint64 // refused from the local over-limit cache, without Redis
	FallbackDecisions   uint64 // decided by the local fallback (FailOpen)
	UnavailableErrors   uint64 // Allow returned ErrUnavailable (FailClosed)
	RedisErrors         uint64 // Redis calls that failed or timed out
	BreakerStateChanges uint64
	BreakerState        string // "closed", "half-open" or "open"
}

// Redis is a rate limiter whose state lives in Redis, shared by every
// replica: one atomic Lua script (EVALSHA) per decision. Ids known to be
// over their limit are refused from a small local cache until their
// retry-after passes, without a Redis call. A circuit breaker stops
// calling Redis after a few consecutive failures; meanwhile decisions are
// made by a local fallback (FailOpen) or refused with ErrUnavailable
// (FailClosed). The zero value is not usable: build one with NewRedis. It
// is safe for concurrent use.
type Redis struct {
	client       Scripter
	bucketPrefix string
	quotaPrefix  string
	timeout      time.Duration
	mode         FailureMode
	replicas     int
	now          func() time.Time
	fallback     *Local
	blocked      *lru.Cache[string, blockedEntry]
	breaker      *gobreaker.CircuitBreaker[Decision]
	batch        *batcher // nil when the client cannot pipeline

	redisDecisions, cachedRefusals, fallbackDecisions, unavailable, redisErrors, stateChanges atomic.Uint64
}

// blockedEntry remembers a refusal by Redis until it can no longer hold.
type blockedEntry struct {
	lim   Limit
	d     Decision
	at    time.Time
	until time.Time
}

// errCallerGone wraps a failure caused by the caller's context, which says
// nothing about Redis's health.
var errCallerGone = errors.New("ratelimit: caller gave up")

// NewRedis returns a Redis limiter, or an error when cfg is unusable. It
// tries to load the script into Redis, but a Redis that is down at start is
// not an error: the breaker and the failure mode deal with it.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("ratelimit: RedisConfig.Client is nil")
	}
	switch cfg.FailureMode {
	case "":
		cfg.FailureMode = FailOpen
	case FailOpen, FailClosed:
	default:
		return nil, fmt.Errorf("ratelimit: failure mode must be %q or %q, got %q", FailOpen, FailClosed, cfg.FailureMode)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRedisTimeout
	}
	cfg.Replicas = max(cfg.Replicas, 1)
	if cfg.BlockedCacheSize <= 0 {
		cfg.BlockedCacheSize = DefaultBlockedCache
	}
	if cfg.BreakerFailures <= 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerBackoff <= 0 {
		cfg.BreakerBackoff = DefaultBreakerBackoff
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	blocked, err := lru.New[string, blockedEntry](cfg.BlockedCacheSize)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: blocked cache: %w", err)
	}
	r := &Redis{
		client:       cfg.Client,
		bucketPrefix: cfg.KeyPrefix + "rl:{",
		quotaPrefix:  cfg.KeyPrefix + "q:{",
		timeout:      cfg.Timeout,
		mode:         cfg.FailureMode,
		replicas:     cfg.Replicas,
		now:          cfg.Now,
		fallback:     NewLocal(LocalConfig{MaxKeys: cfg.LocalMaxKeys, Now: cfg.Now}),
		blocked:      blocked,
	}
	if p, ok := cfg.Client.(Pipeliner); ok {
		r.batch = &batcher{client: cfg.Client, pipe: p, timeout: cfg.Timeout}
	}
	failures := uint32(cfg.BreakerFailures)
	r.breaker = gobreaker.NewCircuitBreaker[Decision](gobreaker.Settings{
		Name:        "ratelimit-redis",
		MaxRequests: 1,
		Timeout:     cfg.BreakerBackoff,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, errCallerGone) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			r.stateChanges.Add(1)
			if to == gobreaker.StateClosed {
				log.Info("ratelimit: redis is back, circuit breaker closed", zap.String("from", from.String()))
			} else if ce := log.Check(zap.WarnLevel, "ratelimit: redis circuit breaker"); ce != nil {
				ce.Write(zap.String("from", from.String()), zap.String("to", to.String()), zap.String("failure_mode", string(r.mode)))
			}
			if cfg.OnBreakerStateChange != nil {
				cfg.OnBreakerStateChange(from.String(), to.String())
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	_ = gcra.Load(ctx, cfg.Client).Err() // only saves the first EVAL
	return r, nil
}

// Allow decides whether the request of id may proceed under lim. id is
// the key's public id, never the key; it is the only thing the Redis keys
// are made of. An error means the limiter cannot decide: ErrInvalid for a
// bad id or lim, ErrUnavailable when Redis is unavailable in FailClosed
// mode, or the caller's context error when it gave up.
func (r *Redis) Allow(ctx context.Context, id string, lim Limit) (Decision, error) {
	if err := check(id, lim); err != nil {
		return Decision{}, err
	}
	if d, ok := r.cached(id, lim); ok {
		r.cachedRefusals.Add(1)
		return d, nil
	}
	d, err := r.breaker.Execute(func() (Decision, error) {
		d, err := r.eval(ctx, id, lim)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errCallerGone, ctx.Err())
		}
		return d, err
	})
	if err == nil {
		r.redisDecisions.Add(1)
		if !d.Allowed && d.RetryAfter > 0 {
			now := r.now()
			r.blocked.Add(id, blockedEntry{lim: lim, d: d, at: now, until: now.Add(d.RetryAfter)})
		}
		return d, nil
	}
	if errors.Is(err, errCallerGone) {
		return Decision{}, ctx.Err()
	}
	if !errors.Is(err, gobreaker.ErrOpenState) && !errors.Is(err, gobreaker.ErrTooManyRequests) {
		r.redisErrors.Add(1)
	}
	if r.mode == FailClosed {
		r.unavailable.Add(1)
		return Decision{}, fmt.Errorf("%w: redis: %w", ErrUnavailable, err)
	}
	r.fallbackDecisions.Add(1)
	return r.fallback.Allow(ctx, id, divide(lim, r.replicas))
}

// cached returns a refusal for id when Redis refused it recently under
// the same lim and its retry-after has not passed.
func (r *Redis) cached(id string, lim Limit) (Decision, bool) {
	if r.blocked.Len() == 0 {
		return Decision{}, false
	}
	e, ok := r.blocked.Get(id)
	if !ok {
		return Decision{}, false
	}
	now := r.now()
	if e.lim != lim || !now.Before(e.until) {
		r.blocked.Remove(id)
		return Decision{}, false
	}
	elapsed := now.Sub(e.at)
	d := e.d
	d.RetryAfter = e.until.Sub(now)
	d.Reset = max(d.Reset-elapsed, d.RetryAfter)
	return d, true
}

// Degraded reports whether Redis is being bypassed (the circuit breaker
// is open or probing): decisions are local (FailOpen) or errors
// (FailClosed).
func (r *Redis) Degraded() bool { return r.breaker.State() != gobreaker.StateClosed }

// Stats returns the counters since r was built.
func (r *Redis) Stats() Stats {
	return Stats{
		RedisDecisions:      r.redisDecisions.Load(),
		CachedRefusals:      r.cachedRefusals.Load(),
		FallbackDecisions:   r.fallbackDecisions.Load(),
		UnavailableErrors:   r.unavailable.Load(),
		RedisErrors:         r.redisErrors.Load(),
		BreakerStateChanges: r.stateChanges.Load(),
		BreakerState:        r.breaker.State().String(),
	}
}
