package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

// TestLocalNoIdHasTwoLiveBuckets: while ids churn through a Local small
// enough that the LRU evicts all the time, the decisions of one id never
// run on two buckets at once (a decision on a bucket the LRU just evicted,
// while another decision starts a new one, would let the id through
// twice), for one shard and for many.
func TestLocalNoIdHasTwoLiveBuckets(t *testing.T) {
	t.Parallel()
	for _, maxKeys := range []int{4, localShardMin} {
		t.Run(strconv.Itoa(maxKeys), func(t *testing.T) {
			t.Parallel()
			l := NewLocal(LocalConfig{MaxKeys: maxKeys})
			var live sync.Map // id -> *atomic.Pointer[localSlot]
			var overlaps atomic.Int64
			l.inUse = func(id string, e *localSlot, start bool) {
				p, _ := live.LoadOrStore(id, new(atomic.Pointer[localSlot]))
				cur := p.(*atomic.Pointer[localSlot])
				if start {
					if !cur.CompareAndSwap(nil, e) {
						overlaps.Add(1)
					}
					return
				}
				cur.CompareAndSwap(e, nil)
			}
			lim := policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 3000 {
						// Half the calls on four hot ids, half on ids that
						// churn the LRU (with a small MaxKeys).
						id := "hot_" + strconv.Itoa(i%4)
						if i%2 == 1 {
							id = "churn_" + strconv.Itoa(g*100_000+i)
						}
						if maxKeys > 4 {
							id = "hot_" + strconv.Itoa(i%4)
						}
						if _, err := l.Allow(context.Background(), id, lim); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if n := overlaps.Load(); n > 0 {
				t.Errorf("%d decisions ran while another bucket of the same id was in use", n)
			}
			if l.Len() > maxKeys {
				t.Errorf("Len %d, above MaxKeys %d", l.Len(), maxKeys)
			}
		})
	}
}

// TestLocalShardedMemoryIsBounded: ids churning through a sharded Local
// (three times MaxKeys of them) leave it with at most MaxKeys ids, a
// count that agrees, and no shard holding more slots than its share
// allows: forgotten ids' slots are reused, not leaked.
func TestLocalShardedMemoryIsBounded(t *testing.T) {
	t.Parallel()
	const maxKeys = localShardMin
	l := NewLocal(LocalConfig{MaxKeys: maxKeys})
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 1}
	for i := range 3 * maxKeys {
		if d, err := l.Allow(context.Background(), "key_"+strconv.Itoa(i), lim); err != nil || !d.Allowed {
			t.Fatalf("id %d: %+v %v", i, d, err)
		}
	}
	if n := l.Len(); n > maxKeys || int64(n) != l.count.Load() {
		t.Fatalf("Len %d, count %d, MaxKeys %d", n, l.count.Load(), maxKeys)
	}
	for i := range l.shards {
		s := &l.shards[i]
		free := 0
		for j := s.free; j >= 0; j = s.slots.at(j).next {
			free++
		}
		slots := len(s.slots) * localChunk
		if int(s.size)+free != slots || slots > int(s.max)+localChunk-1 {
			t.Fatalf("shard %d: %d ids, %d free, %d slots, share %d", i, s.size, free, slots, s.max)
		}
		if len(s.ids) != int(s.size) {
			t.Fatalf("shard %d: %d ids mapped, %d kept", i, len(s.ids), s.size)
		}
	}
	// The most recent id is still limited.
	if d, _ := l.Allow(context.Background(), "key_"+strconv.Itoa(3*maxKeys-1), lim); d.Allowed {
		t.Fatal("the most recent id was forgotten")
	}
}
