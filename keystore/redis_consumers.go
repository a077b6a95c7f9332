package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// consumerChange starts the item of a change message that names a
// changed (or deleted) consumer.
const consumerChange = "con:"

func encodeConsumer(c Consumer) (string, error) {
	b, err := json.Marshal(c)
	return string(b), err
}

func decodeConsumer(field, value string) (Consumer, error) {
	c, ok := decodeConsumerFast(value)
	if !ok {
		c = Consumer{}
		if err := json.Unmarshal([]byte(value), &c); err != nil {
			return Consumer{}, fmt.Errorf("keystore: consumer %s: %w", field, err)
		}
	}
	if c.ID != field {
		return Consumer{}, fmt.Errorf("keystore: consumer under %q has id %q", field, c.ID)
	}
	return c, ValidateConsumer(c)
}

// decodeConsumerFast decodes the JSON that encodeConsumer writes for a
// consumer of string fields only (id, name, plan and its times: most
// consumers), about three times faster than encoding/json: a full pass
// of a million consumers spent 1.3 s of CPU in encoding/json. For
// anything else it reports false (see stringMembers).
func decodeConsumerFast(v string) (Consumer, bool) {
	var c Consumer
	ok := stringMembers(v, func(name, val string) bool {
		switch name {
		case "id":
			c.ID = strings.Clone(val)
		case "name":
			c.Name = strings.Clone(val)
		case "plan":
			c.Plan = strings.Clone(val)
		case "created_at":
			return c.CreatedAt.UnmarshalText([]byte(val)) == nil
		case "updated_at":
			return c.UpdatedAt.UnmarshalText([]byte(val)) == nil
		default:
			return false // not a string, or unknown (encoding/json matches names case-insensitively)
		}
		return true
	})
	return c, ok
}

// applyConsumer re-reads the consumer with id and re-resolves the limits
// of its keys.
func (s *RedisStore) applyConsumer(id string) error {
	v, err := s.breaker.Do(s.ctx, func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		return s.cfg.Client.HGet(ctx, s.keys.consumersOf(id), id).Result()
	})
	var con *Consumer
	switch {
	case errors.Is(err, redis.Nil): // deleted
	case err != nil:
		return err
	default:
		c, err := decodeConsumer(id, v)
		if err != nil {
			s.log.Error("keystore: bad consumer in Redis", zap.Error(err))
			return nil
		}
		con = &c
	}
	s.putConsumer(id, con)
	return nil
}

