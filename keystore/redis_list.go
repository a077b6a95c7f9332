package keystore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// hashAll reads every field of the Redis hash key and decodes each with
// decode (field, value).
func hashAll[T any](ctx context.Context, c redis.Cmdable, key string, decode func(f, v string) (T, error)) ([]T, error) {
	all, err := c.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	out := make([]T, 0, len(all))
	for f, v := range all {
		x, err := decode(f, v)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// oldestFirst sorts xs by creation time, then id: the order every list of
// the store is given in.
func oldestFirst[T any](xs []T, created func(*T) time.Time, id func(*T) string) {
	sort.Slice(xs, func(i, j int) bool {
		ci, cj := created(&xs[i]), created(&xs[j])
		if !ci.Equal(cj) {
			return ci.Before(cj)
		}
		return id(&xs[i]) < id(&xs[j])
	})
}
