package keystore

// The in-memory index both stores serve lookups from: a sharded map of
// compact records. See index for the memory budget.

import (
	"iter"
	"math/bits"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/keygate/keygate/policy"
)

// indexShards is the number of shards of an index. A shard is picked by
// the first byte of the key hash, which is uniform (SHA-256).
const indexShards = 256

// index maps key hashes to compact records. Lookups take one shard's read
// lock and allocate nothing; a change takes one shard's write lock and
// costs O(1) whatever the number of keys. The zero value is not usable;
// use newIndex. It is safe for concurrent use.
//
// Memory per key (measured by BenchmarkIndexLoad and bench/keyload; see
// docs/explanation/memory-sizing.md): the 32-byte hash and a pointer in the map's slot (plus the
// map's control bytes and spare capacity: a slot is 40 bytes, and a map
// is half to 7/8 full), the immutable 80-byte entry, and the id string
// (24 bytes) and name. An entry is replaced whole on a change. Contexts, consumer ids and plan names are
// interned: keys that share one share its bytes. RevokedAt and
// ReplacedBy are read only by the admin side, which reads them from the
// store, so the index does not hold them. CreatedAt it holds to the
// second, in the entry's padding, for the admin side's pages (page).
type index struct {
	shards [indexShards]indexShard
	strs   *strtab
	// where tells, by consumer, which shards may hold its entries: a
	// consumer's change scans those alone.
	where    shardSets
	reserved int // see reserve
}

type indexShard struct {
	mu sync.RWMutex
	m  map[Hash]*entry
	// Every lookup's RLock writes mu: a shard's mu and the next shard's
	// are a pad apart, so lookups on neighbouring shards do not share a
	// cache line.
	_ cpu.CacheLinePad
}

// entry is the compact form of a Record: what the request path reads.
// Contexts, consumer ids and plan names, which many keys share, are
// numbers in the index's string table.
type entry struct {
	id, name string
	// expires is ExpiresAt in Unix nanoseconds; 0 means never. (An
	// unknown status is 0 too, which Record.StateAt counts as revoked.)
	expires int64
	// extra holds what few keys have (an override, permissions, address
	// rules); nil for a key with none, so the entry stays 80 bytes.
	extra                   *entryExtra
	limits                  *policy.Effective
	context, consumer, plan uint32
	// created is CreatedAt in whole Unix seconds (createdSeconds), the
	// key list's order; it fills what was padding.
	created uint32
	// gen is the full pass that last saw the entry (see RedisStore and
	// fileReload). A file reload marks an unchanged entry as seen by
	// storing to it while lookups read the entry's other fields.
	gen     atomic.Uint32
	product uint8
	env     uint8
	status  uint8
}

// entryExtra is the part of a Record that most keys leave empty. It is
// immutable once made.
type entryExtra struct {
	override     *policy.Override
	permissions  []string
	allowedCIDRs []string
	// leak is set on a key found in public: a quarantined key's
	// responses carry a warning.
	leak *Leak
}

// The small enums of entry.
var (
	products = [...]Product{"", Extraction, Registry}
	envs     = [...]Env{"", Live, Test}
	statuses = [...]Status{"", Active, Revoked, Rotated, Expired}
)

func enumOf[T comparable](all []T, v T) uint8 {
	for i, x := range all {
		if x == v {
			return uint8(i)
		}
	}
	return 0
}

func newIndex() *index {
	x := &index{strs: newStrtab()}
	for i := range x.shards {
		x.shards[i].m = make(map[Hash]*entry)
	}
	return x
}

// reserve sizes the shards that are still empty for total records in
// all, so that a first load does not grow (and copy) each map
// step by step.
func (x *index) reserve(total int) {
	x.reserved = total
	per := total/indexShards + total/(8*indexShards) + 1
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		if len(s.m) == 0 {
			s.m = make(map[Hash]*entry, per)
		}
		s.mu.Unlock()
	}
}

// cap is about how many records x was reserved for.
func (x *index) cap() int { return x.reserved }

func (x *index) shard(h Hash) *indexShard { return &x.shards[h[0]] }

