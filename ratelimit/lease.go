package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/keygate/keygate/policy"
)

// Leases puts a Redis limiter behind short leases (ratelimit.lease): a
// replica that finds an id busy asks Redis for several cells of its
// bucket in one decision, and admits the id's next requests from them
// locally, without a round trip, until they run out or the lease ends.
//
// Every request it admits was charged in Redis first, so the rate over a
// long run is never more than the limit, across all replicas. What
// changes is when: a cell charged at t may be used until t+TTL, so over
// any window the fleet admits at most burst + rate×TTL, not burst (one
// more request at 50/s with a 20 ms lease). A lease's cells that expire
// unused were charged for nothing; the id then gets that many fewer
// requests in the bucket's next refill (never more). The cost is bounded:
//   - a lease is sized by the id's demand on this replica: it starts at
//     one cell, doubles when the last one was used up before it ended and
//     halves when it ended first, up to Max and a quarter of the burst,
//     so that an id is never leased more than it used in the last lease;
//   - near the limit there is no lease: a refusal sets the size back to
//     one, so an id at its limit is decided in Redis request by request,
//     exactly as without leases;
//   - a limit with a quota is never leased, since a quota's count of
//     requests is what its owner is billed and shown: an unused cell would
//     spend quota that no request used;
//   - one lease of an id is fetched at a time on a replica. Its other
//     requests wait for it (no longer than a call of their own would
//     take) and take its cells, or share its refusal, as the over-limit
//     cache of a Resilient shares one. So a replica never holds cells of
//     an id that Redis has refused it meanwhile.
//
// A refusal always comes from Redis, as without leases. Leases held when
// Redis becomes unreachable are used until they end; the Resilient around
// Leases then decides as its failure mode says.
type Leases struct {
	redis  *Redis
	ttl    time.Duration
	max    int64
	now    func() time.Time
	seed   maphash.Seed
	leased atomic.Uint64
	shards [leaseShards]leaseShard
}

// DefaultLeaseMax is the most cells one lease holds.
const DefaultLeaseMax = 64

const leaseShards = 64

// leaseShard is one lock and its ids' leases. The pad before the lock
// keeps it off the cache line of the shard before it (and of the
// Leases' own fields, leased among them, which every fetch writes).
type leaseShard struct {
	_  cpu.CacheLinePad
	mu sync.Mutex
	m  map[string]*lease
	// sweepAt is the size at which the shard next drops its ended leases:
	// twice what was left after the last sweep, so sweeps cost O(1) a
	// lease taken.
	sweepAt int
}

// lease is one id's cells on this replica.
type lease struct {
	lim  policy.Limit
	d    Decision  // Redis's decision for the cells, Remaining after them all
	at   time.Time // when Redis's answer came
	ends time.Time
	left int64 // cells not used yet
	size int64 // cells the next lease asks for
	// fetching is the lease being fetched, if one is.
	fetching *leaseFetch
}

// leaseFetch is a lease on its way from Redis; done is closed when it has
// come (the lease is in place), was refused (d) or failed (err).
type leaseFetch struct {
	done    chan struct{}
	refused bool
	d       Decision
	err     error
}

