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

// hashGetter is a Store that reads records by hash, a page at a time
// (keystore.RedisAdmin).
type hashGetter interface {
	GetHashes(ctx context.Context, hs []keystore.Hash) ([]keystore.Record, error)
}

// recentWindow is how long the Service remembers the keys it issued to a
// consumer, for its lists: far longer than a replica's index takes to
// see a change (milliseconds; bench-churn's p99 is about 30 ms under
// full load).
const recentWindow = 10 * time.Second

// recentKeys are the keys a Service issued (or made by rotation), by
// consumer, in the last recentWindow, so that its own lists show them at
// once even if its replica's index has not caught up with the change log
// yet.
type recentKeys struct {
	mu sync.Mutex
	m  map[string][]recentKey // by consumer
}

type recentKey struct {
	h   keystore.Hash
	at  time.Time
	pos keystore.Position
}

// add remembers r, under its consumer ("" for none).
func (rk *recentKeys) add(r keystore.Record, now time.Time) {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	if rk.m == nil {
		rk.m = map[string][]recentKey{}
	}
	rk.prune(now)
	rk.m[r.Consumer] = append(rk.m[r.Consumer], recentKey{r.Hash, now, keystore.PositionOf(r)})
}

// join returns hs with the keys remembered that it lacks: those of
// consumer (any consumer or none when consumer is "") whose place in the
// key list is after after and not after upTo (nil: no bound either side).
// A page of the list that ends before the last few seconds' keys reads
// none of them.
func (rk *recentKeys) join(hs []keystore.Hash, consumer string, after, upTo *keystore.Position, now time.Time) []keystore.Hash {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	rk.prune(now)
	for c, ks := range rk.m {
		if consumer != "" && c != consumer {
			continue
		}
		for _, k := range ks {
			if (after == nil || k.pos.Compare(*after) > 0) && (upTo == nil || k.pos.Compare(*upTo) <= 0) && !slices.Contains(hs, k.h) {
				hs = append(hs, k.h)
			}
		}
	}
	return hs
}

// prune forgets keys older than recentWindow; rk.mu is held.
func (rk *recentKeys) prune(now time.Time) {
	for c, ks := range rk.m {
		ks = slices.DeleteFunc(ks, func(k recentKey) bool { return now.Sub(k.at) > recentWindow })
		if len(ks) == 0 {
			delete(rk.m, c)
		} else {
			rk.m[c] = ks
		}
	}
}

// consumerRecords returns the records of consumer's keys by their hashes
// when the Service has a ConsumerKeys and its Store reads by hash; ok is
// false otherwise, and the caller reads the whole store.
func (s *Service) consumerRecords(ctx context.Context, consumer string) (recs []keystore.Record, ok bool, err error) {
	g, isGetter := s.store.(hashGetter)
	if consumer == "" || s.findConsumerKeys == nil || !isGetter {
		return nil, false, nil
	}
	hs, ok := s.findConsumerKeys(consumer)
	if !ok {
		return nil, false, nil
	}
	recs, err = g.GetHashes(ctx, s.recent.join(hs, consumer, nil, nil, s.now()))
	return recs, true, err
}
