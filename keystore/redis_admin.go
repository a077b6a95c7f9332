package keystore

// The Redis keystore's write side: RedisAdmin, the transactions that
// change records and announce each change.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// RedisAdmin changes the Redis keystore for the `keygate keys` command and
// announces every change, so running gateways see it within a second.
// A change to a record is an optimistic compare-and-set of its field in
// the record's bucket (a Lua script, a single Cluster slot). A rotation
// first stores the replacement (it is not announced, and nobody holds
// its key yet) and then rotates the old record; if that fails, it
// deletes the replacement again. It is safe for concurrent use; its fields must not
// change after its first use.
type RedisAdmin struct {
	Client redis.UniversalClient
	// Prefix starts every Redis key; default "keygate:".
	Prefix string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PageSize is the size of each pipelined batch (an import's, the
	// reads by hash, a purge's deletes); default 1000. Each HSCAN asks for
	// at most scanCount records, whatever it is.
	PageSize int
	// ConsumerKeys, when set (a replica's RedisStore.ConsumerKeys),
	// finds a consumer's keys for the checks of its update and deletion,
	// which then read those records alone (GetHashes) instead of every
	// record; when it cannot tell (ok false), they read every record.
	ConsumerKeys func(consumer string) (hs []Hash, ok bool)
	// WaitReplicas is how many Redis replicas must confirm a change (Redis
	// WAIT) before it is answered: at most as many as are connected to
	// the primary, so a standalone Redis waits for none. 0 waits for
	// none. See ack.
	WaitReplicas int
	// WaitTimeout bounds each WAIT; default DefaultWaitTimeout. A change
	// not confirmed in time returns an error wrapping ErrNotDurable: an
	// issue's key is revoked again (its caller never gets it); a
	// revocation, rotation or other change stays stored on the primary
	// and every replica of keygate that saw it enforces it (see
	// RedisStore's tombstones), but a failover may lose it in Redis, so
	// the caller should repeat it.
	WaitTimeout time.Duration
	// OnWaitTimeout, when set, is called with the kind of change whenever
	// a WAIT times out (a metric).
	OnWaitTimeout func(change string)
	// Logger receives the warnings of changes not confirmed in time; nil
	// means none.
	Logger *zap.Logger

	keysOnce      sync.Once
	keysV         *redisKeys
	decodedTokens tokenDecodings
}

// RedisClient is the client the admin writes with, for what shares its
// Redis (the audit stream, the token endpoint's signing keys).
func (a *RedisAdmin) RedisClient() redis.UniversalClient { return a.Client }

func (a *RedisAdmin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *RedisAdmin) keys() *redisKeys {
	a.keysOnce.Do(func() { a.keysV = newRedisKeys(a.Prefix) })
	return a.keysV
}

func (a *RedisAdmin) pageSize() int {
	if a.PageSize > 0 {
		return a.PageSize
	}
	return 1000
}

// scanCount is the COUNT of the admin's HSCANs: PageSize, at most
// maxScanCount.
func (a *RedisAdmin) scanCount() int { return min(a.pageSize(), maxScanCount) }

// maxScanCount bounds an admin HSCAN's COUNT as a replica's full pass is
// bounded (RedisConfig.PageSize): a page of 1000 records of a
// million-key set, a reply of about 300 KB, keeps redis-server busy for
// milliseconds per HSCAN (SLOWLOG over a `keys purge` of a million keys
// filled by bench/keyload), while every replica's limiter calls wait
// behind it.
const maxScanCount = 100

// Issue creates a key and stores its record.
func (a *RedisAdmin) Issue(ctx context.Context, req IssueRequest) (string, Record, error) {
	key, rec, err := NewRecord(req, a.now())
	if err != nil {
		return "", Record{}, err
	}
	if err := a.writeKey(ctx, rec); err != nil {
		if errors.Is(err, errWithdrawn) {
			// The record was stored: its id goes to the audit log.
			return "", Record{ID: rec.ID}, err
		}
		return "", Record{}, err
	}
	return key, rec, nil
}

// List returns every record, oldest first.
func (a *RedisAdmin) List(ctx context.Context) ([]Record, error) {
	return a.ListMatching(ctx, func(Record) bool { return true })
}

// ListMatching returns the records keep accepts, oldest first, reading
// every record a page at a time but holding only those it keeps.
func (a *RedisAdmin) ListMatching(ctx context.Context, keep func(Record) bool) ([]Record, error) {
	recs, err := matchingRecords(ctx, a.Client, a.keys(), a.scanCount(), keep)
	if err != nil {
		return nil, err
	}
	oldestFirst(recs, func(r *Record) time.Time { return r.CreatedAt }, func(r *Record) string { return r.ID })
	return recs, nil
}

// Get returns the record of the key with id, or an error wrapping
// ErrNotFound: two HGETs (the id index, then the record's bucket), never a
// read of the key set.
func (a *RedisAdmin) Get(ctx context.Context, id string) (Record, error) {
	k := a.keys()
	hs, err := a.Client.HGet(ctx, k.idsOf(id), id).Result()
	if errors.Is(err, redis.Nil) {
		return Record{}, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("keystore: %w", err)
	}
	h, err := ParseHash(hs)
	if err != nil {
		return Record{}, fmt.Errorf("keystore: id index of %s: %w", id, err)
	}
	v, err := a.Client.HGet(ctx, k.recordsOf(h), hs).Result()
	if errors.Is(err, redis.Nil) {
		return Record{}, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("keystore: %w", err)
	}
	return decodeRecord(hs, v)
}

// GetHashes returns the records of the keys whose hashes are hs, oldest
// first; a hash with no record is left out. It reads a page of records at
// a time (one pipeline of HGETs, each from the record's bucket), never the
// key set: a consumer's keys, out of a million.
func (a *RedisAdmin) GetHashes(ctx context.Context, hs []Hash) ([]Record, error) {
	k := a.keys()
	out := make([]Record, 0, len(hs))
	for page := range slices.Chunk(hs, a.pageSize()) {
		cmds := make([]*redis.StringCmd, len(page))
		_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, h := range page {
				cmds[i] = p.HGet(ctx, k.recordsOf(h), h.String())
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("keystore: %w", err)
		}
		for i, c := range cmds {
			v, err := c.Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("keystore: %w", err)
			}
			r, err := decodeRecord(page[i].String(), v)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	oldestFirst(out, func(r *Record) time.Time { return r.CreatedAt }, func(r *Record) string { return r.ID })
	return out, nil
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

// Count returns how many key records Redis holds: an HLEN of each
// bucket, in one pipeline, without reading a record.
func (a *RedisAdmin) Count(ctx context.Context) (int, error) {
	k := a.keys()
	var lens []*redis.IntCmd
	_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, key := range k.records {
			lens = append(lens, p.HLen(ctx, key))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("keystore: %w", err)
	}
	n := 0
	for _, l := range lens {
		n += int(l.Val())
	}
	return n, nil
}

// Import stores records (from a file keystore) that Redis does not hold
// yet, and reports how many it added and skipped. It writes them in
// pipelined batches of PageSize and announces one "re-read everything"
// at the end; ImportBatch does one batch without announcing.
func (a *RedisAdmin) Import(ctx context.Context, recs []Record) (added, skipped int, err error) {
	if err := ValidateRecords(recs); err != nil {
		return 0, 0, err
	}
	for start := 0; start < len(recs); start += a.pageSize() {
		ad, sk, err := a.ImportBatch(ctx, recs[start:min(start+a.pageSize(), len(recs))])
		added, skipped = added+ad, skipped+sk
		if err != nil {
			return added, skipped, err
		}
	}
	return added, skipped, a.AnnounceAll(ctx)
}

// ImportBatch stores the records of one batch that Redis does not hold
// yet (by id or by hash) in two pipelined round trips (the second only
// writes, and may be retried), and reports how
// many it added and skipped. It does not announce them: call AnnounceAll
// after the last batch. Each record must be valid (ValidateRecord); ids
// and hashes must be unique within the batch.
func (a *RedisAdmin) ImportBatch(ctx context.Context, recs []Record) (added, skipped int, err error) {
	k := a.keys()
	vals := make([]string, len(recs))
	for i, r := range recs {
		if err := ValidateRecord(r); err != nil {
			return 0, 0, fmt.Errorf("keystore: import %s: %w", r.ID, err)
		}
		if vals[i], err = encodeRecord(r); err != nil {
			return 0, 0, err
		}
	}
	// Which ids and hashes are there already. Every write below is
	// idempotent, so that a client that retries a pipeline after a
	// timeout (its first try may have run) writes the same thing twice.
	ids := make([]*redis.StringCmd, len(recs))
	there := make([]*redis.BoolCmd, len(recs))
	_, err = a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range recs {
			ids[i] = p.HGet(ctx, k.idsOf(r.ID), r.ID)
			there[i] = p.HExists(ctx, k.recordsOf(r.Hash), r.Hash.String())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("keystore: import: %w", err)
	}
	_, err = a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range recs {
			hs := r.Hash.String()
			idFree := errors.Is(ids[i].Err(), redis.Nil)
			if there[i].Val() || !idFree && ids[i].Val() != hs {
				skipped++
				continue
			}
			p.HSet(ctx, k.recordsOf(r.Hash), hs, vals[i])
			p.HSet(ctx, k.idsOf(r.ID), r.ID, hs)
			added++
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("keystore: import: %w", err)
	}
	return added, skipped, nil
}

// AnnounceAll tells every replica to re-read the whole keystore (after
// an import).
func (a *RedisAdmin) AnnounceAll(ctx context.Context) error {
	k := a.keys()
	return a.announceItems(ctx, "import", "*", slices.Concat(k.records[:], k.ids[:], k.consumers[:])...)
}

// casRecord sets field ARGV[1] of the hash KEYS[1] to ARGV[3] if it
// still holds ARGV[2], and returns 1; otherwise (another change came
// first) it changes nothing and returns 0.
var casRecord = redis.NewScript(`if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0`)

// maxChangeTries bounds the retries of a change that keeps losing to
// others on the same record.
const maxChangeTries = 20

// change applies f to the record with id and announces the records it
// returns. f returns the record itself, changed, first; any further
// records are new (a replacement) and are stored before the record is
// changed, and deleted again if that fails. The record is changed by a
// compare-and-set (casRecord, one EVALSHA on its bucket's slot): if
// another change came between the read and the write, f runs again on
// the newer record. Only a change of the same record conflicts, and it
// costs two round trips where WATCH, MULTI and EXEC on the bucket took
// three.
func (a *RedisAdmin) change(ctx context.Context, id string, f func(Record) ([]Record, error)) error {
	k := a.keys()
	hs, err := a.Client.HGet(ctx, k.idsOf(id), id).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	h, err := ParseHash(hs)
	if err != nil {
		return fmt.Errorf("keystore: id index of %s: %w", id, err)
	}
	bucket := k.recordsOf(h)
	for range maxChangeTries {
		changed, done, err := a.changeOnce(ctx, id, bucket, h, f)
		if err != nil {
			return err
		}
		if done {
			return a.announce(ctx, changed...)
		}
	}
	return redis.TxFailedErr
}

// changeOnce is one try of change: done is false when another change of
// the record came first.
func (a *RedisAdmin) changeOnce(ctx context.Context, id, bucket string, h Hash, f func(Record) ([]Record, error)) (changed []Record, done bool, err error) {
	hs := h.String()
	v, err := a.Client.HGet(ctx, bucket, hs).Result()
	if err != nil {
		return nil, false, fmt.Errorf("keystore: record of %s: %w", id, err)
	}
	old, err := decodeRecord(hs, v)
	if err != nil {
		return nil, false, err
	}
	if changed, err = f(old); err != nil {
		return nil, false, err
	}
	if changed[0].Hash != h {
		return nil, false, fmt.Errorf("keystore: change of %s changed its hash", id)
	}
	if err := ValidateRecord(changed[0]); err != nil {
		return nil, false, err
	}
	nv, err := encodeRecord(changed[0])
	if err != nil {
		return nil, false, err
	}
	var created []Record
	defer func() {
		if !done && len(created) > 0 {
			a.deleteNew(context.WithoutCancel(ctx), created)
		}
	}()
	for _, r := range changed[1:] {
		if err := a.writeNew(ctx, r); err != nil {
			return nil, false, err
		}
		created = append(created, r)
	}
	set, err := casRecord.Run(ctx, a.Client, []string{bucket}, hs, v, nv).Int()
	if err != nil {
		return nil, false, fmt.Errorf("keystore: %w", err)
	}
	return changed, set == 1, nil
}

// writeNew stores a new record whose id must be unused: it claims the id
// in the id index (HSETNX) and stores the record, in one pipeline (one
// round trip; on a Cluster, the two go to their slots' nodes at once).
// If the id turns out to be another record's, it deletes the record
// again: nobody holds its key, and it was not announced. If either
// write failed, it undoes the other.
func (a *RedisAdmin) writeNew(ctx context.Context, r Record) error {
	if err := ValidateRecord(r); err != nil {
		return err
	}
	v, err := encodeRecord(r)
	if err != nil {
		return err
	}
	k := a.keys()
	hs := r.Hash.String()
	var claim *redis.BoolCmd
	var store *redis.IntCmd
	_, err = a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		claim = p.HSetNX(ctx, k.idsOf(r.ID), r.ID, hs)
		store = p.HSet(ctx, k.recordsOf(r.Hash), hs, v)
		return nil
	})
	undo := context.WithoutCancel(ctx)
	if err != nil {
		if claim.Err() == nil && claim.Val() {
			_ = a.Client.HDel(undo, k.idsOf(r.ID), r.ID).Err()
		}
		if store.Err() == nil {
			_ = a.Client.HDel(undo, k.recordsOf(r.Hash), hs).Err()
		}
		return fmt.Errorf("keystore: %w", err)
	}
	if !claim.Val() {
		// Ours after all when a retry of HSETNX found its own first try.
		if got, err := a.Client.HGet(ctx, k.idsOf(r.ID), r.ID).Result(); err != nil || got != hs {
			_ = a.Client.HDel(undo, k.recordsOf(r.Hash), hs).Err()
			return fmt.Errorf("keystore: id %s already in use", r.ID)
		}
	}
	return nil
}

// deleteNew removes records that writeNew stored, when the change they
// belong to failed. Nobody was given their keys.
func (a *RedisAdmin) deleteNew(ctx context.Context, recs []Record) {
	k := a.keys()
	_, _ = a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range recs {
			p.HDel(ctx, k.recordsOf(r.Hash), r.Hash.String())
			p.HDel(ctx, k.idsOf(r.ID), r.ID)
		}
		return nil
	})
}

