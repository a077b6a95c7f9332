package keystore

// What a Redis keystore replica checks in what it reads back: a
// revocation it has seen is never undone by a re-read (tombstones), and a
// Redis that lost its data is a fault, not the truth (the epoch and the
// drop check), repaired by writing back what the replica holds.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// tomb is what a replica remembers of a key it has seen ended: its id and
// how far it ended. A key's tomb is kept for as long as the replica runs
// (about 100 bytes each, with the map's slot), also after the record is
// purged.
type tomb struct {
	id    string
	end   uint8 // endRotated or endRevoked
	until int64 // a rotated key's end of grace, Unix seconds
}

const (
	endNone uint8 = iota
	endRotated
	endRevoked
)

// endOf is how far r has ended by its stored status: a rotation and a
// revocation are one-way (an expiry is not: an update may extend it).
func endOf(r Record) uint8 {
	switch r.Status {
	case Active:
		return endNone
	case Rotated:
		return endRotated
	default:
		return endRevoked
	}
}

// tombs is the set of keys a replica has seen rotated or revoked, in
// shards by the hash's first byte. The zero value is ready; it is safe for
// concurrent use. It is read only where a record is applied (a re-read, a
// change, a lookup miss), never on the request path's index hit.
type tombs struct {
	shards [16]struct {
		mu sync.Mutex
		m  map[Hash]tomb
	}
}

// check records r's end, or, when a tomb says r's key has ended further
// than r says, returns r as the tomb has it and blocked true.
func (t *tombs) check(r Record) (out Record, blocked bool) {
	sh := &t.shards[r.Hash[0]&15]
	end := endOf(r)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, ok := sh.m[r.Hash]
	if ok && end < old.end {
		out = r
		out.Status = Revoked
		if old.end == endRotated {
			out.Status, out.ExpiresAt = Rotated, time.Unix(old.until, 0).UTC()
		}
		return out, true
	}
	if end > endNone && (!ok || end > old.end) {
		if sh.m == nil {
			sh.m = make(map[Hash]tomb)
		}
		var until int64
		if end == endRotated {
			until = r.ExpiresAt.Unix()
		}
		sh.m[r.Hash] = tomb{id: r.ID, end: end, until: until}
	}
	return r, false
}

// guard is put's check of rec against the tombs: a record that would
// reinstate a key this replica saw rotated or revoked is served as the
// tomb has it, logged, counted (OnBlocked) and queued to be written back.
func (s *RedisStore) guard(rec Record) Record {
	out, blocked := s.tombs.check(rec)
	if !blocked {
		return rec
	}
	s.log.Warn("keystore: a re-read of Redis would reinstate a key this replica saw ended; it stays ended and is written back to Redis",
		zap.String("key_id", rec.ID), zap.String("read_status", string(rec.Status)), zap.String("kept_status", string(out.Status)))
	if s.cfg.OnBlocked != nil {
		s.cfg.OnBlocked(out)
	}
	s.wbMu.Lock()
	s.writeBack = append(s.writeBack, out)
	s.wbMu.Unlock()
	s.signal(s.wake)
	return out
}

// flushWriteBack writes the records that guard kept ended back to Redis:
// each only if Redis still holds it less ended (a compare-and-set), or
// holds none; then announces them. Owned by syncLoop.
func (s *RedisStore) flushWriteBack() {
	s.wbMu.Lock()
	recs := s.writeBack
	s.writeBack = nil
	s.wbMu.Unlock()
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.pageTimeout())
	defer cancel()
	n, err := s.restoreRecords(ctx, recs)
	if err != nil {
		s.log.Warn("keystore: writing ended keys back to Redis failed; retrying", zap.Error(err))
		s.wbMu.Lock()
		s.writeBack = append(s.writeBack, recs...)
		s.wbMu.Unlock()
		return
	}
	s.log.Info("keystore: wrote ended keys back to Redis", zap.Int("keys", n))
}

