package keystore

// The Redis keystore's write side: RedisAdmin, the transactions that
// change records and announce each change.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisAdmin changes the Redis keystore for the `keygate keys` command and
// announces every change, so running gateways see it within a second. Each
// change is an optimistic transaction (WATCH/MULTI) on the keystore's two
// hashes, which share one Cluster slot. It is safe for concurrent use.
type RedisAdmin struct {
	Client redis.UniversalClient
	// Prefix starts every Redis key; default "keygate:".
	Prefix string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (a *RedisAdmin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Issue creates a key and stores its record.
func (a *RedisAdmin) Issue(ctx context.Context, req IssueRequest) (string, Record, error) {
	key, rec, err := NewRecord(req, a.now())
	if err != nil {
		return "", Record{}, err
	}
	if err := a.writeKey(ctx, rec); err != nil {
		return "", Record{}, err
	}
	return key, rec, nil
}

// List returns every record, oldest first.
func (a *RedisAdmin) List(ctx context.Context) ([]Record, error) {
	recs, err := allRecords(ctx, a.Client, newRedisKeys(a.Prefix))
	if err != nil {
		return nil, err
	}
	oldestFirst(recs, func(r *Record) time.Time { return r.CreatedAt }, func(r *Record) string { return r.ID })
	return recs, nil
}

// Revoke revokes the key with id.
func (a *RedisAdmin) Revoke(ctx context.Context, id string) (Record, error) {
	var out Record
	err := a.change(ctx, id, func(old Record) ([]Record, error) {
		r, err := RevokeRecord(old, a.now())
		out = r
		return []Record{r}, err
	})
	return out, err
}

// Rotate replaces the key with id by a new one; see RotateRecord.
func (a *RedisAdmin) Rotate(ctx context.Context, id string, grace time.Duration) (string, Record, error) {
	var key string
	var out Record
	err := a.change(ctx, id, func(old Record) ([]Record, error) {
		k, oldAfter, repl, err := RotateRecord(old, a.now(), grace)
		key, out = k, repl
		return []Record{oldAfter, repl}, err
	})
	return key, out, err
}

// Import stores records (from a file keystore) that Redis does not hold
// yet, and reports how many it added and skipped.
func (a *RedisAdmin) Import(ctx context.Context, recs []Record) (added, skipped int, err error) {
	if err := ValidateRecords(recs); err != nil {
		return 0, 0, err
	}
	k := newRedisKeys(a.Prefix)
	for _, r := range recs {
		v, err := encodeRecord(r)
		if err != nil {
			return added, skipped, err
		}
		var ok bool
		err = a.Client.Watch(ctx, func(tx *redis.Tx) error {
			exists, err := tx.HExists(ctx, k.ids, r.ID).Result()
			if err != nil {
				return err
			}
			hexists, err := tx.HExists(ctx, k.records, r.Hash.String()).Result()
			if err != nil {
				return err
			}
			if exists || hexists {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.HSet(ctx, k.records, r.Hash.String(), v)
				p.HSet(ctx, k.ids, r.ID, r.Hash.String())
				return nil
			})
			ok = err == nil
			return err
		}, k.records, k.ids)
		if err != nil {
			return added, skipped, fmt.Errorf("keystore: import %s: %w", r.ID, err)
		}
		if ok {
			added++
		} else {
			skipped++
		}
	}
	return added, skipped, a.Client.Publish(ctx, k.channel, "*").Err()
}

// change applies f to the record with id inside a transaction and
// announces the records it returns.
func (a *RedisAdmin) change(ctx context.Context, id string, f func(Record) ([]Record, error)) error {
	k := newRedisKeys(a.Prefix)
	var changed []Record
	err := a.Client.Watch(ctx, func(tx *redis.Tx) error {
		hs, err := tx.HGet(ctx, k.ids, id).Result()
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		v, err := tx.HGet(ctx, k.records, hs).Result()
		if err != nil {
			return fmt.Errorf("keystore: record of %s: %w", id, err)
		}
		old, err := decodeRecord(hs, v)
		if err != nil {
			return err
		}
		if changed, err = f(old); err != nil {
			return err
		}
		return a.put(ctx, tx, changed...)
	}, k.records, k.ids)
	if err != nil {
		return err
	}
	return a.announce(ctx, changed...)
}

func (a *RedisAdmin) put(ctx context.Context, tx *redis.Tx, recs ...Record) error {
	k := newRedisKeys(a.Prefix)
	vals := make([]string, len(recs))
	for i, r := range recs {
		if err := ValidateRecord(r); err != nil {
			return err
		}
		v, err := encodeRecord(r)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range recs {
			p.HSet(ctx, k.records, r.Hash.String(), vals[i])
			p.HSet(ctx, k.ids, r.ID, r.Hash.String())
		}
		return nil
	})
	return err
}

func (a *RedisAdmin) announce(ctx context.Context, recs ...Record) error {
	hs := make([]string, len(recs))
	for i, r := range recs {
		hs[i] = r.Hash.String()
	}
	if err := a.Client.Publish(ctx, newRedisKeys(a.Prefix).channel, strings.Join(hs, ",")).Err(); err != nil {
		return fmt.Errorf("keystore: change stored but not announced (replicas pick it up at their next resync): %w", err)
	}
	return nil
}
