package keystore

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"time"
)

// Position is a place in the key list's order: keys are listed by
// creation time in whole Unix seconds, then by id. A list page ends at
// one, and the next page starts after it, so a key deleted or added
// meanwhile shifts no other key between pages.
type Position struct {
	Created int64
	ID      string
}

// PositionOf is r's place in the key list's order.
func PositionOf(r Record) Position {
	return Position{int64(createdSeconds(r.CreatedAt)), r.ID}
}

// ConsumerPosition is c's place in the consumer list's order: by
// creation time in whole Unix seconds, then by id.
func ConsumerPosition(c *Consumer) Position {
	return Position{c.CreatedAt.Unix(), c.ID}
}

// Compare orders p before q by creation second, then by id.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.Created, q.Created); c != 0 {
		return c
	}
	return cmp.Compare(p.ID, q.ID)
}

// createdSeconds is t in whole Unix seconds, held to what a uint32 holds:
// a key made before 1970 (a zero CreatedAt, say) lists as made at 0.
func createdSeconds(t time.Time) uint32 {
	return uint32(min(max(t.Unix(), 0), math.MaxUint32))
}

// PageQuery asks for one page of the key list: the keys that match every
// field set, after After (from the start when nil), at most Limit of
// them.
type PageQuery struct {
	Consumer string
	Product  Product
	Env      Env
	// Status matches Record.StateAt(Now).
	Status Status
	Now    time.Time
	After  *Position
	Limit  int
}

// PageEntry is a key of a page: its hash and its place in the list.
type PageEntry struct {
	Hash Hash
	Position
}

// KeysPage returns a page of the key list from the store's index, in list
// order, as current as the change log it follows, without reading the
// key set from Redis: the admin side then reads those records alone. ok
// is false before the first full pass has completed, when the index may
// lack some keys: the caller then reads the store itself.
func (s *RedisStore) KeysPage(q PageQuery) (page []PageEntry, ok bool) {
	if !s.loaded.Load() {
		return nil, false
	}
	return s.idx.page(q), true
}

// page returns the entries that match q, in list order, one shard at a
// time under its read lock (of a consumer's, only the shards that may
// hold one): one scan of the entries, keeping the first
// q.Limit in a heap, so that it allocates only the answer (a page of a
// million keys: see docs/guides/admin-api.md, "Admin API").
func (x *index) page(q PageQuery) []PageEntry {
	if q.Limit <= 0 {
		return nil
	}
	consumer, ok := x.strs.lookup(q.Consumer)
	product, env := enumOf(products[:], q.Product), enumOf(envs[:], q.Env)
	if q.Consumer != "" && !ok || q.Product != "" && product == 0 || q.Env != "" && env == 0 {
		return nil // no key has it
	}
	now := q.Now.UnixNano()
	first := firstN[Hash]{n: q.Limit}
	shards := allShards
	if q.Consumer != "" {
		shards = x.where.shards(consumer)
	}
	for i := range shards {
		s := &x.shards[i]
		s.mu.RLock()
		for hash, e := range s.m {
			if q.Consumer != "" && e.consumer != consumer || product != 0 && e.product != product || env != 0 && e.env != env ||
				q.Status != "" && e.stateAt(now) != q.Status {
				continue
			}
			p := Position{int64(e.created), e.id}
			if (q.After == nil || p.Compare(*q.After) > 0) && first.admits(p) {
				first.offer(p, hash)
			}
		}
		s.mu.RUnlock()
	}
	kept := first.sorted()
	out := make([]PageEntry, len(kept))
	for i, k := range kept {
		out[i] = PageEntry{k.v, k.pos}
	}
	return out
}

// ConsumersPage returns a page of the consumer list from the store's copy
// of the consumers, as current as the change log it follows, without
// reading the consumers from Redis: the places of at most limit
// consumers after after (from the first when nil), in list order
// (creation second, then id). The admin side then reads those consumers
// alone. ok is false before the first full pass has completed: the
// caller then reads the store itself.
func (s *RedisStore) ConsumersPage(after *Position, limit int) (page []Position, ok bool) {
	if !s.loaded.Load() {
		return nil, false
	}
	first := firstN[struct{}]{n: limit}
	s.cons.each(func(c *Consumer) {
		p := ConsumerPosition(c)
		if (after == nil || p.Compare(*after) > 0) && first.admits(p) {
			first.offer(p, struct{}{})
		}
	})
	for _, k := range first.sorted() {
		page = append(page, k.pos)
	}
	return page, true
}

// ConsumersWhere returns the ids of the consumers of the store's copy
// that match accepts, as current as the change log it follows, without
// reading the consumers from Redis. match sees what the copy holds of a
// consumer: its id, creation time, plan, override, permissions, address
// rules and metadata. ok is false before the first full pass has
// completed: the caller then reads the store itself.
func (s *RedisStore) ConsumersWhere(match func(*Consumer) bool) (ids []string, ok bool) {
	if !s.loaded.Load() {
		return nil, false
	}
	s.cons.each(func(c *Consumer) {
		if match(c) {
			ids = append(ids, c.ID)
		}
	})
	return ids, true
}

// firstN keeps the first n items offered, by their place in a list, in a
// max-heap whose top is the last of them so far, the one a better
// candidate replaces: one pass over a set keeps a page of it and
// allocates only the page.
type firstN[T any] struct {
	n     int
	items []ranked[T]
}

// ranked is an item and its place in the list.
type ranked[T any] struct {
	pos Position
	v   T
}

// admits reports whether an item at p would be kept: one comparison,
// made before the caller builds the item.
func (f *firstN[T]) admits(p Position) bool {
	return len(f.items) < f.n || f.n > 0 && p.Compare(f.items[0].pos) < 0
}

// offer keeps v, at p, if it is among the first n offered so far.
func (f *firstN[T]) offer(p Position, v T) {
	switch {
	case len(f.items) < f.n:
		heap.Push(f, ranked[T]{p, v})
	case f.admits(p):
		f.items[0] = ranked[T]{p, v}
		heap.Fix(f, 0)
	}
}

// sorted returns the items kept, in list order.
func (f *firstN[T]) sorted() []ranked[T] {
	slices.SortFunc(f.items, func(a, b ranked[T]) int { return a.pos.Compare(b.pos) })
	return f.items
}

func (f *firstN[T]) Len() int           { return len(f.items) }
func (f *firstN[T]) Less(i, j int) bool { return f.items[i].pos.Compare(f.items[j].pos) > 0 }
func (f *firstN[T]) Swap(i, j int)      { f.items[i], f.items[j] = f.items[j], f.items[i] }
func (f *firstN[T]) Push(x any)         { f.items = append(f.items, x.(ranked[T])) }
func (f *firstN[T]) Pop() any {
	x := f.items[len(f.items)-1]
	f.items = f.items[:len(f.items)-1]
	return x
}

// stateAt is Record.StateAt of e's record at now (Unix nanoseconds).
func (e *entry) stateAt(now int64) Status {
	r := Record{Status: statuses[e.status]}
	if e.expires != 0 {
		r.ExpiresAt = time.Unix(0, e.expires)
	}
	return r.StateAt(time.Unix(0, now))
}