// compact turns r into an entry, interning its repeated strings.
func (x *index) compact(r Record, gen uint32) *entry {
	e := &entry{
		id:       r.ID,
		name:     r.Name,
		context:  x.strs.number(r.Context),
		consumer: x.strs.number(r.Consumer),
		plan:     x.strs.number(r.Plan),
		created:  createdSeconds(r.CreatedAt),
		limits:   r.Limits,
		product:  enumOf(products[:], r.Product),
		env:      enumOf(envs[:], r.Env),
		status:   enumOf(statuses[:], r.Status),
	}
	if r.Name != "" {
		// One allocation for both, so that the collector marks one
		// object per key for them, not two.
		both := r.ID + r.Name
		e.id, e.name = both[:len(r.ID)], both[len(r.ID):]
	}
	e.gen.Store(gen)
	x.where.add(e.consumer, r.Hash[0])
	if r.Override != nil || len(r.Permissions) > 0 || len(r.AllowedCIDRs) > 0 || r.Leak != nil {
		e.extra = &entryExtra{override: r.Override, permissions: r.Permissions, allowedCIDRs: r.AllowedCIDRs, leak: r.Leak}
	}
	if !r.ExpiresAt.IsZero() {
		e.expires = r.ExpiresAt.UnixNano()
	}
	return e
}

// record expands e; it allocates nothing.
func (x *index) record(h Hash, e *entry) Record {
	strs := x.strs.load()
	var r Record
	r.ID, r.Name, r.Hash = e.id, e.name, h
	r.Product, r.Env, r.Status = products[e.product], envs[e.env], statuses[e.status]
	r.Context, r.Consumer, r.Plan = strs[e.context], strs[e.consumer], strs[e.plan]
	r.Limits = e.limits
	if e.extra != nil {
		r.Override, r.Permissions, r.AllowedCIDRs, r.Leak = e.extra.override, e.extra.permissions, e.extra.allowedCIDRs, e.extra.leak
	}
	if e.expires != 0 {
		r.ExpiresAt = time.Unix(0, e.expires).UTC()
	}
	return r
}

// get returns the record of h. The record carries what the request path
// reads: CreatedAt, RevokedAt and ReplacedBy are left zero. It allocates
// nothing.
func (x *index) get(h Hash) (Record, bool) {
	s := x.shard(h)
	s.mu.RLock()
	e, ok := s.m[h]
	s.mu.RUnlock()
	if !ok {
		return Record{}, false
	}
	return x.record(h, e), true
}

// put stores r under its hash, marked as seen by pass gen, and returns
// the entry it stored.
func (x *index) put(r Record, gen uint32) *entry {
	e := x.compact(r, gen)
	s := x.shard(r.Hash)
	s.mu.Lock()
	s.m[r.Hash] = e
	s.mu.Unlock()
	return e
}

// del removes h.
func (x *index) del(h Hash) {
	s := x.shard(h)
	s.mu.Lock()
	delete(s.m, h)
	s.mu.Unlock()
}