// readConsumers reads every consumer for a full pass, from their
// buckets, up to 8 at once (the pages are round-trip bound). Each bucket
// is read with one HSCAN cursor, a page after another, and each page is
// decoded by the goroutine that asked for it while the others wait for
// theirs; each consumer is kept in the copy's compact form
// (consumerSet) at once.
func (s *RedisStore) readConsumers(ctx context.Context) ([]numberedConsumer, error) {
	keys := s.keys.consumers[:]
	workers := min(8, len(keys))
	todo := make(chan string, len(keys))
	for _, k := range keys {
		todo <- k
	}
	close(todo)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	outs := make([][]numberedConsumer, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range todo {
				errs[w] = scanHash(ctx, s.cfg.Client, key, s.cfg.PageSize, func(kv []string) error {
					for i := 0; i+1 < len(kv); i += 2 {
						c, err := decodeConsumer(kv[i], kv[i+1])
						if err != nil {
							return err
						}
						outs[w] = append(outs[w], s.cons.numbered(&c))
					}
					return nil
				})
				if errs[w] != nil {
					stop()
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(outs...), nil
}

// putConsumer stores con (nil: deleted) in the copy and re-resolves the
// limits of the consumer's keys, a scan of the index's shards that may
// hold one (for a consumer of one key, 0.4 ms at a million keys; of
// 1000 keys, every shard: about 80 ms), unless nothing that limits them
// changed: a new name, metadata or contexts leave every key's limits as
// they are.
func (s *RedisStore) putConsumer(id string, con *Consumer) {
	s.consMu.Lock()
	defer s.consMu.Unlock()
	old, had := s.cons.get(id)
	s.cons.set(id, con)
	if had && con != nil && sameLimits(&old, con) {
		return
	}
	now := time.Now()
	s.idx.update(id, func(r Record) Record { return s.limits.resolveFor(r, con, now) })
}

// sameLimits reports whether a and b, two versions of a consumer, give
// its keys the same limits: whatever Subject takes from a consumer is
// equal.
func sameLimits(a, b *Consumer) bool {
	return reflect.DeepEqual(Subject(Record{}, a), Subject(Record{}, b))
}

// writeConsumers runs write, which queues writes of consumers into
// their buckets, in one pipeline.
func (a *RedisAdmin) writeConsumers(ctx context.Context, write func(p redis.Pipeliner)) error {
	_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		write(p)
		return nil
	})
	return err
}

// consumerHash runs f in an optimistic transaction on the bucket that
// holds the consumer with id; f gets the bucket's key. A transaction
// that another admin's change made fail is tried again, up to
// maxChangeTries times.
func (a *RedisAdmin) consumerHash(ctx context.Context, id string, f func(tx *redis.Tx, key string) error) error {
	bucket := a.keys().consumersOf(id)
	var err error
	for range maxChangeTries {
		err = a.Client.Watch(ctx, func(tx *redis.Tx) error { return f(tx, bucket) }, bucket)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return err
}

// writeKey stores a new key record whose id must be unused; a key of a
// consumer needs the consumer to exist and to allow the key's context.
// The record and the consumer live in different Cluster slots, so the
// check and the write are not one transaction: a consumer deleted at the
// very moment a key is issued to it leaves a key whose consumer counts as
// none (its limits fall back to the key's own).
func (a *RedisAdmin) writeKey(ctx context.Context, rec Record) error {
	if rec.Consumer != "" {
		c, err := getConsumer(ctx, a.Client, a.keys(), rec.Consumer)
		if err != nil {
			return err
		}
		if err := CheckKeyForConsumer(c, rec.Context); err != nil {
			return err
		}
	}
	if err := a.writeNew(ctx, rec); err != nil {
		return err
	}
	if err := a.announce(ctx, rec); err != nil {
		return a.withdraw(ctx, rec, err)
	}
	return nil
}

// withdraw revokes rec, a key just stored whose issue failed after (its
// announcement, or the replicas' confirmation, failed): its caller never
// gets the key, and the record says so. It returns cause, with what
// became of the key.
func (a *RedisAdmin) withdraw(ctx context.Context, rec Record, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*a.waitTimeout())
	defer cancel()
	_, err := a.Revoke(ctx, rec.ID)
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return fmt.Errorf("keystore: key %s was stored but its issue failed, and revoking it failed too (%w; nobody holds its key; revoke it): %w", rec.ID, errWithdrawn, errors.Join(cause, err))
	}
	return fmt.Errorf("keystore: key %s was stored but its issue failed; it is revoked and its key was not handed out (%w): %w", rec.ID, errWithdrawn, cause)
}

// errWithdrawn marks the error of an issue whose record was stored and
// then revoked again (withdraw).
var errWithdrawn = errors.New("withdrawn")

// IssueFailedAfterStore reports whether err is the error of an issue
// whose record was stored before it failed: the record (its id in the
// returned Record) is revoked, or must be.
func IssueFailedAfterStore(err error) bool { return errors.Is(err, errWithdrawn) }

// getConsumer reads the consumer with id from its bucket, or
// ErrConsumerNotFound.
func getConsumer(ctx context.Context, c redis.Cmdable, k *redisKeys, id string) (Consumer, error) {
	v, err := c.HGet(ctx, k.consumersOf(id), id).Result()
	if errors.Is(err, redis.Nil) {
		return Consumer{}, fmt.Errorf("consumer %q: %w", id, ErrConsumerNotFound)
	}
	if err != nil {
		return Consumer{}, fmt.Errorf("keystore: %w", err)
	}
	return decodeConsumer(id, v)
}

// UpdateKey applies f to the record of the key with id and stores and
// announces the result; see FileAdmin.UpdateKey.
func (a *RedisAdmin) UpdateKey(ctx context.Context, id string, f func(Record) (Record, error)) (Record, error) {
	var out Record
	err := a.change(ctx, id, func(old Record) ([]Record, error) {
		r, err := updateRecord(old, f)
		out = r
		return []Record{r}, err
	})
	if err != nil {
		return Record{}, err
	}
	return out, nil
}

