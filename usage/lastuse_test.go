package usage_test

import (
	"context"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/usage"
)

// TestRedisLastUseStep: with a step, a replica writes a key's last use
// (and its last use by API key, apart) only once it moved by the step
// since this replica last wrote it, so the sorted sets lag by at most the
// step; a new key is written at once, a failed flush records nothing, a
// key past the bound on remembered keys is written at every flush, and no
// step writes every flush.
func TestRedisLastUseStep(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type use struct {
		key string
		m   usage.Method
	}
	type want struct {
		key       string
		last, api time.Duration // offsets from t0; -1: none
	}
	// flush is one flush at t0+at of uses, failing when fail, and the
	// sorted sets' scores it leaves.
	type flush struct {
		at   time.Duration
		uses []use
		fail bool
		want []want
	}
	for _, tc := range []struct {
		name  string
		step  time.Duration
		keys  int
		steps []flush
	}{
		{name: "one minute", step: time.Minute, steps: []flush{
			{at: 0, uses: []use{{"key_a", usage.ByAPIKey}}, want: []want{{"key_a", 0, 0}}},
			// 30 s later: not moved by a minute, not written; a new key is.
			{at: 30 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}, {"key_b", usage.ByToken}}, want: []want{{"key_a", 0, 0}, {"key_b", 30 * time.Second, -1}}},
			// A token use a minute on moves the last use, not the API key's.
			{at: 61 * time.Second, uses: []use{{"key_a", usage.ByToken}}, want: []want{{"key_a", 61 * time.Second, 0}}},
			// An API-key use: its own last use moved by a minute, the
			// other has not since 61 s.
			{at: 90 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}}, want: []want{{"key_a", 61 * time.Second, 90 * time.Second}}},
			// A flush that fails writes nothing and records nothing...
			{at: 200 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}}, fail: true, want: []want{{"key_a", 61 * time.Second, 90 * time.Second}}},
			// ...so the next use is written, though within a minute of it.
			{at: 201 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}}, want: []want{{"key_a", 201 * time.Second, 201 * time.Second}}},
			// The remembered generation started at 201 s; key_d joins it.
			{at: 230 * time.Second, uses: []use{{"key_d", usage.ByAPIKey}}, want: []want{{"key_d", 230 * time.Second, 230 * time.Second}}},
			// A write a minute after 201 s swaps the generations...
			{at: 262 * time.Second, uses: []use{{"key_c", usage.ByAPIKey}}, want: []want{{"key_c", 262 * time.Second, 262 * time.Second}}},
			// ...and key_d, written 50 s ago, is still found and stepped.
			{at: 280 * time.Second, uses: []use{{"key_d", usage.ByAPIKey}}, want: []want{{"key_d", 230 * time.Second, 230 * time.Second}}},
			{at: 400 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}, {"key_d", usage.ByAPIKey}}, want: []want{{"key_a", 400 * time.Second, 400 * time.Second}, {"key_d", 400 * time.Second, 400 * time.Second}}},
		}},
		{name: "bound on remembered keys", step: time.Minute, keys: 1, steps: []flush{
			{at: 0, uses: []use{{"key_a", usage.ByAPIKey}}, want: []want{{"key_a", 0, 0}}},
			{at: time.Second, uses: []use{{"key_b", usage.ByAPIKey}}, want: []want{{"key_b", time.Second, time.Second}}},
			// key_a is remembered and stepped; key_b, past the bound, is
			// written at every flush.
			{at: 2 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}, {"key_b", usage.ByAPIKey}}, want: []want{{"key_a", 0, 0}, {"key_b", 2 * time.Second, 2 * time.Second}}},
		}},
		{name: "exact", step: 0, steps: []flush{
			{at: 0, uses: []use{{"key_a", usage.ByAPIKey}}, want: []want{{"key_a", 0, 0}}},
			{at: time.Second, uses: []use{{"key_a", usage.ByToken}}, want: []want{{"key_a", time.Second, 0}}},
			{at: 2 * time.Second, uses: []use{{"key_a", usage.ByAPIKey}}, want: []want{{"key_a", 2 * time.Second, 2 * time.Second}}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := client.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			s := &usage.RedisStore{Client: client, Prefix: "kg:", LastUseStep: tc.step, LastUseKeys: tc.keys}
			for _, st := range tc.steps {
				c := usage.NewCounters(0)
				for _, u := range st.uses {
					c.Record(u.key, u.m, usage.Admitted, 1, at(st.at))
				}
				fctx := ctx
				if st.fail {
					cctx, cancel := context.WithCancel(ctx)
					cancel()
					fctx = cctx
				}
				if err := s.Flush(fctx, c.Drain(), at(st.at)); (err != nil) != st.fail {
					t.Fatalf("at %v: flush error %v, want failure %v", st.at, err, st.fail)
				}
				for _, w := range st.want {
					for name, off := range map[string]time.Duration{"last": w.last, "last_api_key": w.api} {
						set := lastSet("kg:", name, w.key)
						got, err := client.ZScore(ctx, set, w.key).Result()
						if off < 0 {
							if err == nil {
								t.Errorf("at %v: %s %s = %v, want none", st.at, set, w.key, got)
							}
							continue
						}
						if err != nil || int64(got) != at(off).UnixMilli() {
							t.Errorf("at %v: %s %s = %v (%v), want %v", st.at, set, w.key, time.UnixMilli(int64(got)).UTC().Sub(t0), err, off)
						}
					}
				}
			}
		})
	}
}
