package keystore

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// negCache remembers key hashes that Redis did not hold, each until its
// expiry: a bounded LRU whose entries carry their expiry time, checked
// on read. An expired entry stays until it is written again or evicted;
// nothing sweeps it, so the cache runs no goroutine and needs no Close
// (golang-lru's expirable LRU sweeps with a goroutine that never ends).
// It is safe for concurrent use.
type negCache struct {
	c   *lru.Cache[Hash, time.Time]
	ttl time.Duration
	now func() time.Time
}

// newNegCache holds up to size hashes, each for ttl after it was added.
func newNegCache(size int, ttl time.Duration, now func() time.Time) *negCache {
	c, err := lru.New[Hash, time.Time](size)
	if err != nil {
		panic(err) // size is a positive constant
	}
	if now == nil {
		now = time.Now
	}
	return &negCache{c: c, ttl: ttl, now: now}
}

// Contains reports whether h was added less than ttl ago (and not removed
// since). It does not make h recently used: a flood of made-up keys
// evicts the oldest misses first, as it adds them.
func (n *negCache) Contains(h Hash) bool {
	exp, ok := n.c.Peek(h)
	return ok && n.now().Before(exp)
}

// Add remembers h as unknown for ttl from now.
func (n *negCache) Add(h Hash) { n.c.Add(h, n.now().Add(n.ttl)) }

// Remove forgets h (a change message named it).
func (n *negCache) Remove(h Hash) { n.c.Remove(h) }

// Purge forgets every hash (a full pass read every record).
func (n *negCache) Purge() { n.c.Purge() }

// negCacheSize bounds the unknown hashes a RedisStore remembers: a flood
// of more made-up keys than this within NegativeTTL costs Redis a lookup
// for some of them again, and memory stays bounded.
const negCacheSize = 10_000
