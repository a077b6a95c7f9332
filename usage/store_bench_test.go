package usage_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/keygate/keygate/usage"
)

// BenchmarkFileStoreFlush is one flush of the deltas of 4000 keys (a
// second of a busy gateway whose load is spread over many keys) into a
// file store that already holds the counts of known keys (the keys used
// in the last 7 days), each flush on disk when it returns. A flush
// appends its keys' lines to the journal, and now and then folds the
// journal into a new snapshot of every known key; the figure includes
// those rewrites' share (rewrites/op: with a million keys a rewrite
// comes once in about 250 flushes, so only a run of as many includes
// one), so it shows what a flush costs as the keys known grow: what it
// counted, not every key.
func BenchmarkFileStoreFlush(b *testing.B) {
	now := time.Date(2026, 11, 24, 10, 30, 0, 0, time.UTC)
	const batch = 4000
	for _, known := range []int{4000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("known=%d", known), func(b *testing.B) {
			s := &usage.FileStore{Path: filepath.Join(b.TempDir(), "keys.yaml.usage.json")}
			defer s.Close()
			ctx := context.Background()
			deltas := func(from, n int) []usage.Delta {
				ds := make([]usage.Delta, n)
				for i := range ds {
					ds[i] = usage.Delta{ID: fmt.Sprintf("key_%016x", from+i), Counts: usage.Counts{Admitted: 3, BytesIn: 900},
						LastUsed: now, APIKey: 3, LastAPIKey: now}
				}
				return ds
			}
			for i := 0; i < known; i += 20_000 {
				if err := s.Flush(ctx, deltas(i, min(20_000, known-i)), now); err != nil {
					b.Fatal(err)
				}
			}
			batches := make([][]usage.Delta, 25)
			for i := range batches {
				batches[i] = deltas(i*known/len(batches), min(batch, known))
			}
			journal := s.Path + ".journal"
			size := func() int64 {
				st, err := os.Stat(journal)
				if err != nil {
					b.Fatal(err)
				}
				return st.Size()
			}
			rewrites, last := 0, size()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := s.Flush(ctx, batches[i%len(batches)], now); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if n := size(); n < last {
					rewrites++
				}
				last = size()
				b.StartTimer()
			}
			b.ReportMetric(float64(rewrites)/float64(b.N), "rewrites/op")
		})
	}
}

// BenchmarkCountersDrain is one interval of a gateway whose load is
// spread over many keys: 7000 keys recorded once each, then drained.
func BenchmarkCountersDrain(b *testing.B) {
	now := time.Now()
	ids := make([]string, 7000)
	for i := range ids {
		ids[i] = fmt.Sprintf("key_%016x", i)
	}
	c := usage.NewCounters(0)
	b.ReportAllocs()
	for b.Loop() {
		for _, id := range ids {
			c.Record(id, usage.ByAPIKey, usage.Admitted, 256, now)
		}
		if got := len(c.Drain()); got != len(ids) {
			b.Fatalf("drained %d keys", got)
		}
	}
}

// BenchmarkFileStoreMemory is what a file store holds in memory for the
// keys used in the last 7 days: 100k keys, each used in 1 hour or in 24
// hours (of one day), and 20k keys used in every hour of the week
// (Retention), with their counts by method and last uses. It reports
// the live heap per key after a collection, and each op is one more
// hour's flush of every key (the merge, not a rewrite).
func BenchmarkFileStoreMemory(b *testing.B) {
	for _, tc := range []struct{ hours, keys int }{{1, 100_000}, {24, 100_000}, {168, 20_000}} {
		hours, keys := tc.hours, tc.keys
		b.Run(fmt.Sprintf("hours=%d", hours), func(b *testing.B) {
			ctx := context.Background()
			start := time.Date(2026, 11, 24, 0, 30, 0, 0, time.UTC)
			ds := make([]usage.Delta, keys)
			for i := range ds {
				ds[i] = usage.Delta{ID: fmt.Sprintf("key_%016x", i), Counts: usage.Counts{Admitted: 3, BytesIn: 900},
					LastUsed: start, APIKey: 3, LastAPIKey: start}
			}
			before, objsBefore := liveHeap()
			s := &usage.FileStore{Path: filepath.Join(b.TempDir(), "keys.yaml.usage.json")}
			for h := range hours {
				if err := s.Flush(ctx, ds, start.Add(time.Duration(h)*time.Hour)); err != nil {
					b.Fatal(err)
				}
			}
			after, objsAfter := liveHeap()
			perKey, objsPerKey := float64(after-before)/float64(keys), float64(objsAfter-objsBefore)/float64(keys)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := s.Flush(ctx, ds, start.Add(time.Duration(hours-1+i%2)*time.Hour)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(perKey, "heap-B/key")
			b.ReportMetric(objsPerKey, "heap-objects/key")
			runtime.KeepAlive(s)
		})
	}
}

// liveHeap is the heap in use after a full collection: bytes and
// objects.
func liveHeap() (int64, int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc), int64(m.HeapObjects)
}
