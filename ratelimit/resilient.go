package ratelimit

import (
	"github.com/keygate/keygate/policy"

	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.uber.org/zap"

	"github.com/keygate/keygate/redisconn"
)

// FailureMode says what a Resilient limiter does when its primary (Redis)
// cannot be reached in time.
type FailureMode string

const (
	// FailOpen decides locally, at the limit divided by the number of
	// replicas, while Redis is unavailable.
	FailOpen FailureMode = "open"
	// FailClosed returns an error wrapping ErrUnavailable (the gateway
	// answers 503) while Redis is unavailable.
	FailClosed FailureMode = "closed"
)

// Defaults of RedisConfig and ResilientConfig.
const (
	DefaultRedisTimeout    = 100 * time.Millisecond
	DefaultBreakerFailures = 3
	DefaultBreakerBackoff  = time.Second
	DefaultBlockedCache    = 10_000
)

// Allower decides one request: Local, Redis and Resilient are Allowers.
type Allower interface {
	Allow(ctx context.Context, id string, lim policy.Limit) (Decision, error)
}

// ResilientConfig configures a Resilient. Every zero field takes the
// default named in its comment.
type ResilientConfig struct {
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
	// BreakerFailures is the number of consecutive primary failures that
	// open the circuit breaker; zero means DefaultBreakerFailures.
	BreakerFailures int
	// BreakerBackoff is how long the breaker stays open before it lets one
	// probe through; zero means DefaultBreakerBackoff.
	BreakerBackoff time.Duration
	// Logger logs breaker state changes; nil means no logging.
	Logger *zap.Logger
	// Now is the local clock (for the blocked cache and the fallback);
	// nil means time.Now.
	Now func() time.Time
	// OnBreakerStateChange, when set, is called with the old and new state
	// ("closed", "half-open", "open") on each change. It must be quick and
	// must not call back into the limiter.
	OnBreakerStateChange func(from, to string)
}

// Stats are counters since the limiter was built, for metrics.
type Stats struct {
	RedisDecisions      uint64 // decided by the Redis script
	LeasedDecisions     uint64 // admitted from a lease (ratelimit.lease), without Redis
	CachedRefusals      uint64 // refused from the local over-limit cache, without Redis
	FallbackDecisions   uint64 // decided by the local fallback (FailOpen)
	UnavailableErrors   uint64 // Allow returned ErrUnavailable (FailClosed)
	RedisErrors         uint64 // Redis calls that failed or timed out
	BreakerStateChanges uint64
	BreakerState        string // "closed", "half-open" or "open"
}

// Resilient composes two limiters: a primary shared by the replicas (the
// Redis limiter, which only ever answers a decision or an error) and a
// Local fallback. Around the primary it keeps a circuit breaker
// (redisconn.Breaker: a few consecutive failures stop the calls for a
// back-off) and a small cache of ids known to be over their limit, which
// are refused until their retry-after passes without a call. While the
// primary is unavailable, decisions are the fallback's at the limit
// divided by the replicas (FailOpen), or errors wrapping ErrUnavailable
// (FailClosed). Build it with NewResilient; it is safe for concurrent use.
type Resilient struct {
	primary  Allower
	mode     FailureMode
	replicas int
	now      func() time.Time
	fallback *Local
	blocked  *lru.Cache[string, blockedEntry]
	breaker  *redisconn.Breaker[Decision]

	primaryDecisions, cachedRefusals, fallbackDecisions, unavailable, primaryErrors, stateChanges atomic.Uint64
}

// blockedEntry remembers a refusal by Redis until it can no longer hold.
type blockedEntry struct {
	lim   policy.Limit
	d     Decision
	at    time.Time
	until time.Time
}

