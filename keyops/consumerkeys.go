package keyops

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/keygate/keygate/keystore"
)

// ConsumerKeys finds the hashes of a consumer's keys without reading the
// key set: a replica's keystore index (keystore.RedisStore.ConsumerKeys).
// ok is false when it cannot tell (the index is still loading).
type ConsumerKeys func(consumer string) (hs []keystore.Hash, ok bool)

// recentWindow is how long the Service remembers the keys and consumers
// it made, for its lists: far longer than a replica's index takes to
// see a change (milliseconds; bench-churn's p99 is about 30 ms under
// full load).
const recentWindow = 10 * time.Second

// recent are the keys (by hash) or consumers (by id) a Service made in
// the last recentWindow, by group (a key's consumer; "" for consumers),
// so that its own lists show them at once even if its replica's copy has
// not caught up with the change log yet.
type recent[T comparable] struct {
	mu sync.Mutex
	m  map[string][]recentItem[T] // by group
}

type recentItem[T comparable] struct {
	v   T
	at  time.Time
	pos keystore.Position
}

// add remembers v, at pos in its list, under group.
func (rs *recent[T]) add(group string, v T, pos keystore.Position, now time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string][]recentItem[T]{}
	}
	rs.prune(now)
	rs.m[group] = append(rs.m[group], recentItem[T]{v, now, pos})
}

// join returns vs with the items remembered that it lacks: those of
// group (any group when group is "") whose place in the list is after
// after and not after upTo (nil: no bound either side). A page of the
// list that ends before the last few seconds' items reads none of them.
func (rs *recent[T]) join(vs []T, group string, after, upTo *keystore.Position, now time.Time) []T {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.prune(now)
	for g, items := range rs.m {
		if group != "" && g != group {
			continue
		}
		for _, it := range items {
			if (after == nil || it.pos.Compare(*after) > 0) && (upTo == nil || it.pos.Compare(*upTo) <= 0) && !slices.Contains(vs, it.v) {
				vs = append(vs, it.v)
			}
		}
	}
	return vs
}

// prune forgets items older than recentWindow; rs.mu is held.
func (rs *recent[T]) prune(now time.Time) {
	for g, items := range rs.m {
		items = slices.DeleteFunc(items, func(it recentItem[T]) bool { return now.Sub(it.at) > recentWindow })
		if len(items) == 0 {
			delete(rs.m, g)
		} else {
			rs.m[g] = items
		}
	}
}

// addKey remembers a key the Service issued or made by rotation.
func (s *Service) addKey(r keystore.Record) {
	s.recent.add(r.Consumer, r.Hash, keystore.PositionOf(r), s.now())
}

// consumerRecords returns the records of consumer's keys by their hashes
// when the Service has a ConsumerKeys that can tell; ok is false
// otherwise, and the caller reads the whole store.
func (s *Service) consumerRecords(ctx context.Context, consumer string) (recs []keystore.Record, ok bool, err error) {
	if consumer == "" || s.findConsumerKeys == nil {
		return nil, false, nil
	}
	hs, ok := s.findConsumerKeys(consumer)
	if !ok {
		return nil, false, nil
	}
	recs, err = s.store.GetHashes(ctx, s.recent.join(hs, consumer, nil, nil, s.now()))
	return recs, true, err
}
