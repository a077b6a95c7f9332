package usage

import (
	"context"
	"strconv"
	"time"
)

// MethodRetention is how long the daily counts by method are kept: the
// migration report looks back up to 30 days, plus the day in progress.
const MethodRetention = 31 * 24 * time.Hour

// MaxMethodWindow is the longest window the counts by method answer.
const MaxMethodWindow = 30 * 24 * time.Hour

// MethodCounts are one key's requests by how they authenticated, over a
// window, and the last request made with the key itself.
type MethodCounts struct {
	APIKey     int64     `json:"api_key"`
	Bearer     int64     `json:"bearer"`
	LastAPIKey time.Time `json:"last_api_key_at,omitzero"`
}

func day(t time.Time) string { return t.UTC().Format("20060102") }

// days are the day buckets (UTC) that cover the last since, today
// included.
func days(since time.Duration, now time.Time) []string {
	n := int((since+24*time.Hour-1)/(24*time.Hour)) + 1
	out := make([]string, 0, n)
	for i := n - 1; i >= 0; i-- {
		out = append(out, day(now.Add(-time.Duration(i)*24*time.Hour)))
	}
	return out
}

func (s *RedisStore) methodsKey(id, d string) string {
	return s.Prefix + "usage:{" + id + "}:methods:" + d
}

// Methods reads ids' counts by method over the last since (whole days,
// today included, at most MaxMethodWindow), in bounded pipelines (see
// hashesOf).
func (s *RedisStore) Methods(ctx context.Context, ids []string, since time.Duration, now time.Time) (map[string]MethodCounts, error) {
	out := make(map[string]MethodCounts, len(ids))
	ds := days(min(since, MaxMethodWindow), now)
	err := s.hashesOf(ctx, ids, len(ds), func(id string, j int) string { return s.methodsKey(id, ds[j]) }, lastAPIKey,
		func(id string, _ int, m map[string]string) {
			c := out[id]
			a, _ := strconv.ParseInt(m["api_key"], 10, 64)
			b, _ := strconv.ParseInt(m["bearer"], 10, 64)
			c.APIKey += a
			c.Bearer += b
			out[id] = c
		},
		func(id string, at time.Time) {
			c := out[id]
			c.LastAPIKey = at
			out[id] = c
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}