// CreateConsumer stores a new consumer; its id must be unused.
func (a *RedisAdmin) CreateConsumer(ctx context.Context, c Consumer) error {
	c = NormalizeConsumer(c)
	if err := ValidateConsumer(c); err != nil {
		return err
	}
	v, err := encodeConsumer(c)
	if err != nil {
		return err
	}
	bucket := a.keys().consumersOf(c.ID)
	var set *redis.BoolCmd
	if err := a.writeConsumers(ctx, func(p redis.Pipeliner) { set = p.HSetNX(ctx, bucket, c.ID, v) }); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if !set.Val() {
		return fmt.Errorf("keystore: consumer id %s already in use", c.ID)
	}
	return a.announceConsumer(ctx, c.ID)
}

// ListConsumers returns every consumer, oldest first.
func (a *RedisAdmin) ListConsumers(ctx context.Context) ([]Consumer, error) {
	k := a.keys()
	var cons []Consumer
	// HSCAN may return a field twice (the hash grew during the scan):
	// each consumer is listed once.
	seen := make(map[string]bool)
	for _, key := range k.consumers {
		err := scanHash(ctx, a.Client, key, a.scanCount(), func(kv []string) error {
			for i := 0; i+1 < len(kv); i += 2 {
				if seen[kv[i]] {
					continue
				}
				c, err := decodeConsumer(kv[i], kv[i+1])
				if err != nil {
					return err
				}
				seen[c.ID] = true
				cons = append(cons, c)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	oldestFirst(cons, func(c *Consumer) time.Time { return c.CreatedAt }, func(c *Consumer) string { return c.ID })
	return cons, nil
}

// GetConsumer returns the consumer with id, or ErrConsumerNotFound.
func (a *RedisAdmin) GetConsumer(ctx context.Context, id string) (Consumer, error) {
	return getConsumer(ctx, a.Client, a.keys(), id)
}

// GetConsumers returns the consumers with ids that Redis holds, in the
// order of ids, leaving out those it does not (deleted meanwhile): for
// each PageSize of ids, one pipelined round trip of an HMGET per bucket
// they fall in.
func (a *RedisAdmin) GetConsumers(ctx context.Context, ids []string) ([]Consumer, error) {
	k := a.keys()
	out := make([]Consumer, 0, len(ids))
	for page := range slices.Chunk(ids, a.pageSize()) {
		byBucket := make(map[string][]int) // bucket -> positions in page
		for i, id := range page {
			b := k.consumersOf(id)
			byBucket[b] = append(byBucket[b], i)
		}
		vals := make([]any, len(page))
		cmds := make(map[string]*redis.SliceCmd, len(byBucket))
		_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for b, at := range byBucket {
				fields := make([]string, len(at))
				for j, i := range at {
					fields[j] = page[i]
				}
				cmds[b] = p.HMGet(ctx, b, fields...)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("keystore: %w", err)
		}
		for b, at := range byBucket {
			for j, v := range cmds[b].Val() {
				vals[at[j]] = v
			}
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // not there
			}
			c, err := decodeConsumer(page[i], s)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// UpdateConsumer applies f to the consumer with id and stores and
// announces the result; see FileAdmin.UpdateConsumer.
func (a *RedisAdmin) UpdateConsumer(ctx context.Context, id string, f func(Consumer) (Consumer, error)) (Consumer, error) {
	return a.changeConsumer(ctx, id, func(tx *redis.Tx, k *redisKeys, old Consumer) (Consumer, func(redis.Pipeliner, string), error) {
		c, err := updateConsumer(old, f, a.now())
		if err != nil {
			return Consumer{}, nil, err
		}
		if !slices.Equal(c.Contexts, old.Contexts) {
			if err := a.checkConsumerKeys(ctx, tx, k, c, false); err != nil {
				return Consumer{}, nil, err
			}
		}
		v, err := encodeConsumer(c)
		if err != nil {
			return Consumer{}, nil, err
		}
		return c, func(p redis.Pipeliner, key string) { p.HSet(ctx, key, id, v) }, nil
	})
}

// DeleteConsumer removes the consumer with id; see
// FileAdmin.DeleteConsumer.
func (a *RedisAdmin) DeleteConsumer(ctx context.Context, id string) (Consumer, error) {
	return a.changeConsumer(ctx, id, func(tx *redis.Tx, k *redisKeys, c Consumer) (Consumer, func(redis.Pipeliner, string), error) {
		if err := a.checkConsumerKeys(ctx, tx, k, c, true); err != nil {
			return Consumer{}, nil, err
		}
		return c, func(p redis.Pipeliner, key string) { p.HDel(ctx, key, id) }, nil
	})
}

// changeConsumer reads the consumer with id in a watched transaction on
// its bucket (consumerHash) and passes it to change, which returns the
// consumer to report and the write that stores the change into a hash;
// the write runs in the transaction, and the consumer is then announced.
func (a *RedisAdmin) changeConsumer(ctx context.Context, id string, change func(*redis.Tx, *redisKeys, Consumer) (Consumer, func(redis.Pipeliner, string), error)) (Consumer, error) {
	k := a.keys()
	var out Consumer
	f := func(tx *redis.Tx, key string) error {
		v, err := tx.HGet(ctx, key, id).Result()
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("consumer %q: %w", id, ErrConsumerNotFound)
		}
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		old, err := decodeConsumer(id, v)
		if err != nil {
			return err
		}
		c, write, err := change(tx, k, old)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			write(p, key)
			return nil
		})
		out = c
		return err
	}
	if err := a.consumerHash(ctx, id, f); err != nil {
		return Consumer{}, err
	}
	return out, a.announceConsumer(ctx, id)
}

// checkConsumerKeys is CheckConsumerKeys over the consumer's key records:
// those ConsumerKeys finds, or those a read of every record keeps. Like the issue of a key to
// the consumer, it is not one transaction with the consumer's write (they
// live in different Cluster slots), and the index it reads is as current
// as the change log it follows (milliseconds): a key issued to the
// consumer on another replica a moment before the deletion may be left
// with a consumer that counts as none, as writeKey says.
func (a *RedisAdmin) checkConsumerKeys(ctx context.Context, _ *redis.Tx, k *redisKeys, c Consumer, deleting bool) error {
	var recs []Record
	var err error
	if hs, ok := a.consumerKeys(c.ID); ok {
		recs, err = a.GetHashes(ctx, hs)
	} else {
		recs, err = matchingRecords(ctx, a.Client, k, a.scanCount(), func(r Record) bool { return r.Consumer == c.ID })
	}
	if err != nil {
		return err
	}
	return CheckConsumerKeys(c, recs, a.now(), deleting)
}

func (a *RedisAdmin) consumerKeys(id string) ([]Hash, bool) {
	if a.ConsumerKeys == nil {
		return nil, false
	}
	return a.ConsumerKeys(id)
}

func (a *RedisAdmin) announceConsumer(ctx context.Context, id string) error {
	k := a.keys()
	return a.announceItems(ctx, "consumer", consumerChange+id, k.consumersOf(id))
}

// ImportConsumers stores consumers (from a file keystore) that Redis does
// not hold yet, and reports how many it added and skipped. It writes them
// in pipelined batches of PageSize (HSETNX each: a consumer already there
// is skipped, and a pipeline retried after a timeout writes nothing
// twice), then announces one "re-read everything".
func (a *RedisAdmin) ImportConsumers(ctx context.Context, cons []Consumer) (added, skipped int, err error) {
	if err := ValidateConsumers(cons); err != nil {
		return 0, 0, err
	}
	k := a.keys()
	for start := 0; start < len(cons); start += a.pageSize() {
		batch := cons[start:min(start+a.pageSize(), len(cons))]
		vals := make([]string, len(batch))
		for i, c := range batch {
			if vals[i], err = encodeConsumer(c); err != nil {
				return added, skipped, err
			}
		}
		set := make([]*redis.BoolCmd, len(batch))
		if err := a.writeConsumers(ctx, func(p redis.Pipeliner) {
			for i, c := range batch {
				set[i] = p.HSetNX(ctx, k.consumersOf(c.ID), c.ID, vals[i])
			}
		}); err != nil {
			return added, skipped, fmt.Errorf("keystore: import consumers: %w", err)
		}
		for _, b := range set {
			if b.Val() {
				added++
			} else {
				skipped++
			}
		}
	}
	if added > 0 {
		err = a.AnnounceAll(ctx)
	}
	return added, skipped, err
}
