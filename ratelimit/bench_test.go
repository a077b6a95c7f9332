package ratelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/redistest"
	"github.com/keygate/keygate/ratelimit"
)

// benchLimit admits everything, so each iteration is a full admitted decision.
var benchLimit = ratelimit.Limit{Rate: 1e9, Per: time.Second, Burst: 1e9, Quota: ratelimit.Quota{Requests: 1e12, Per: time.Hour}}

func benchIDs() []string {
	ids := make([]string, 64)
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