// NewResilient composes primary with a local fallback as cfg says.
func NewResilient(primary Allower, cfg ResilientConfig) (*Resilient, error) {
	if primary == nil {
		return nil, errors.New("ratelimit: NewResilient needs a primary limiter")
	}
	switch cfg.FailureMode {
	case "":
		cfg.FailureMode = FailOpen
	case FailOpen, FailClosed:
	default:
		return nil, fmt.Errorf("ratelimit: failure mode must be %q or %q, got %q", FailOpen, FailClosed, cfg.FailureMode)
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
	r := &Resilient{
		primary:  primary,
		mode:     cfg.FailureMode,
		replicas: cfg.Replicas,
		now:      cfg.Now,
		fallback: NewLocal(LocalConfig{MaxKeys: cfg.LocalMaxKeys, Now: cfg.Now}),
		blocked:  blocked,
	}
	var down atomic.Int64    // when the breaker last left closed, unix ns
	var probes atomic.Uint64 // probes that failed since
	r.breaker = redisconn.NewBreaker[Decision](redisconn.BreakerConfig{
		Name:     "ratelimit-redis",
		Failures: cfg.BreakerFailures,
		Backoff:  cfg.BreakerBackoff,
		OnStateChange: func(from, to string) {
			r.stateChanges.Add(1)
			// One line when Redis is lost and one when it is back: while
			// it stays down the breaker goes open → half-open → open once
			// per back-off, and a line for each would be one a second.
			switch {
			case from == "closed":
				down.Store(cfg.Now().UnixNano())
				probes.Store(0)
				if ce := log.Check(zap.WarnLevel, "ratelimit: Redis unavailable; circuit breaker open"); ce != nil {
					ce.Write(zap.String("failure_mode", string(r.mode)), zap.Duration("probe_every", cfg.BreakerBackoff))
				}
			case to == "closed":
				if ce := log.Check(zap.InfoLevel, "ratelimit: Redis is back, circuit breaker closed"); ce != nil {
					ce.Write(zap.Duration("down_for", time.Duration(cfg.Now().UnixNano()-down.Load())), zap.Uint64("failed_probes", probes.Load()))
				}
			case to == "open":
				probes.Add(1)
			}
			if cfg.OnBreakerStateChange != nil {
				cfg.OnBreakerStateChange(from, to)
			}
		},
	})
	return r, nil
}

// primaryCall is one call of the primary, as the breaker runs it.
type primaryCall struct {
	p   Allower
	id  string
	lim policy.Limit
}

func callPrimary(ctx context.Context, c primaryCall) (Decision, error) {
	return c.p.Allow(ctx, c.id, c.lim)
}

// Allow decides whether the request of id may proceed under lim. An error
// means no decision: ErrInvalid for a bad id or lim, ErrUnavailable when
// the primary is unavailable in FailClosed mode, or the caller's context
// error when it gave up.
func (r *Resilient) Allow(ctx context.Context, id string, lim policy.Limit) (Decision, error) {
	if err := check(id, lim); err != nil {
		return Decision{}, err
	}
	if d, ok := r.cached(id, lim); ok {
		r.cachedRefusals.Add(1)
		return d, nil
	}
	d, err := redisconn.DoWith(r.breaker, ctx, primaryCall{r.primary, id, lim}, callPrimary)
	if err == nil {
		r.primaryDecisions.Add(1)
		if !d.Allowed && d.RetryAfter > 0 {
			now := r.now()
			r.blocked.Add(id, blockedEntry{lim: lim, d: d, at: now, until: now.Add(d.RetryAfter)})
		}
		return d, nil
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return Decision{}, err // the caller gave up
	}
	if !redisconn.Rejected(err) {
		r.primaryErrors.Add(1)
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
func (r *Resilient) cached(id string, lim policy.Limit) (Decision, bool) {
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
	d.Bucket.Reset = max(d.Bucket.Reset-elapsed, 0)
	d.Quota.Reset = max(d.Quota.Reset-elapsed, 0)
	return d, true
}

// Degraded reports whether the primary is being bypassed (the circuit
// breaker is open or probing): decisions are local (FailOpen) or errors
// (FailClosed).
func (r *Resilient) Degraded() bool { return !r.breaker.Closed() }

// Stats returns the counters since r was built.
func (r *Resilient) Stats() Stats {
	var leased uint64
	if l, ok := r.primary.(*Leases); ok {
		leased = l.Leased()
	}
	return Stats{
		RedisDecisions:      r.primaryDecisions.Load() - min(leased, r.primaryDecisions.Load()),
		LeasedDecisions:     leased,
		CachedRefusals:      r.cachedRefusals.Load(),
		FallbackDecisions:   r.fallbackDecisions.Load(),
		UnavailableErrors:   r.unavailable.Load(),
		RedisErrors:         r.primaryErrors.Load(),
		BreakerStateChanges: r.stateChanges.Load(),
		BreakerState:        r.breaker.State(),
	}
}
