package ratelimit_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// benchLimit admits everything, so each iteration is a full admitted decision.
var benchLimit = policy.Limit{Rate: 1e9, Per: time.Second, Burst: 1e9, Quota: policy.Quota{Requests: 1e12, Per: time.Hour}}

func benchIDs() []string { return manyIDs(64) }

// manyIDs are n distinct key ids.
func manyIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "key_" + strconv.Itoa(i)
	}
	return ids
}

func BenchmarkLocalAllow(b *testing.B) {
	l := ratelimit.NewLocal(ratelimit.LocalConfig{})
	ids := benchIDs()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := l.Allow(ctx, ids[i%len(ids)], benchLimit); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkRedisAllow(b *testing.B) {
	s := redistest.Start(b)
	r := newRedis(b, []string{s.Addr}, ratelimit.ResilientConfig{})
	ids := benchIDs()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d, err := r.Allow(ctx, ids[i%len(ids)], benchLimit)
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		i++
	}
	if st := r.Stats(); st.FallbackDecisions != 0 {
		b.Fatalf("fallback during the benchmark: %+v", st)
	}
}

// BenchmarkRedisAllowConcurrent is 32 callers deciding at once, as a
// loaded replica does: decisions in flight together share a script call.
// "hot-key" sends every request with one key (as make bench-peers does),
// "64-keys" spreads them, and "100k-keys" spreads them over as many ids
// as `make bench-peers -keys 100000` does (each decision then reads and
// writes state of its own, from a data set that outgrows the caches);
// "-lease-20ms" puts the limiter behind leases
// (ratelimit.lease: 20ms). It reports Redis's own CPU per decision (from
// INFO cpu), which shares the machine with the gateway.
func BenchmarkRedisAllowConcurrent(b *testing.B) {
	// A limit with a quota is never leased: the lease cases, and one
	// exact case to hold them against, have a rate only.
	rateOnly := policy.Limit{Rate: benchLimit.Rate, Per: benchLimit.Per, Burst: benchLimit.Burst}
	for _, c := range []struct {
		name  string
		ids   []string
		lim   policy.Limit
		lease time.Duration
	}{
		{"hot-key", []string{"key_hot"}, benchLimit, 0},
		{"64-keys", benchIDs(), benchLimit, 0},
		{"100k-keys", manyIDs(100_000), benchLimit, 0},
		{"hot-key-rate-only", []string{"key_hot"}, rateOnly, 0},
		{"hot-key-rate-only-lease-20ms", []string{"key_hot"}, rateOnly, 20 * time.Millisecond},
		{"64-keys-rate-only-lease-20ms", benchIDs(), rateOnly, 20 * time.Millisecond},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := redistest.Start(b)
			r := newRedis(b, []string{s.Addr}, ratelimit.ResilientConfig{})
			if c.lease > 0 {
				pure, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: newClient(b, 2*time.Second, s.Addr), Timeout: 2 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				if r, err = ratelimit.NewResilient(ratelimit.NewLeases(pure, ratelimit.LeaseConfig{TTL: c.lease}), ratelimit.ResilientConfig{}); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			var next atomic.Int64
			cpu0 := redisCPU(b, s)
			b.ReportAllocs()
			b.SetParallelism(16) // 32 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := c.ids[next.Add(1)%int64(len(c.ids))]
					if d, err := r.Allow(ctx, id, c.lim); err != nil || !d.Allowed {
						b.Error(d, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((redisCPU(b, s)-cpu0).Nanoseconds())/float64(b.N), "redis-ns/op")
			if st := r.Stats(); st.FallbackDecisions != 0 {
				b.Fatalf("fallback during the benchmark: %+v", st)
			}
		})
	}
}

// redisCPU is the CPU time Redis has used so far (user and system).
func redisCPU(b *testing.B, s *redistest.Server) time.Duration {
	info, err := s.Do("INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
