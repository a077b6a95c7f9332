// Package usage counts each key's requests (admitted, refused by reason),
// bytes in and last use on every replica, and flushes the counts in
// batches to a Store: per-key hourly Redis hashes kept 7 days, or a local
// JSON file next to the file keystore. Nothing here is on the request path
// but Counters.Record, which allocates nothing for a key already tracked.
//
// A crash loses at most the counts of one flush interval (default 1s), or
// with the file store one paced rewrite's spacing (see FileStore).
package usage

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
)

// Outcome is how a request of a known key ended.
type Outcome uint8

// The outcomes counted.
const (
	Admitted Outcome = iota
	RefusedRate
	RefusedQuota
	RefusedContext
	RefusedProduct
	RefusedConcurrency
	// ForbiddenOperation, ForbiddenPlan and ForbiddenAddress are the 403
	// Forbidden refusals by reason: the key's (or its consumer's)
	// permissions, the plan's features, allowed_cidrs.
	ForbiddenOperation
	ForbiddenPlan
	ForbiddenAddress
	numOutcomes
)

// fields are the hash fields (and JSON names) of the outcomes, then bytes.
var fields = [numOutcomes]string{"admitted", "rate", "quota", "context", "product", "concurrency",
	"forbidden_operation", "forbidden_plan", "forbidden_address"}

const fieldBytesIn = "bytes_in"

// Method is how a counted request authenticated: with the API key itself,
// or with a bearer token (keygate's own for the key, or an external
// issuer's).
type Method uint8

// The methods counted.
const (
	ByAPIKey Method = iota
	ByToken
	numMethods
)

type entry struct {
	n       [numOutcomes]atomic.Int64
	bytes   atomic.Int64
	last    atomic.Int64 // unix milliseconds
	methods [numMethods]atomic.Int64
	lastKey atomic.Int64 // unix milliseconds of the last ByAPIKey request
}

const numShards = 32

// shard is one lock and its keys' counts. Every Record takes its read
// lock, which writes the lock's reader count; the pad before it keeps
// it off the cache line of the shard before it (and of the Counters'
// own fields), so that keys of different shards do not contend through
// a shared line.
type shard struct {
	_  cpu.CacheLinePad
	mu sync.RWMutex
	m  map[string]*entry
}

// Counters are the per-key counts since the last Drain. Build them with
// NewCounters; they are safe for concurrent use.
type Counters struct {
	seed     maphash.Seed
	perShard int
	dropped  atomic.Int64
	shards   [numShards]shard
}

// NewCounters tracks at most maxKeys distinct keys between two drains
// (rounded up to a multiple of the shard count); requests of further keys
// are counted in Dropped only. maxKeys <= 0 means 100000.
func NewCounters(maxKeys int) *Counters {
	if maxKeys <= 0 {
		maxKeys = 100000
	}
	c := &Counters{seed: maphash.MakeSeed(), perShard: (maxKeys + numShards - 1) / numShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*entry)
	}
	return c
}

// Record counts one request of key id that authenticated by m. It takes a
// read lock and a few atomic adds for a key already tracked since the last
// drain.
func (c *Counters) Record(id string, m Method, o Outcome, bytesIn int64, now time.Time) {
	if id == "" || o >= numOutcomes || m >= numMethods {
		return
	}
	s := &c.shards[maphash.String(c.seed, id)%numShards]
	ms := now.UnixMilli()
	s.mu.RLock()
	e := s.m[id]
	if e != nil {
		e.add(m, o, bytesIn, ms)
		s.mu.RUnlock()
		return
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e = s.m[id]; e == nil {
		if len(s.m) >= c.perShard {
			c.dropped.Add(1)
			return
		}
		e = &entry{}
		s.m[id] = e
	}
	e.add(m, o, bytesIn, ms)
}

func (e *entry) add(m Method, o Outcome, bytesIn, ms int64) {
	e.n[o].Add(1)
	e.methods[m].Add(1)
	if bytesIn > 0 {
		e.bytes.Add(bytesIn)
	}
	raise(&e.last, ms)
	if m == ByAPIKey {
		raise(&e.lastKey, ms)
	}
}

// raise sets v to ms unless it holds a later time already.
func raise(v *atomic.Int64, ms int64) {
	for {
		old := v.Load()
		if ms <= old || v.CompareAndSwap(old, ms) {
			return
		}
	}
}

// Dropped is how many requests went uncounted because the cap on tracked
// keys was reached.
func (c *Counters) Dropped() int64 { return c.dropped.Load() }

// Delta is one key's counts since the previous drain.
type Delta struct {
	ID string
	Counts
	LastUsed time.Time
	// APIKey and Bearer count the requests by how they authenticated;
	// LastAPIKey is the last one made with the key itself (zero: none).
	APIKey, Bearer int64
	LastAPIKey     time.Time
}

// Counts are request counts by outcome and bytes in.
type Counts struct {
	Admitted    int64 `json:"admitted"`
	Rate        int64 `json:"refused_rate"`
	Quota       int64 `json:"refused_quota"`
	Context     int64 `json:"refused_context"`
	Product     int64 `json:"refused_product"`
	Concurrency int64 `json:"refused_concurrency"`
	// Forbidden* are the 403 Forbidden refusals by reason.
	ForbiddenOperation int64 `json:"forbidden_operation"`
	ForbiddenPlan      int64 `json:"forbidden_plan"`
	ForbiddenAddress   int64 `json:"forbidden_address"`
	BytesIn            int64 `json:"bytes_in"`
}

func (c *Counts) ptr(i int) *int64 {
	return [...]*int64{&c.Admitted, &c.Rate, &c.Quota, &c.Context, &c.Product, &c.Concurrency,
		&c.ForbiddenOperation, &c.ForbiddenPlan, &c.ForbiddenAddress, &c.BytesIn}[i]
}

// Refused is the requests refused, for any reason.
func (c Counts) Refused() int64 {
	return c.Rate + c.Quota + c.Context + c.Product + c.Concurrency + c.Forbidden()
}

// Forbidden is the 403 Forbidden refusals, every reason together.
func (c Counts) Forbidden() int64 { return c.ForbiddenOperation + c.ForbiddenPlan + c.ForbiddenAddress }

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	for i := 0; i <= int(numOutcomes); i++ {
		*c.ptr(i) += *o.ptr(i)
	}
}

// Drain returns the counts since the previous drain and starts afresh.
func (c *Counters) Drain() []Delta {
	// Swap every shard's map first, so that the deltas go into one slice
	// of the right size (with many keys, growing it was half of what a
	// drain allocated).
	var ms [numShards]map[string]*entry
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		ms[i] = s.m
		s.m = make(map[string]*entry, len(ms[i]))
		s.mu.Unlock()
		n += len(ms[i])
	}
	if n == 0 {
		return nil
	}
	out := make([]Delta, 0, n)
	// Record adds under the read lock: once swapped, a map is ours.
	for _, m := range ms {
		for id, e := range m {
			d := Delta{ID: id, LastUsed: time.UnixMilli(e.last.Load()).UTC()}
			for o := Outcome(0); o < numOutcomes; o++ {
				*d.ptr(int(o)) = e.n[o].Load()
			}
			d.BytesIn = e.bytes.Load()
			d.APIKey, d.Bearer = e.methods[ByAPIKey].Load(), e.methods[ByToken].Load()
			if ms := e.lastKey.Load(); ms > 0 {
				d.LastAPIKey = time.UnixMilli(ms).UTC()
			}
			out = append(out, d)
		}
	}
	return out
}