// LeaseConfig configures Leases.
type LeaseConfig struct {
	// TTL is how long a lease's cells may be used; it must be positive.
	TTL time.Duration
	// Max bounds the cells of one lease; zero means DefaultLeaseMax.
	Max int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewLeases puts r behind leases as cfg says.
func NewLeases(r *Redis, cfg LeaseConfig) *Leases {
	if cfg.Max <= 0 {
		cfg.Max = DefaultLeaseMax
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Leases{redis: r, ttl: cfg.TTL, max: cfg.Max, now: cfg.Now, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = map[string]*lease{}
		l.shards[i].sweepAt = 64
	}
	return l
}

// Leased is the number of decisions made from leases, without Redis.
func (l *Leases) Leased() uint64 { return l.leased.Load() }

// Allow decides the request of id under lim: from a lease when this
// replica holds one for id under the same limit, else in Redis (asking
// for a new lease when id is busy enough to use one).
func (l *Leases) Allow(ctx context.Context, id string, lim policy.Limit) (Decision, error) {
	if err := check(id, lim); err != nil {
		return Decision{}, err
	}
	if lim.Quota.Enabled() {
		return l.redis.Allow(ctx, id, lim)
	}
	sh := &l.shards[maphash.String(l.seed, id)%leaseShards]
	for {
		now := l.now()
		sh.mu.Lock()
		e := sh.m[id]
		if d, ok := e.take(now, lim); ok {
			sh.mu.Unlock()
			l.leased.Add(1)
			return d, nil
		}
		if e == nil {
			if len(sh.m) >= sh.sweepAt {
				sh.sweep(now)
			}
			e = &lease{size: 1}
			sh.m[id] = e
		}
		f := e.fetching
		if f == nil {
			return l.fetch(ctx, sh, e, id, lim, now)
		}
		// Another request of id is fetching a lease: take a cell of it
		// when it comes, which costs no more wait than a call of one's
		// own, or share its refusal.
		sh.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		}
		switch {
		case f.err != nil:
			// Redis failed it: decide alone, as without leases (the
			// Resilient around counts each failure).
			return l.redis.Allow(ctx, id, lim)
		case f.refused:
			return f.d, nil
		}
		// Its cells went to other requests: take the next lease, or
		// fetch it.
	}
}

// fetch asks Redis for a lease of e's next size for id; sh.mu is held and
// is released. The request that fetches takes the first cell.
func (l *Leases) fetch(ctx context.Context, sh *leaseShard, e *lease, id string, lim policy.Limit, now time.Time) (Decision, error) {
	e.size = e.nextSize(now, lim, min(l.max, max(1, int64(lim.Burst)/4)))
	f := &leaseFetch{done: make(chan struct{})}
	e.fetching, e.left = f, 0
	want := e.size
	sh.mu.Unlock()

	d, n, err := l.redis.eval(ctx, id, lim, want)
	at := l.now()
	sh.mu.Lock()
	switch {
	case err != nil:
		e.size, f.err = 1, err
	case n == 0:
		e.size, f.refused, f.d = 1, true, d
	default:
		e.lim, e.d, e.at, e.ends, e.left = lim, d, at, at.Add(l.ttl), n-1
		d.Remaining = min(d.Remaining+e.left, d.Limit)
		d.Bucket.Remaining = d.Remaining // leases are for limits without a quota
	}
	e.fetching = nil
	close(f.done)
	sh.mu.Unlock()
	return d, err
}

// take uses one of e's cells, if e is a lease under lim that has one left
// and has not ended. Its shard's lock is held.
func (e *lease) take(now time.Time, lim policy.Limit) (Decision, bool) {
	if e == nil || e.left == 0 || e.lim != lim || !now.Before(e.ends) {
		return Decision{}, false
	}
	e.left--
	d := e.d
	d.Remaining = min(d.Remaining+e.left, d.Limit)
	d.Reset = max(0, d.Reset-now.Sub(e.at))
	d.Bucket.Remaining, d.Bucket.Reset = d.Remaining, d.Reset
	return d, true
}

// nextSize is how many cells the next lease asks for, up to most: twice
// the last when it was used up before it ended, half when it ended
// first, one when the limit changed.
func (e *lease) nextSize(now time.Time, lim policy.Limit, most int64) int64 {
	switch {
	case e.at.IsZero() || e.lim != lim:
		return 1
	case now.Before(e.ends):
		return min(2*e.size, most)
	default:
		return min(max(1, e.size/2), most)
	}
}

// sweep drops the shard's ended leases that are not being fetched.
// sh.mu is held.
func (sh *leaseShard) sweep(now time.Time) {
	for id, e := range sh.m {
		if e.fetching == nil && !now.Before(e.ends) {
			delete(sh.m, id)
		}
	}
	sh.sweepAt = max(64, 2*len(sh.m))
}