// restoreRecords writes recs to Redis where Redis holds them less ended
// (a compare-and-set of the stored record to it, with its other fields as
// Redis has them) or not at all (HSETNX of the record and its id), and
// announces the hashes it changed. It returns how many it changed.
func (s *RedisStore) restoreRecords(ctx context.Context, recs []Record) (int, error) {
	c := s.cfg.Client
	changed := make([]string, 0, len(recs))
	for start := 0; start < len(recs); start += s.cfg.PageSize {
		page := recs[start:min(start+s.cfg.PageSize, len(recs))]
		cur := make([]*redis.StringCmd, len(page))
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range page {
				cur[i] = p.HGet(ctx, s.keys.recordsOf(r.Hash), r.Hash.String())
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		// The records Redis lacks: stored in one pipeline (HSETNX, so
		// that nothing written meanwhile is overwritten).
		var missing []Record
		var sets []*redis.BoolCmd
		for i, r := range page {
			if errors.Is(cur[i].Err(), redis.Nil) {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			sets = make([]*redis.BoolCmd, len(missing))
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, r := range missing {
					nv, err := encodeRecord(r)
					if err != nil {
						return err
					}
					sets[i] = p.HSetNX(ctx, s.keys.recordsOf(r.Hash), r.Hash.String(), nv)
					p.HSetNX(ctx, s.keys.idsOf(r.ID), r.ID, r.Hash.String())
				}
				return nil
			}); err != nil {
				return 0, err
			}
			for i, b := range sets {
				if b.Val() {
					changed = append(changed, missing[i].Hash.String())
				}
			}
		}
		// The records Redis holds less ended: a compare-and-set each
		// (few: revocations it lost).
		for i, r := range page {
			v, err := cur[i].Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return 0, err
			}
			hs := r.Hash.String()
			stored, err := decodeRecord(hs, v)
			if err != nil || endOf(stored) >= endOf(r) {
				continue
			}
			stored.Status, stored.ExpiresAt = r.Status, r.ExpiresAt
			if stored.Status == Revoked && stored.RevokedAt.IsZero() {
				stored.RevokedAt = stamp(time.Now())
			}
			nv, err := encodeRecord(stored)
			if err != nil {
				return 0, err
			}
			set, err := casRecord.Run(ctx, c, []string{s.keys.recordsOf(r.Hash)}, hs, v, nv).Int()
			if err != nil {
				return 0, err
			}
			if set == 1 {
				changed = append(changed, hs)
			}
		}
	}
	if len(changed) == 0 {
		return 0, nil
	}
	items := strings.Join(changed, ",")
	if len(changed) > s.cfg.PageSize {
		items = "*" // a repair: every replica re-reads everything
	}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.keys.log, MaxLen: redisLogLen, Approx: true, Values: []string{"c", items}})
		p.Publish(ctx, s.keys.channel, items)
		return nil
	})
	return len(changed), err
}

// newEpoch makes a keystore epoch: random, and when it was made.
func newEpoch(now time.Time) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "@" + now.UTC().Format(time.RFC3339)
}

// repairEpoch is the epoch a replica sets (SET NX) when it repairs a
// store that lost the epoch old; it names old, for the operator.
func repairEpoch(old string, now time.Time) string {
	return newEpoch(now) + " repairs " + epochID(old)
}

// epochID is the epoch's own part, without what it repairs.
func epochID(e string) string {
	id, _, _ := strings.Cut(e, " repairs ")
	return id
}

// DataLoss is why the store runs on its last good set because Redis lost
// data, or "" while it does not.
func (s *RedisStore) DataLoss() string {
	if p := s.dataLoss.Load(); p != nil {
		return *p
	}
	return ""
}

func (s *RedisStore) setDataLoss(reason string) {
	if reason == "" {
		if s.dataLoss.Swap(nil) != nil {
			s.log.Warn("keystore: Redis repaired; serving from it again")
		}
		return
	}
	if old := s.dataLoss.Swap(&reason); old == nil || *old != reason {
		if s.cfg.OnDataLoss != nil {
			s.cfg.OnDataLoss(reason)
		}
		what := "serving the last good set of keys"
		if s.cfg.FailClosed {
			what = "answering 503 for every key (keystore.on_data_loss: fail_closed)"
		}
		s.log.Error("keystore: Redis lost keystore data; "+what+" and writing back what this replica holds (keys, revocations, consumers, admin tokens). "+
			"If Redis was replaced on purpose, restart every replica; otherwise check Redis persistence (appendonly) and replication",
			zap.String("reason", reason), zap.Int("keys_held", s.idx.len()))
	}
}

// checkEpoch compares Redis' epoch cur ("" for none) with the one this
// replica holds, at the start of a full pass. It adopts (or makes) the
// epoch on the first pass. On a store whose epoch is gone it sets a
// repair epoch (SET NX: of replicas that notice at once, one sets it and
// all adopt it) and repairs the store; on one whose epoch changed (another
// replica repaired it, or a replica that started meanwhile made a new
// one) it repairs the store too: every replica that held the old epoch
// writes back what it holds, so the store gets the union, revocations
// winning. Owned by syncLoop.
func (s *RedisStore) checkEpoch(ctx context.Context, cur string) error {
	k := s.keys.epoch
	switch {
	case s.epoch == "" && cur == "":
		e := newEpoch(time.Now())
		if err := s.cfg.Client.SetNX(ctx, k, e, 0).Err(); err != nil {
			return err
		}
		got, err := s.cfg.Client.Get(ctx, k).Result()
		if err != nil {
			return err
		}
		s.epoch = got
	case s.epoch == "" || cur == s.epoch:
		s.epoch = cur
	case cur == "":
		s.setDataLoss("Redis holds no keystore epoch: it came back empty or was replaced")
		if err := s.cfg.Client.SetNX(ctx, k, repairEpoch(s.epoch, time.Now()), 0).Err(); err != nil {
			return err
		}
		got, err := s.cfg.Client.Get(ctx, k).Result()
		if err != nil {
			return err
		}
		return s.repair(got)
	default:
		s.setDataLoss("the keystore epoch in Redis changed: Redis lost its data and another replica repaired or re-initialized it")
		return s.repair(cur)
	}
	return nil
}