// sweep removes every entry that pass gen did not see, and returns how
// many it removed. It holds one shard's lock at a time.
func (x *index) sweep(gen uint32) int {
	n := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		for h, e := range s.m {
			if e.gen.Load() != gen {
				delete(s.m, h)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// stale is how many entries pass gen did not see: what sweep(gen) would
// remove.
func (x *index) stale(gen uint32) int {
	n := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for _, e := range s.m {
			if e.gen.Load() != gen {
				n++
			}
		}
		s.mu.RUnlock()
	}
	return n
}

// each calls f with every entry, holding one shard's read lock at a time.
func (x *index) each(f func(h Hash, e *entry)) {
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for h, e := range s.m {
			f(h, e)
		}
		s.mu.RUnlock()
	}
}

// len is the number of records.
func (x *index) len() int {
	n := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// resolveUnpublished sets every entry's limits to f of its record, in
// place. Only for an index no lookup can reach yet (a first load).
func (x *index) resolveUnpublished(f func(Record) *policy.Effective) {
	for i := range x.shards {
		for h, e := range x.shards[i].m {
			e.limits = f(x.record(h, e))
		}
	}
}

// entry returns the entry of h.
func (x *index) entry(h Hash) (*entry, bool) {
	s := x.shard(h)
	s.mu.RLock()
	e, ok := s.m[h]
	s.mu.RUnlock()
	return e, ok
}

// same reports whether e is what compact would make of r, leaving
// aside gen and limits (which a store resolves after reading records).
func (x *index) same(e *entry, r Record) bool {
	strs := x.strs.load()
	expires := int64(0)
	if !r.ExpiresAt.IsZero() {
		expires = r.ExpiresAt.UnixNano()
	}
	if e.id != r.ID || e.name != r.Name || e.expires != expires || e.created != createdSeconds(r.CreatedAt) ||
		e.product != enumOf(products[:], r.Product) || e.env != enumOf(envs[:], r.Env) || e.status != enumOf(statuses[:], r.Status) ||
		strs[e.context] != r.Context || strs[e.consumer] != r.Consumer || strs[e.plan] != r.Plan {
		return false
	}
	extra := r.Override != nil || len(r.Permissions) > 0 || len(r.AllowedCIDRs) > 0
	if e.extra == nil || !extra {
		return e.extra == nil && !extra
	}
	return reflect.DeepEqual(e.extra.override, r.Override) &&
		slices.Equal(e.extra.permissions, r.Permissions) && slices.Equal(e.extra.allowedCIDRs, r.AllowedCIDRs)
}

// update applies f to every entry whose consumer is id (a consumer
// changed), one shard at a time, in the shards that may hold one.
func (x *index) update(consumer string, f func(Record) Record) {
	n, ok := x.strs.lookup(consumer)
	if !ok || consumer == "" {
		return // no key names it
	}
	for i := range x.where.shards(n) {
		s := &x.shards[i]
		s.mu.Lock()
		for h, e := range s.m {
			if e.consumer == n {
				s.m[h] = x.compact(f(x.record(h, e)), e.gen.Load())
			}
		}
		s.mu.Unlock()
	}
}

// consumerHashes returns the hash of every entry of consumer (revoked and
// expired ones too), one shard at a time under its read lock: a scan of
// the shards that may hold one, which holds no shard's lock for long and
// allocates only the answer.
func (x *index) consumerHashes(consumer string) []Hash {
	n, ok := x.strs.lookup(consumer)
	if !ok || consumer == "" {
		return nil // no key names it
	}
	var out []Hash
	for i := range x.where.shards(n) {
		s := &x.shards[i]
		s.mu.RLock()
		for h, e := range s.m {
			if e.consumer == n {
				out = append(out, h)
			}
		}
		s.mu.RUnlock()
	}
	return out
}

// shardSets tells, for each number of the string table, which groups of
// an index's shards may hold an entry whose consumer it is: bit g of its
// mask for shards 4g to 4g+3. compact sets the bit of the entry it
// makes, before the entry is stored; nothing clears one. So the shards
// a mask names are a superset of those holding the consumer's entries,
// and a scan for them visits those alone: for a consumer of one key, 4
// shards of 256. 8 bytes a string, in chunks (chunkDir), read and set
// with atomics.
type shardSets struct {
	chunks chunkDir[[shardSetChunk]atomic.Uint64]
}

const shardSetChunk = 1024

// add marks shard as one that may hold an entry of consumer n.
func (m *shardSets) add(n uint32, shard byte) {
	if n == 0 {
		return
	}
	bit := uint64(1) << (shard / 4)
	if c := &m.chunks.at(int(n/shardSetChunk), true)[n%shardSetChunk]; c.Load()&bit == 0 {
		c.Or(bit)
	}
}

// shards yields the shards that may hold an entry of consumer n, in
// order.
func (m *shardSets) shards(n uint32) iter.Seq[int] {
	return func(yield func(int) bool) {
		c := m.chunks.at(int(n/shardSetChunk), false)
		if c == nil {
			return
		}
		mask := c[n%shardSetChunk].Load()
		for mask != 0 {
			g := bits.TrailingZeros64(mask)
			mask &^= 1 << g
			for sh := 4 * g; sh < 4*g+4; sh++ {
				if !yield(sh) {
					return
				}
			}
		}
	}
}

// allShards yields every shard of an index.
func allShards(yield func(int) bool) {
	for i := range indexShards {
		if !yield(i) {
			return
		}
	}
}

// strtab numbers strings, so that an entry holds a 4-byte number for a
// string many keys share. Number 0 is "". Reads are lock-free (an
// append-only slice behind an atomic pointer); it only grows, by the
// distinct strings ever numbered, far fewer than keys.
type strtab struct {
	mu  sync.RWMutex
	ids map[string]uint32
	tab atomic.Pointer[[]string]
}

func newStrtab() *strtab {
	t := &strtab{ids: map[string]uint32{"": 0}}
	tab := make([]string, 1, 64)
	t.tab.Store(&tab)
	return t
}

// load returns the table: index it with an entry's numbers.
func (t *strtab) load() []string { return *t.tab.Load() }

// lookup returns the number of s, if it has one.
func (t *strtab) lookup(s string) (uint32, bool) {
	t.mu.RLock()
	n, ok := t.ids[s]
	t.mu.RUnlock()
	return n, ok
}

// number returns the number of s, giving it one if it has none.
func (t *strtab) number(s string) uint32 {
	if s == "" {
		return 0
	}
	if n, ok := t.lookup(s); ok {
		return n
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.ids[s]; ok {
		return n
	}
	tab := *t.tab.Load()
	n := uint32(len(tab))
	// Readers hold slices no longer than before: appending in place
	// writes past their end.
	tab = append(tab, s)
	t.tab.Store(&tab)
	t.ids[s] = n
	return n
}
