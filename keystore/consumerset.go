package keystore

import (
	"sync"
	"time"

	"github.com/keygate/keygate/policy"
)

// consumerSet is a replica's copy of the consumers: what the replica
// reads of them (their keys' limits, the consumer list's order, the
// portal's sign-in by metadata), and nothing that only the admin side
// reads, which reads the consumer itself from Redis.
//
// A consumer is found by the number the index's string table gives its
// id (its keys' entries hold the same number), in chunks of entries
// under locks of their own: a change locks one chunk and costs the same
// with ten consumers or a million, and an entry is 24 bytes with no map
// around it. (Whole consumers in sharded maps held about 300 bytes each
// beside the string table's copy of the id: 1M consumers were 60% of a
// million keys' replica.)
type consumerSet struct {
	strs   *strtab
	chunks chunkDir[consumerChunk]
}

// consumerChunkLen is the number of entries a chunk holds.
const consumerChunkLen = 1024

type consumerChunk struct {
	mu sync.RWMutex
	e  [consumerChunkLen]consumerEntry
}

// consumerEntry is the compact form of a consumer, at its id's number.
type consumerEntry struct {
	// created is CreatedAt in Unix nanoseconds.
	created int64
	// more holds what few consumers have; nil for none. It is immutable
	// once made.
	more *consumerMore
	// plan is Plan's number in the string table.
	plan uint32
	live bool
}

// consumerMore is the part of a consumer that most leave empty.
type consumerMore struct {
	override     *policy.Override
	permissions  []string
	allowedCIDRs []string
	metadata     map[string]string
}

func newConsumerSet(strs *strtab) *consumerSet {
	return &consumerSet{strs: strs}
}

// compactConsumer is c's entry.
func (cs *consumerSet) compactConsumer(c *Consumer) consumerEntry {
	e := consumerEntry{created: c.CreatedAt.UnixNano(), plan: cs.strs.number(c.Plan), live: true}
	if c.Override != nil || c.Permissions != nil || c.AllowedCIDRs != nil || c.Metadata != nil {
		e.more = &consumerMore{override: c.Override, permissions: c.Permissions, allowedCIDRs: c.AllowedCIDRs, metadata: c.Metadata}
	}
	return e
}

// consumer is the Consumer that e holds: its id, creation time, plan,
// override, permissions, address rules and metadata (not its name,
// contexts or update time). strs is the string table as loaded after e
// was read.
func (e *consumerEntry) consumer(id string, strs []string) Consumer {
	c := Consumer{ID: id, Plan: strs[e.plan], CreatedAt: time.Unix(0, e.created)}
	if m := e.more; m != nil {
		c.Override, c.Permissions, c.AllowedCIDRs, c.Metadata = m.override, m.permissions, m.allowedCIDRs, m.metadata
	}
	return c
}

// chunk returns the chunk that holds number n, adding chunks up to it
// when add is set; nil when there is none.
func (cs *consumerSet) chunk(n uint32, add bool) *consumerChunk {
	return cs.chunks.at(int(n/consumerChunkLen), add)
}

// get returns the consumer with id as the set holds it (see
// consumerEntry.consumer), and whether there is one.
func (cs *consumerSet) get(id string) (Consumer, bool) {
	if id == "" {
		return Consumer{}, false
	}
	n, ok := cs.strs.lookup(id)
	if !ok {
		return Consumer{}, false
	}
	ch := cs.chunk(n, false)
	if ch == nil {
		return Consumer{}, false
	}
	ch.mu.RLock()
	e := ch.e[n%consumerChunkLen]
	ch.mu.RUnlock()
	if !e.live {
		return Consumer{}, false
	}
	return e.consumer(id, cs.strs.load()), true
}

// set stores c, or removes the consumer with id when c is nil.
func (cs *consumerSet) set(id string, c *Consumer) {
	var e consumerEntry
	if c != nil {
		e = cs.compactConsumer(c)
	}
	n := cs.strs.number(id)
	ch := cs.chunk(n, true)
	ch.mu.Lock()
	ch.e[n%consumerChunkLen] = e
	ch.mu.Unlock()
}

// numberedConsumer is a consumer's entry and its id's number, as a full
// pass reads it.
type numberedConsumer struct {
	n uint32
	e consumerEntry
}

// numbered is c as a full pass keeps it until replace.
func (cs *consumerSet) numbered(c *Consumer) numberedConsumer {
	return numberedConsumer{cs.strs.number(c.ID), cs.compactConsumer(c)}
}

// replace makes cons the whole set (a full pass), one chunk at a time.
func (cs *consumerSet) replace(cons []numberedConsumer) {
	var top uint32
	for _, c := range cons {
		top = max(top, c.n)
	}
	if len(cons) > 0 {
		cs.chunk(top, true)
	}
	chunks := cs.chunks.all()
	next := make([]consumerEntry, len(chunks)*consumerChunkLen)
	for _, c := range cons {
		next[c.n] = c.e
	}
	for i, ch := range chunks {
		ch.mu.Lock()
		copy(ch.e[:], next[i*consumerChunkLen:])
		ch.mu.Unlock()
	}
}

// each calls f with every consumer the set holds (see
// consumerEntry.consumer), one chunk at a time under its read lock: f
// must not change the set, nor what the consumer's slices and map hold.
func (cs *consumerSet) each(f func(c *Consumer)) {
	for i, ch := range cs.chunks.all() {
		ch.mu.RLock()
		strs := cs.strs.load()
		for j := range ch.e {
			if e := &ch.e[j]; e.live {
				c := e.consumer(strs[i*consumerChunkLen+j], strs)
				f(&c)
			}
		}
		ch.mu.RUnlock()
	}
}
