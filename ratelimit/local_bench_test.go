package ratelimit_test

import (
	"context"
	"fmt"
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
