package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

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
