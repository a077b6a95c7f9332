package usage

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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
func (s *RedisStore) lastKeyAuthKey() string { return s.Prefix + "usage:last_api_key" }

// methodsBatch bounds the commands of one pipeline of Methods: a
// report over every key of a large fleet (30 day hashes a key) sent as
// one pipeline outlasted the client's write timeout at 100,000 keys and
// held every reply at once.
const methodsBatch = 1000

// Methods reads ids' counts by method over the last since (whole days,
// today included, at most MaxMethodWindow), in pipelines of at most
// methodsBatch commands.
func (s *RedisStore) Methods(ctx context.Context, ids []string, since time.Duration, now time.Time) (map[string]MethodCounts, error) {
	out := make(map[string]MethodCounts, len(ids))
	ds := days(min(since, MaxMethodWindow), now)
	per := max(1, methodsBatch/len(ds))
	for start := 0; start < len(ids); start += per {
		if err := s.methods(ctx, ids[start:min(start+per, len(ids))], ds, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// methods reads one batch of Methods into out: ids' day hashes and their
// last direct uses, in one pipeline.
func (s *RedisStore) methods(ctx context.Context, ids, ds []string, out map[string]MethodCounts) error {
	gets := make([]*redis.MapStringStringCmd, 0, len(ids)*len(ds))
	var last *redis.FloatSliceCmd
	_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			for _, d := range ds {
				gets = append(gets, p.HGetAll(ctx, s.methodsKey(id, d)))
			}
		}
		last = p.ZMScore(ctx, s.lastKeyAuthKey(), ids...)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, g := range gets {
		m, err := g.Result()
		if err != nil {
			return err
		}
		id := ids[i/len(ds)]
		c := out[id]
		a, _ := strconv.ParseInt(m["api_key"], 10, 64)
		b, _ := strconv.ParseInt(m["bearer"], 10, 64)
		c.APIKey += a
		c.Bearer += b
		out[id] = c
	}
	for i, v := range last.Val() {
		if v > 0 {
			c := out[ids[i]]
			c.LastAPIKey = time.UnixMilli(int64(v)).UTC()
			out[ids[i]] = c
		}
	}
	return nil
}
