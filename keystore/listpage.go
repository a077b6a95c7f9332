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
// time under its read lock: one scan of the entries, keeping the first
// q.Limit in a heap, so that it allocates only the answer (a page of a
// million keys: see README.md, Admin API).
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
	h := &pageHeap{}
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for hash, e := range s.m {
			if q.Consumer != "" && e.consumer != consumer || product != 0 && e.product != product || env != 0 && e.env != env ||
				q.Status != "" && e.stateAt(now) != q.Status {
				continue
			}
			p := Position{int64(e.created), e.id}
			if q.After != nil && p.Compare(*q.After) <= 0 || len(*h) == q.Limit && p.Compare((*h)[0].Position) >= 0 {
				continue
			}
			if len(*h) == q.Limit {
				(*h)[0] = PageEntry{hash, p}
				heap.Fix(h, 0)
			} else {
				heap.Push(h, PageEntry{hash, p})
			}
		}
		s.mu.RUnlock()
	}
	out := []PageEntry(*h)
	slices.SortFunc(out, func(a, b PageEntry) int { return a.Compare(b.Position) })
	return out
}

// stateAt is Record.StateAt of e's record at now (Unix nanoseconds).
func (e *entry) stateAt(now int64) Status {
	r := Record{Status: statuses[e.status]}
	if e.expires != 0 {
		r.ExpiresAt = time.Unix(0, e.expires)
	}
	return r.StateAt(time.Unix(0, now))
}

// pageHeap is a max-heap of entries by list position: its top is the
// last of the page so far, the one a better candidate replaces.
type pageHeap []PageEntry

func (h pageHeap) Len() int           { return len(h) }
func (h pageHeap) Less(i, j int) bool { return h[i].Compare(h[j].Position) > 0 }
func (h pageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pageHeap) Push(x any)        { *h = append(*h, x.(PageEntry)) }
func (h *pageHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
