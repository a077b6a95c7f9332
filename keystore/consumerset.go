package keystore

import (
	"hash/maphash"
	"sync"
)

// consumerSet is a replica's copy of the consumers, in shards under
// locks of their own: a change locks one shard and costs the same with
// ten consumers or a million. (A copy-on-write map copied every consumer
// for each change: tens of milliseconds and as many megabytes of garbage
// per change at a few hundred thousand consumers, on every replica.)
type consumerSet struct {
	seed   maphash.Seed
	shards [64]consumerShard
}

// consumerShard holds its consumers by pointer, each a copy that is
// never changed once stored: a lookup (one a key, in a full pass) copies
// no consumer.
type consumerShard struct {
	mu sync.RWMutex
	m  map[string]*Consumer
}

func newConsumerSet() *consumerSet {
	cs := &consumerSet{seed: maphash.MakeSeed()}
	for i := range cs.shards {
		cs.shards[i].m = map[string]*Consumer{}
	}
	return cs
}

func (cs *consumerSet) shard(id string) *consumerShard {
	return &cs.shards[maphash.String(cs.seed, id)%uint64(len(cs.shards))]
}

// get returns the consumer with id, or nil. The caller must not change
// it.
func (cs *consumerSet) get(id string) *Consumer {
	if id == "" {
		return nil
	}
	s := cs.shard(id)
	s.mu.RLock()
	c := s.m[id]
	s.mu.RUnlock()
	return c
}

// set stores c, or removes the consumer with id when c is nil.
func (cs *consumerSet) set(id string, c *Consumer) {
	s := cs.shard(id)
	s.mu.Lock()
	if c == nil {
		delete(s.m, id)
	} else {
		cp := *c
		s.m[id] = &cp
	}
	s.mu.Unlock()
}

// replace makes cons the whole set (a full pass), one shard at a time.
// The set keeps pointers into cons: the caller must not change it.
func (cs *consumerSet) replace(cons []Consumer) {
	var next [len(cs.shards)]map[string]*Consumer
	for i := range next {
		next[i] = make(map[string]*Consumer, len(cons)/len(next)+1)
	}
	for i := range cons {
		c := &cons[i]
		next[maphash.String(cs.seed, c.ID)%uint64(len(next))][c.ID] = c
	}
	for i := range cs.shards {
		s := &cs.shards[i]
		s.mu.Lock()
		s.m = next[i]
		s.mu.Unlock()
	}
}

// each calls f with every consumer, one shard at a time under its read
// lock: f must change neither the set nor the consumer.
func (cs *consumerSet) each(f func(c *Consumer)) {
	for i := range cs.shards {
		s := &cs.shards[i]
		s.mu.RLock()
		for _, c := range s.m {
			f(c)
		}
		s.mu.RUnlock()
	}
}
