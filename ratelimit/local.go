package ratelimit

import (
	"github.com/keygate/keygate/policy"

	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
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
//
// Ids are spread over shards (localShards, or one for a MaxKeys below
// localShardMin), each an LRU behind its own mutex, held for the whole
// decision: there is no global lock, and an id has one bucket at a time
// (a decision can never run on a bucket that the LRU has just evicted
// while another starts afresh). A shard may hold a quarter more than
// its share of MaxKeys, since ids do not hash evenly, while a count of
// all ids (an atomic, touched only when an id is added or forgotten)
// keeps the total within MaxKeys: a new id past it makes its shard
// forget its least recently used id. The zero value is not usable: build one with NewLocal. It is
// safe for concurrent use.
type Local struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []localShard
	max    int64
	count  atomic.Int64 // ids kept, over all shards

	// inUse, when set (by tests), is told when a decision starts and
	// ends using the bucket of an id.
	inUse func(id string, e *localEntry, start bool)
}

// localShards is the number of shards of a Local; one shard below
// localShardMin ids, so that a small MaxKeys is kept exactly.
const (
	localShards   = 64
	localShardMin = 64 * 1024
)

type localShard struct {
	mu      sync.Mutex
	entries *simplelru.LRU[string, *localEntry]
	_       [40]byte // keep shards on separate cache lines
}

type localEntry struct {
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
	n := 1
	if cfg.MaxKeys >= localShardMin {
		n = localShards
	}
	l := &Local{now: cfg.Now, seed: maphash.MakeSeed(), shards: make([]localShard, n), max: int64(cfg.MaxKeys)}
	per := cfg.MaxKeys
	if n > 1 {
		per = cfg.MaxKeys/n + cfg.MaxKeys/(4*n)
	}
	for i := range l.shards {
		c, err := simplelru.NewLRU[string, *localEntry](per, func(string, *localEntry) { l.count.Add(-1) })
		if err != nil { // only for a non-positive size, excluded above
			panic(err)
		}
		l.shards[i].entries = c
	}
	return l
}

// Len returns the number of ids whose state is kept; it never exceeds
// MaxKeys.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += s.entries.Len()
		s.mu.Unlock()
	}
	return n
}

// Allow decides whether the request of id may proceed under lim, and
// counts it when it may. A request refused by the bucket consumes no quota
// and a request refused by the quota consumes no token. The error is
// non-nil only for an empty id or an invalid lim (see ErrInvalid).
func (l *Local) Allow(_ context.Context, id string, lim policy.Limit) (Decision, error) {
	if err := check(id, lim); err != nil {
		return Decision{}, err
	}
	s := l.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := l.entry(s, id)
	if l.inUse != nil {
		l.inUse(id, e, true)
		defer l.inUse(id, e, false)
	}
	now := l.now()

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

func (l *Local) shard(id string) *localShard {
	if len(l.shards) == 1 {
		return &l.shards[0]
	}
	return &l.shards[maphash.String(l.seed, id)%uint64(len(l.shards))]
}

// entry returns the state of id in its shard s, creating it when
// needed. The shard's lock is held.
func (l *Local) entry(s *localShard, id string) *localEntry {
	if e, ok := s.entries.Get(id); ok {
		return e
	}
	if l.count.Load() >= l.max {
		s.entries.RemoveOldest()
	}
	e := &localEntry{}
	l.count.Add(1)
	s.entries.Add(id, e)
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