func (a *RedisAdmin) announce(ctx context.Context, recs ...Record) error {
	k := a.keys()
	hs := make([]string, len(recs))
	touched := make([]string, 0, 2*len(recs))
	for i, r := range recs {
		hs[i] = r.Hash.String()
		touched = append(touched, k.recordsOf(r.Hash), k.idsOf(r.ID))
	}
	return a.announceItems(ctx, "key", strings.Join(hs, ","), touched...)
}

// announceItems appends a change to the log, where replicas catch up
// from, and publishes it, which wakes them at once: both in one round
// trip (a pipeline, XADD first). A PUBLISH whose XADD failed wakes the
// replicas for nothing: they find no new entry in the log. Then it
// waits for the Redis replicas of the log's primary and of the primaries
// of touched, the keys the change wrote (ack).
func (a *RedisAdmin) announceItems(ctx context.Context, what, items string, touched ...string) error {
	k := a.keys()
	var xadd *redis.StringCmd
	_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		xadd = p.XAdd(ctx, &redis.XAddArgs{Stream: k.log, MaxLen: redisLogLen, Approx: true, Values: []string{"c", items}})
		p.Publish(ctx, k.channel, items)
		return nil
	})
	if xadd != nil && xadd.Err() != nil {
		err = xadd.Err() // the one that matters
	}
	if err != nil {
		return fmt.Errorf("keystore: change stored but not announced (replicas pick it up at their next full resync): %w", err)
	}
	return a.ack(ctx, what, append([]string{k.log}, touched...)...)
}

// scanHash pages through the hash key with HSCAN COUNT count, calling f
// with each page's fields and values (field, value, field, …).
func scanHash(ctx context.Context, c redis.Cmdable, key string, count int, f func(kv []string) error) error {
	var cursor uint64
	for {
		kv, next, err := c.HScan(ctx, key, cursor, "", int64(count)).Result()
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		if len(kv) > 0 {
			if err := f(kv); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
