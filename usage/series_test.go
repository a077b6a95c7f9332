package usage_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/usage"
)

// seriesTable flushes counts into several hours of two keys and checks
// Series over various periods: one entry per hour, oldest first, zero
// where nothing was flushed, summed over the ids, and Read equal to the
// sum of the series.
func seriesTable(t *testing.T, s usage.Store) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	flush := func(at time.Time, id string, o usage.Outcome, n int) {
		t.Helper()
		c := usage.NewCounters(0)
		for range n {
			c.Record(id, usage.ByAPIKey, o, 1, at)
		}
		if err := s.Flush(ctx, c.Drain(), at); err != nil {
			t.Fatal(err)
		}
	}
	flush(now, "key_a", usage.Admitted, 3)                                              // current hour
	flush(now, "key_b", usage.RefusedRate, 2)                                           // current hour, other key
	flush(now.Add(-time.Hour), "key_a", usage.RefusedConcurrency, 1)                    // 09:00
	flush(now.Add(-23*time.Hour), "key_a", usage.Admitted, 5)                           // 11:00 the day before: first of 24h
	flush(now.Add(-24*time.Hour), "key_a", usage.RefusedQuota, 7)                       // 10:00 the day before: just out of 24h
	flush(now.Add(-167*time.Hour), "key_b", usage.RefusedProduct, 4)                    // first hour of 7 days
	flush(now.Add(-3*time.Hour).Add(-29*time.Minute), "key_b", usage.RefusedContext, 6) // 07:00 (07:01)

	at := func(h string) time.Time {
		tm, err := time.Parse("2006010215", h)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		name  string
		ids   []string
		since time.Duration
		now   time.Time
		n     int
		first time.Time
		want  map[time.Time]usage.Counts // non-zero hours
	}{
		{"1h a", []string{"key_a"}, time.Hour, now, 1, at("2026112310"),
			map[time.Time]usage.Counts{at("2026112310"): {Admitted: 3, BytesIn: 3}}},
		{"90m both rounds up to 2 hours", []string{"key_a", "key_b"}, 90 * time.Minute, now, 2, at("2026112309"),
			map[time.Time]usage.Counts{
				at("2026112309"): {Concurrency: 1, BytesIn: 1},
				at("2026112310"): {Admitted: 3, Rate: 2, BytesIn: 5},
			}},
		{"24h a", []string{"key_a"}, 24 * time.Hour, now, 24, at("2026112211"),
			map[time.Time]usage.Counts{
				at("2026112211"): {Admitted: 5, BytesIn: 5},
				at("2026112309"): {Concurrency: 1, BytesIn: 1},
				at("2026112310"): {Admitted: 3, BytesIn: 3},
			}},
		{"24h b, now in another zone", []string{"key_b"}, 24 * time.Hour, now.In(time.FixedZone("IST", 5*3600+1800)), 24, at("2026112211"),
			map[time.Time]usage.Counts{
				at("2026112307"): {Context: 6, BytesIn: 6},
				at("2026112310"): {Rate: 2, BytesIn: 2},
			}},
		{"7d both", []string{"key_a", "key_b", "key_none"}, 7 * 24 * time.Hour, now, 168, at("2026111611"),
			map[time.Time]usage.Counts{
				at("2026111611"): {Product: 4, BytesIn: 4},
				at("2026112210"): {Quota: 7, BytesIn: 7},
				at("2026112211"): {Admitted: 5, BytesIn: 5},
				at("2026112307"): {Context: 6, BytesIn: 6},
				at("2026112309"): {Concurrency: 1, BytesIn: 1},
				at("2026112310"): {Admitted: 3, Rate: 2, BytesIn: 5},
			}},
		{"0 means 7 days", []string{"key_b"}, 0, now, 168, at("2026111611"),
			map[time.Time]usage.Counts{
				at("2026111611"): {Product: 4, BytesIn: 4},
				at("2026112307"): {Context: 6, BytesIn: 6},
				at("2026112310"): {Rate: 2, BytesIn: 2},
			}},
		{"an hour later, the current hour is empty", []string{"key_a"}, 2 * time.Hour, now.Add(time.Hour), 2, at("2026112310"),
			map[time.Time]usage.Counts{at("2026112310"): {Admitted: 3, BytesIn: 3}}},
		{"no ids: zeros", nil, 3 * time.Hour, now, 3, at("2026112308"), nil},
		{"unknown key: zeros", []string{"key_none"}, 24 * time.Hour, now, 24, at("2026112211"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := s.Series(ctx, tc.ids, tc.since, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != tc.n {
				t.Fatalf("%d hours, want %d", len(hs), tc.n)
			}
			var total usage.Counts
			for i, h := range hs {
				if want := tc.first.Add(time.Duration(i) * time.Hour); !h.Start.Equal(want) || h.Start.Location() != time.UTC {
					t.Fatalf("hour %d starts %v, want %v UTC", i, h.Start, want)
				}
				if h.Counts != tc.want[h.Start] {
					t.Errorf("%s: %+v, want %+v", h.Start.Format(time.RFC3339), h.Counts, tc.want[h.Start])
				}
				total.Add(h.Counts)
			}
			got, _, err := s.Read(ctx, tc.ids, tc.since, tc.now)
			if err != nil || got != total {
				t.Errorf("Read = %+v, %v; want the series' sum %+v", got, err, total)
			}
		})
	}
}

func TestRedisSeries(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	seriesTable(t, &usage.RedisStore{Client: client, Prefix: "kg:"})
}

func TestFileSeries(t *testing.T) {
	seriesTable(t, &usage.FileStore{Path: filepath.Join(t.TempDir(), "keys.yaml.usage.json")})
}

// TestRedisSeriesIsOnePipeline: 7 days of 20 keys are one round trip.
func TestRedisSeriesIsOnePipeline(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	h := &countHook{}
	client.AddHook(h)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("key_%d", i)
	}
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	hs, err := s.Series(context.Background(), ids, 7*24*time.Hour, time.Now())
	if err != nil || len(hs) != 168 {
		t.Fatalf("series: %d hours, %v", len(hs), err)
	}
	if h.pipelines != 1 || h.single != 0 {
		t.Fatalf("series made %d pipelines and %d single calls, want 1 and 0", h.pipelines, h.single)
	}
}

func TestCountsRefused(t *testing.T) {
	c := usage.Counts{Admitted: 100, Rate: 1, Quota: 2, Context: 4, Product: 8, Concurrency: 16, BytesIn: 1000}
	if got := c.Refused(); got != 31 {
		t.Fatalf("Refused = %d, want 31", got)
	}
}
