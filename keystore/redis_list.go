package keystore

import (
	"context"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// hashAll reads every field of the Redis hash key, a page (HSCAN COUNT
// page) at a time, and decodes each with decode (field, value).
func hashAll[T any](ctx context.Context, c redis.Cmdable, key string, page int, decode func(f, v string) (T, error)) ([]T, error) {
	var out []T
	err := scanHash(ctx, c, key, page, func(kv []string) error {
		for i := 0; i+1 < len(kv); i += 2 {
			x, err := decode(kv[i], kv[i+1])
			if err != nil {
				return err
			}
			out = append(out, x)
		}
		return nil
	})
	return out, err
}

// allRecords reads and decodes every key record, every bucket. A record
// seen twice (HSCAN may return a field twice, when the hash grew while
// the scan ran) is kept once.
func allRecords(ctx context.Context, c redis.Cmdable, k *redisKeys, page int) ([]Record, error) {
	return matchingRecords(ctx, c, k, page, func(Record) bool { return true })
}

// matchingRecords is allRecords keeping only the records keep accepts, as
// each page arrives: a filtered list holds its matches, not the key set
// (a consumer's keys out of a million: 1.1–1.3 GiB before).
func matchingRecords(ctx context.Context, c redis.Cmdable, k *redisKeys, page int, keep func(Record) bool) ([]Record, error) {
	var out []Record
	seen := make(map[Hash]bool)
	for _, key := range k.records {
		err := scanHash(ctx, c, key, page, func(kv []string) error {
			for i := 0; i+1 < len(kv); i += 2 {
				r, err := decodeRecord(kv[i], kv[i+1])
				if err != nil {
					return err
				}
				if keep(r) && !seen[r.Hash] {
					seen[r.Hash] = true
					out = append(out, r)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
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
