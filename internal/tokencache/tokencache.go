// Package tokencache remembers what checking a bearer token found, so that
// a client that sends the same token on every request pays for its
// signature check once, not on every request.
//
// An entry is keyed by the SHA-256 of the token: the token itself is never
// held. It stays valid until a deadline the caller gives (at most the
// token's expiry: a hit must never accept a token the full check would
// refuse), and the cache holds a bounded number of entries, the least
// recently used going first. Only accepted tokens belong in it: a refusal
// is checked again every time, so that a stream of garbage cannot evict
// the tokens in use. What may change after a token was checked (its
// signing key withdrawn, its key revoked) is for the caller to check on
// every hit.
package tokencache

import (
	"crypto/sha256"
	"sync/atomic"
	"time"
	"unsafe"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Key is what a token is cached under: its SHA-256.
type Key [sha256.Size]byte

// KeyOf returns raw's cache key. It hashes raw's bytes in place (Sum256
// only reads them): a copy would be an allocation on every request.
func KeyOf(raw string) Key { return sha256.Sum256(unsafe.Slice(unsafe.StringData(raw), len(raw))) }

type entry[V any] struct {
	v     V
	until time.Time
}

// Cache maps a token's Key to what its check found, until a deadline. It
// is safe for concurrent use.
type Cache[V any] struct {
	lru *lru.Cache[Key, entry[V]]
	// Counted by the caller: a token's use answered from the cache, and
	// a full check of a token (a first use, a refusal, or a use after
	// what the cache held no longer applied).
	answered, checked atomic.Uint64
}

// Stats is what a Cache did, for metrics.
type Stats struct {
	// Answered counts token uses answered from the cache; Checked, the
	// tokens checked in full.
	Answered, Checked uint64
	// Entries is how many tokens the cache holds now.
	Entries int
}

// Answered counts a token use answered from the cache.
func (c *Cache[V]) Answered() { c.answered.Add(1) }

// Checked counts a token checked in full.
func (c *Cache[V]) Checked() { c.checked.Add(1) }

// Stats returns the counts so far and the entries held.
func (c *Cache[V]) Stats() Stats {
	return Stats{Answered: c.answered.Load(), Checked: c.checked.Load(), Entries: c.lru.Len()}
}

// New returns a Cache of at most size entries (size ≥ 1).
func New[V any](size int) *Cache[V] {
	c, err := lru.New[Key, entry[V]](size)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &Cache[V]{lru: c}
}

// Get returns what was cached under k, if its deadline is after now. An
// entry past its deadline is dropped.
func (c *Cache[V]) Get(k Key, now time.Time) (V, bool) {
	e, ok := c.lru.Get(k)
	if !ok {
		var zero V
		return zero, false
	}
	if !now.Before(e.until) {
		c.lru.Remove(k)
		var zero V
		return zero, false
	}
	return e.v, true
}

// Add caches v under k until the deadline until.
func (c *Cache[V]) Add(k Key, v V, until time.Time) {
	c.lru.Add(k, entry[V]{v: v, until: until})
}

// Remove forgets k: what it holds no longer applies (the key that
// verified its token is gone or changed), and the token is checked again.
func (c *Cache[V]) Remove(k Key) { c.lru.Remove(k) }
