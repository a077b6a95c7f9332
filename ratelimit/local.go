package ratelimit

import (
	"github.com/keygate/keygate/policy"

	"context"
	"math"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// DefaultLocalMaxKeys is the number of ids a Local keeps state for when
// LocalConfig.MaxKeys is zero.
const DefaultLocalMaxKeys = 100_000

// LocalConfig configures a Local. The zero value is ready to use: up to
// DefaultLocalMaxKeys ids and the wall clock.
type LocalConfig struct {
	// MaxKeys bounds the number of ids whose state is kept; the least
	// recently used id is forgotten (and starts afresh with a full bucket
	// and an unused quota) when a new one arrives. Zero means
	// DefaultLocalMaxKeys.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Local is a rate limiter that keeps its state in process memory: a token
// bucket (golang.org/x/time/rate) and a fixed-window quota counter per id.
// Each replica of the gateway has its own, so it limits per replica.
// The zero value is not usable: build one with NewLocal. It is safe for
// concurrent use.
type Local struct {
	now     func() time.Time
	entries *lru.Cache[string, *localEntry]
}

type localEntry struct {
	mu     sync.Mutex
	lim    policy.Limit
	bucket *rate.Limiter
	qStart time.Time // start of the current quota window; zero when none
	qUsed  int64
}

// NewLocal returns a Local ready for use.
func NewLocal(cfg LocalConfig) *Local {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultLocalMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c, err := lru.New[string, *localEntry](cfg.MaxKeys)
	if err != nil { // only for a non-positive size, excluded above
		panic(err)
	}
	return &Local{now: cfg.Now, entries: c}
}

// Len returns the number of ids whose state is kept; it never exceeds
// MaxKeys.
func (l *Local) Len() int { return l.entries.Len() }

// Allow decides whether the request of id may proceed under lim, and
// counts it when it may. A request refused by the bucket consumes no quota
// and a request refused by the quota consumes no token. The error is
// non-nil only for an empty id or an invalid lim (see ErrInvalid).
func (l *Local) Allow(_ context.Context, id string, lim policy.Limit) (Decision, error) {
	if err := check(id, lim); err != nil {
		return Decision{}, err
	}
	e := l.entry(id)
	now := l.now()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bucket == nil || e.lim.Rate != lim.Rate || e.lim.Per != lim.Per || e.lim.Burst != lim.Burst {
		e.bucket = rate.NewLimiter(perSecond(lim), lim.Burst)
	}
	if e.lim.Quota.Per != lim.Quota.Per {
		e.qStart, e.qUsed = time.Time{}, 0
	}
	e.lim = lim

	// Quota: a fixed window of Quota.Per from its first admitted request.
	var qUsed int64
	var qReset time.Duration
	if lim.Quota.Enabled() {
		if !e.qStart.IsZero() && now.Before(e.qStart.Add(lim.Quota.Per)) {
			qUsed, qReset = e.qUsed, e.qStart.Add(lim.Quota.Per).Sub(now)
		} else {
			qReset = lim.Quota.Per
		}
	}

	ratePerSec := float64(perSecond(lim))
	tokens := e.bucket.TokensAt(now)
	fill := func(t float64) time.Duration { // time until the bucket holds burst tokens
		if t >= float64(lim.Burst) {
			return 0
		}
		return durationCeil((float64(lim.Burst) - t) / ratePerSec)
	}

	if lim.Quota.Enabled() && qUsed >= lim.Quota.Requests {
		return Decision{Reason: ReasonQuota, Limit: lim.Quota.Requests, RetryAfter: qReset, Reset: qReset}, nil
	}
	if tokens < 1 {
		return Decision{
			Reason:     ReasonRate,
			Limit:      int64(lim.Burst),
			RetryAfter: durationCeil((1 - tokens) / ratePerSec),
			Reset:      fill(tokens),
		}, nil
	}

	e.bucket.AllowN(now, 1)
	tokens--
	if lim.Quota.Enabled() {
		if qUsed == 0 {
			e.qStart, e.qUsed = now, 0
			qReset = lim.Quota.Per
		}
		e.qUsed++
		qUsed = e.qUsed
	}
	return combine(lim, int64(math.Floor(tokens+1e-9)), fill(tokens), lim.Quota.Requests-qUsed, qReset), nil
}

// entry returns the state of id, creating it when needed.
func (l *Local) entry(id string) *localEntry {
	if e, ok := l.entries.Get(id); ok {
		return e
	}
	e := &localEntry{}
	if prev, ok, _ := l.entries.PeekOrAdd(id, e); ok {
		return prev
	}
	return e
}

// perSecond is lim's rate in tokens per second.
func perSecond(lim policy.Limit) rate.Limit {
	return rate.Limit(lim.Rate / lim.Per.Seconds())
}

// durationCeil converts seconds to a Duration, rounding up to a microsecond
// so that waiting that long is always enough.
func durationCeil(sec float64) time.Duration {
	if sec <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(sec*1e6)) * time.Microsecond
}