// repair writes back every key, consumer and admin token this replica
// holds that Redis lacks, revocations winning over what Redis holds, then
// adopts the epoch e and lets the full pass go on.
func (s *RedisStore) repair(e string) error {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	started := time.Now()
	var recs []Record
	s.idx.each(func(h Hash, en *entry) {
		r := s.idx.record(h, en)
		r.CreatedAt = time.Unix(int64(en.created), 0).UTC()
		r.Limits = nil
		recs = append(recs, r)
	})
	n, err := s.restoreRecords(ctx, recs)
	if err != nil {
		return fmt.Errorf("keystore: repair: %w", err)
	}
	var cons []Consumer
	s.cons.each(func(c *Consumer) { cons = append(cons, *c) })
	nc := 0
	for start := 0; start < len(cons); start += s.cfg.PageSize {
		batch := cons[start:min(start+s.cfg.PageSize, len(cons))]
		set := make([]*redis.BoolCmd, len(batch))
		if _, err := s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range batch {
				v, err := encodeConsumer(c)
				if err != nil {
					return err
				}
				set[i] = p.HSetNX(ctx, s.keys.consumersOf(c.ID), c.ID, v)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("keystore: repair: %w", err)
		}
		for _, b := range set {
			if b.Val() {
				nc++
			}
		}
	}
	nt, err := s.restoreAdminTokens(ctx)
	if err != nil {
		return fmt.Errorf("keystore: repair: %w", err)
	}
	s.epoch = e
	s.log.Warn("keystore: wrote back to Redis what this replica held", zap.Int("keys", n), zap.Int("consumers", nc),
		zap.Int("admin_tokens", nt), zap.Duration("took", time.Since(started)))
	s.setDataLoss("")
	return nil
}

// restoreAdminTokens writes back the admin tokens the replica read at its
// last full pass: each that Redis lacks, and a revocation over a token
// Redis holds unrevoked.
func (s *RedisStore) restoreAdminTokens(ctx context.Context) (int, error) {
	s.wbMu.Lock()
	toks := s.adminTokens
	s.wbMu.Unlock()
	n := 0
	for hs, v := range toks {
		t, err := decodeAdminToken(hs, v)
		if err != nil {
			continue
		}
		cur, err := s.cfg.Client.HGet(ctx, s.keys.adminTokens, hs).Result()
		switch {
		case errors.Is(err, redis.Nil):
			if _, err := s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.HSetNX(ctx, s.keys.adminTokens, hs, v)
				p.HSetNX(ctx, s.keys.adminTokenIDs, t.ID, hs)
				return nil
			}); err != nil {
				return n, err
			}
			n++
		case err != nil:
			return n, err
		default:
			ct, err := decodeAdminToken(hs, cur)
			if err == nil && !t.RevokedAt.IsZero() && ct.RevokedAt.IsZero() {
				if _, err := casRecord.Run(ctx, s.cfg.Client, []string{s.keys.adminTokens}, hs, cur, v).Result(); err != nil {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}

// readAdminTokens keeps a copy of the admin tokens (a handful: one
// HSCAN), for a repair.
func (s *RedisStore) readAdminTokens(ctx context.Context) error {
	toks := map[string]string{}
	err := scanHash(ctx, s.cfg.Client, s.keys.adminTokens, s.cfg.PageSize, func(kv []string) error {
		for i := 0; i+1 < len(kv); i += 2 {
			toks[kv[i]] = kv[i+1]
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.wbMu.Lock()
	s.adminTokens = toks
	s.wbMu.Unlock()
	return nil
}

// bigDrop reports whether a full pass that would remove stale of held
// keys removes most of them: more than half, and at least minDrop.
func bigDrop(stale, held int) bool {
	return stale >= minDrop && 2*stale > held
}

// minDrop is the fewest keys whose disappearance counts as a store that
// lost data: a small store may lose half its few keys to an operator's
// purge of a test.
const minDrop = 10
