package ratelimit

import (
	"hash/maphash"
	"sync"

	"golang.org/x/sys/cpu"
)

// concurrencyShards spreads ids over this many locks so that requests of
// different credentials rarely contend.
const concurrencyShards = 64

// Concurrency caps the requests one id (a credential) has in flight at
// once. It counts in process memory, so with several replicas the cap holds
// per replica. An id's entry exists only while it has a request in flight:
// memory grows with the number of credentials active at this moment, not
// with the number ever seen. A nil *Concurrency admits everything. Build
// one with NewConcurrency; it is safe for concurrent use.
type Concurrency struct {
	max    int32
	seed   maphash.Seed
	shards [concurrencyShards]concurrencyShard
}

// concurrencyShard is one lock and its ids. The pad before the lock
// keeps it off the cache line of the shard before it (and of the
// Concurrency's own fields), so that requests of different credentials
// do not contend through a shared line.
type concurrencyShard struct {
	_        cpu.CacheLinePad
	mu       sync.Mutex
	inFlight map[string]int32
}

// NewConcurrency returns a cap of max requests in flight per id, or nil
// (no cap) when max is zero or less.
func NewConcurrency(max int) *Concurrency {
	if max <= 0 {
		return nil
	}
	c := &Concurrency{max: int32(min(max, 1<<30)), seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].inFlight = make(map[string]int32)
	}
	return c
}

// Acquire admits one more request of id if it has fewer than the cap in
// flight, and reports whether it did. Every true must be paired with one
// Release(id).
func (c *Concurrency) Acquire(id string) bool {
	if c == nil {
		return true
	}
	s := c.shard(id)
	s.mu.Lock()
	n := s.inFlight[id]
	ok := n < c.max
	if ok {
		s.inFlight[id] = n + 1
	}
	s.mu.Unlock()
	return ok
}

// Release ends one request of id admitted by Acquire. The id's entry is
// removed when its count reaches zero.
func (c *Concurrency) Release(id string) {
	if c == nil {
		return
	}
	s := c.shard(id)
	s.mu.Lock()
	if n := s.inFlight[id]; n > 1 {
		s.inFlight[id] = n - 1
	} else {
		delete(s.inFlight, id)
	}
	s.mu.Unlock()
}

// InFlight returns the number of requests of id in flight.
func (c *Concurrency) InFlight(id string) int {
	if c == nil {
		return 0
	}
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.inFlight[id])
}

// Len returns the number of ids with a request in flight.
func (c *Concurrency) Len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.inFlight)
		s.mu.Unlock()
	}
	return n
}

func (c *Concurrency) shard(id string) *concurrencyShard {
	return &c.shards[maphash.String(c.seed, id)%concurrencyShards]
}
