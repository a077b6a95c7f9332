package usage_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/usage"
)

// BenchmarkRedisStoreFlush is one flush of the deltas of 4000 keys (a
// second of a busy gateway whose load is spread over many keys, each key
// used by API key) into a real redis-server. redis-µs/op is the CPU time
// redis-server spent per flush (INFO cpu), which the gateway's machine
// pays too when it runs both. With last uses exact, every flush raises
// 4000 members of each sorted set; with them kept to the minute (the
// default), keys used again within the minute are not written.
func BenchmarkRedisStoreFlush(b *testing.B) {
	for _, bc := range []struct {
		name string
		step time.Duration
	}{{"last-use=exact", 0}, {"last-use=1m", time.Minute}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			client := srv.Client(b)
			ctx := context.Background()
			now := time.Now()
			s := &usage.RedisStore{Client: client, Prefix: "kg:", LastUseStep: bc.step, LastUseKeys: 100_000}
			const n = 4000
			ds := make([]usage.Delta, n)
			for i := range ds {
				ds[i] = usage.Delta{ID: fmt.Sprintf("key_%016x", i), Counts: usage.Counts{Admitted: 3, BytesIn: 900},
					LastUsed: now, APIKey: 3, LastAPIKey: now}
			}
			if err := s.Flush(ctx, ds, now); err != nil { // the keys exist, as in a running gateway
				b.Fatal(err)
			}
			cpu0 := redisCPU(b, srv)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// A second later each time, so a step of a minute writes
				// each key's last use again every 60 flushes.
				at := now.Add(time.Duration(i+1) * time.Second)
				for j := range ds {
					ds[j].LastUsed, ds[j].LastAPIKey = at, at
				}
				if err := s.Flush(ctx, ds, at); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((redisCPU(b, srv)-cpu0).Microseconds())/float64(b.N), "redis-µs/op")
		})
	}
}

// redisCPU is redis-server's user plus system CPU time so far.
func redisCPU(b *testing.B, srv *redistest.Server) time.Duration {
	info, err := srv.Do("INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
