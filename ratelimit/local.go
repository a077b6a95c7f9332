package ratelimit

import (
	"github.com/keygate/keygate/policy"

	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
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
// forget its least recently used id. A shard keeps its ids' state in
// chunks of slots linked by index, with no pointer among them for the
// collector to follow. The zero value is not usable: build one with
// NewLocal. It is safe for concurrent use.
type Local struct {
	now    func() time.Time
	seeds  [2]maphash.Seed
	shards []localShard
	max    int64
	count  atomic.Int64 // ids kept, over all shards
}

// localShards is the number of shards of a Local; one shard below
// localShardMin ids, so that a small MaxKeys is kept exactly.
const (
	localShards   = 64
	localShardMin = 64 * 1024
)

// localShard is one lock and its ids' state. The pad before the lock
// keeps it off the cache line of the shard before it, so that decisions
// for ids of different shards do not contend through a shared line.
type localShard struct {
	_  cpu.CacheLinePad
	mu sync.Mutex
	// ids maps an id's hash to its slot. Neither holds a pointer, so the
	// collector has nothing to follow in them: with 100k ids an LRU of
	// list elements, entries and limiters was 3 objects per id
	// for it to mark on every cycle (see BenchmarkLocalHeap).
	ids   map[localID]int32
	slots localSlots
	// head and tail are the most and least recently used slots, free
	// the first unused one (a list through next); -1 for none.
	head, tail, free int32
	size, max        int32
}

// localID is an id's 128-bit hash under two random seeds. Two ids that
// share one (about one chance in 2^128 for each pair) would share a
// bucket; keeping the id itself would give the collector a pointer per
// id to follow.
type localID struct{ a, b uint64 }

// localSlot is the state of one id: its place in the shard's recency
// list, its bucket and its quota window.
type localSlot struct {
	id         localID
	prev, next int32
	used       bool // the bucket was set up for lim (see Allow)
	lim        policy.Limit
	bucket     rate.Limiter
	qStart     time.Time // start of the current quota window; zero when none
	qUsed      int64
}

// localChunk is how many slots are allocated at a time: a shard grows
// with the ids it sees, one object per localChunk of them.
const localChunk = 256

// localSlots are a shard's slots, in chunks that never move, so that a
// slot (and the mutex inside its rate.Limiter) is never copied.
type localSlots [][]localSlot

func (c localSlots) at(i int32) *localSlot {
	return &c[uint32(i)/localChunk][uint32(i)%localChunk]
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
	l := &Local{now: cfg.Now, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, shards: make([]localShard, n), max: int64(cfg.MaxKeys)}
	per := cfg.MaxKeys
	if n > 1 {
		per = cfg.MaxKeys/n + cfg.MaxKeys/(4*n)
	}
	for i := range l.shards {
		s := &l.shards[i]
		s.ids = map[localID]int32{}
		s.head, s.tail, s.free, s.max = -1, -1, -1, int32(per)
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
		n += int(s.size)
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
	k := localID{maphash.String(l.seeds[0], id), maphash.String(l.seeds[1], id)}
	s := &l.shards[k.a&uint64(len(l.shards)-1)] // 1 or localShards
	s.mu.Lock()
	defer s.mu.Unlock()
	e := l.entry(s, k)
	now := l.now()

	if !e.used || e.lim.Rate != lim.Rate || e.lim.Per != lim.Per || e.lim.Burst != lim.Burst {
		// A full bucket, as rate.NewLimiter makes: one last filled at
		// the zero time holds its burst at the next look.
		e.bucket.SetLimitAt(time.Time{}, perSecond(lim))
		e.bucket.SetBurstAt(time.Time{}, lim.Burst)
		e.used = true
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

	bucket := Window{Known: true, Remaining: max(int64(math.Floor(tokens+1e-9)), 0), Reset: fill(tokens)}
	var quota Window
	if lim.Quota.Enabled() {
		quota = Window{Known: true, Remaining: max(lim.Quota.Requests-qUsed, 0), Reset: qReset}
	}
	if lim.Quota.Enabled() && qUsed >= lim.Quota.Requests {
		return Decision{Reason: ReasonQuota, Limit: lim.Quota.Requests, RetryAfter: qReset, Reset: qReset, Bucket: bucket, Quota: quota}, nil
	}
	if tokens < 1 {
		return Decision{
			Reason:     ReasonRate,
			Limit:      int64(lim.Burst),
			RetryAfter: durationCeil((1 - tokens) / ratePerSec),
			Reset:      fill(tokens),
			Bucket:     bucket,
			Quota:      quota,
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

// entry returns the slot of k in its shard s, most recently used now,
// taking a fresh one when k has none: the shard's least recently used
// id is forgotten first when the shard or the Local is full. The shard's
// lock is held.
func (l *Local) entry(s *localShard, k localID) *localSlot {
	if i, ok := s.ids[k]; ok {
		if i != s.head {
			s.unlink(i)
			s.pushFront(i)
		}
		return s.slots.at(i)
	}
	if s.size > 0 && (s.size >= s.max || l.count.Load() >= l.max) {
		s.forget(s.tail)
		l.count.Add(-1)
	}
	i := s.free
	if i >= 0 {
		s.free = s.slots.at(i).next
	} else {
		n := int32(len(s.slots)) * localChunk
		s.slots = append(s.slots, make([]localSlot, localChunk))
		for j := n + localChunk - 1; j > n; j-- { // the rest of the chunk is free
			s.slots.at(j).next, s.free = s.free, j
		}
		i = n
	}
	e := s.slots.at(i)
	e.id, e.used, e.lim, e.qStart, e.qUsed = k, false, policy.Limit{}, time.Time{}, 0
	s.ids[k] = i
	s.size++
	l.count.Add(1)
	s.pushFront(i)
	return e
}

// forget frees slot i, which holds an id.
func (s *localShard) forget(i int32) {
	e := s.slots.at(i)
	s.unlink(i)
	delete(s.ids, e.id)
	e.next, s.free = s.free, i
	s.size--
}

func (s *localShard) unlink(i int32) {
	e := s.slots.at(i)
	if e.prev >= 0 {
		s.slots.at(e.prev).next = e.next
	} else {
		s.head = e.next
	}
	if e.next >= 0 {
		s.slots.at(e.next).prev = e.prev
	} else {
		s.tail = e.prev
	}
}

func (s *localShard) pushFront(i int32) {
	e := s.slots.at(i)
	e.prev, e.next = -1, s.head
	if s.head >= 0 {
		s.slots.at(s.head).prev = i
	} else {
		s.tail = i
	}
	s.head = i
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
