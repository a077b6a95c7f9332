package usage

import (
	"hash/maphash"
	"sync"
	"time"
)

// lastUses remembers, per key, the last uses this replica wrote to the
// sorted sets, so that a flush writes a key's last use only once it moved
// by the step or more. With many keys each used now and then, the sorted
// sets' ZADD GT was the largest single cost a request left in redis-server
// (about 10 of 40 µs a request at 100k keys, bench/peers -keys): a
// skiplist update per member. Stepping it by a minute drops most of them,
// and a last use is then at most a step older than the true one.
//
// Entries live for two steps at most (two generations, swapped every
// step), so the table holds the keys used in the last two steps; each
// generation holds at most max entries, and a key past that is written at
// every flush as before. The table holds no pointers: a key is its id's
// 128-bit hash under two random seeds (two ids that share one would share
// an entry, about one chance in 2^128 per pair, and the cost of that is a
// last use written up to a step late).
type lastUses struct {
	step, max int64 // step in ms

	mu        sync.Mutex
	seeds     [2]maphash.Seed
	cur, prev map[lastUseID]lastUse
	rotatedAt int64 // unix ms the current generation started
}

type lastUseID [2]uint64

// lastUse is the last uses written for one key, in unix ms: to usage:last
// and to usage:last_api_key (0: none written).
type lastUse struct{ any, apiKey int64 }

// newLastUses steps last uses by step (<= 0: every flush writes them)
// and remembers at most max keys a generation (<= 0: no bound).
func newLastUses(step time.Duration, max int) *lastUses {
	return &lastUses{
		step:  step.Milliseconds(),
		max:   int64(max),
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		cur:   map[lastUseID]lastUse{},
		prev:  map[lastUseID]lastUse{},
	}
}

func (l *lastUses) id(key string) lastUseID {
	return lastUseID{maphash.String(l.seeds[0], key), maphash.String(l.seeds[1], key)}
}

// lastUseDue is, for each delta of a batch, whether its last use (any)
// and its last use by API key must be written, and its id in the table.
type lastUseDue struct {
	any, apiKey []bool
	ids         []lastUseID // nil without a step
}

// due says, for each delta, whether its last use and its last use by API
// key must be written: they are set and moved by the step or more since
// this replica last wrote them. With no step every set one is due.
func (l *lastUses) due(ds []Delta) lastUseDue {
	d := lastUseDue{any: make([]bool, len(ds)), apiKey: make([]bool, len(ds))}
	if l.step <= 0 {
		for i := range ds {
			d.any[i], d.apiKey[i] = !ds[i].LastUsed.IsZero(), !ds[i].LastAPIKey.IsZero()
		}
		return d
	}
	d.ids = make([]lastUseID, len(ds))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range ds {
		d.ids[i] = l.id(ds[i].ID)
		w := l.lookup(d.ids[i])
		d.any[i] = l.moved(ds[i].LastUsed, w.any)
		d.apiKey[i] = l.moved(ds[i].LastAPIKey, w.apiKey)
	}
	return d
}

func (l *lastUses) moved(t time.Time, written int64) bool {
	return !t.IsZero() && (written == 0 || t.UnixMilli()-written >= l.step)
}

func (l *lastUses) lookup(id lastUseID) lastUse {
	if w, ok := l.cur[id]; ok {
		return w
	}
	return l.prev[id]
}

// wrote records the last uses of ds that were due and are now in Redis;
// now swaps the generations once a step has passed.
func (l *lastUses) wrote(ds []Delta, d lastUseDue, now time.Time) {
	if l.step <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := now.UnixMilli()
	if ms-l.rotatedAt >= l.step {
		// An entry is found for at least one step after it is written:
		// in cur until the next swap, then in prev until the one after.
		l.prev, l.cur, l.rotatedAt = l.cur, make(map[lastUseID]lastUse, len(l.cur)), ms
	}
	for i := range ds {
		if !d.any[i] && !d.apiKey[i] {
			continue
		}
		id := d.ids[i]
		w, inCur := l.cur[id]
		if !inCur {
			if l.max > 0 && int64(len(l.cur)) >= l.max {
				continue // full: this key is written at every flush until the swap
			}
			w = l.prev[id]
		}
		if d.any[i] {
			w.any = ds[i].LastUsed.UnixMilli()
		}
		if d.apiKey[i] {
			w.apiKey = ds[i].LastAPIKey.UnixMilli()
		}
		l.cur[id] = w
	}
}
