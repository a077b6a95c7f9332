package ratelimit_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// BenchmarkLocalAllowKeys: decisions from every core at once, over one id
// and over 100k ids (the default MaxKeys): with sharded state the many-id
// figure stays near the one-id figure.
func BenchmarkLocalAllowKeys(b *testing.B) {
	lim := policy.Limit{Rate: 1e9, Per: time.Second, Burst: 1 << 30}
	for _, n := range []int{1, 100_000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			l := ratelimit.NewLocal(ratelimit.LocalConfig{})
			ids := make([]string, n)
			for i := range ids {
				ids[i] = "key_" + strconv.Itoa(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := l.Allow(ctx, ids[i%len(ids)], lim); err != nil {
						b.Fatal(err)
					}
					i += 7919
				}
			})
		})
	}
}

// BenchmarkLocalHeap: what 100k ids (the default MaxKeys) leave on the
// heap, and what they cost each collection: heap objects and bytes per
// id, and the time of one full collection with them live (a request
// path that allocates pays for collections in proportion to what they
// mark).
func BenchmarkLocalHeap(b *testing.B) {
	const n = 100_000
	lim := policy.Limit{Rate: 1e9, Per: time.Second, Burst: 1 << 30, Quota: policy.Quota{Requests: 1e12, Per: 24 * time.Hour}}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "key_" + strconv.Itoa(i)
	}
	ctx := context.Background()
	var objs, bytes, gc float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := ratelimit.NewLocal(ratelimit.LocalConfig{})
		for _, id := range ids {
			if _, err := l.Allow(ctx, id, lim); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		start := time.Now()
		runtime.GC()
		gc += float64(time.Since(start).Microseconds())
		objs += float64(after.HeapObjects-before.HeapObjects) / n
		bytes += float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(l)
	}
	b.ReportMetric(objs/float64(b.N), "objects/id")
	b.ReportMetric(bytes/float64(b.N), "B/id")
	b.ReportMetric(gc/float64(b.N), "µs/GC")
}
