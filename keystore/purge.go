package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// EndedAt is when r stopped opening anything, as of now: the revocation
// time of a revoked key, the end of grace of a rotated one, the expiry of
// an expired one. ok is false for a key still active at now, and for a
// revoked one whose record holds no revocation time (it ended at a time
// nobody knows).
func (r Record) EndedAt(now time.Time) (t time.Time, ok bool) {
	switch r.StateAt(now) {
	case Revoked:
		return r.RevokedAt, !r.RevokedAt.IsZero()
	case Expired:
		return r.ExpiresAt, !r.ExpiresAt.IsZero()
	}
	return time.Time{}, false
}

// PurgeQuery selects the keys a purge deletes: those that ended (EndedAt
// at Now) before Before.
type PurgeQuery struct {
	Before, Now time.Time
	// Limit bounds the keys of one purge; 0 means no bound.
	Limit int
	// DryRun finds the keys and deletes nothing.
	DryRun bool
}

func (q PurgeQuery) selects(r Record) bool {
	t, ok := r.EndedAt(q.Now)
	return ok && t.Before(q.Before)
}

// PurgeResult is what a purge deleted (or, dry, would delete).
type PurgeResult struct {
	// Keys are the records deleted, oldest first.
	Keys []Record
	// More is true when Limit stopped the purge before the last key it
	// selects.
	More bool
}

// casDelete deletes a hash field if it still holds the value read: a
// record that was changed since (an expiry extended, say) is kept.
var casDelete = redis.NewScript(`if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0`)

// Purge deletes the records of the keys q selects, and their ids, and
// announces them, so that every replica drops them from its index: a
// purged key is an unknown key (401) from then on. It reads every
// record, a page at a time, holding only the selected ones; each is
// deleted only if its record is still the one read (a compare-and-delete
// on its bucket), so a key changed meanwhile stays. Records go a page
// (PageSize) to a round trip, and are announced a page at a time.
func (a *RedisAdmin) Purge(ctx context.Context, q PurgeQuery) (PurgeResult, error) {
	if err := a.migrate(ctx); err != nil {
		return PurgeResult{}, err
	}
	type found struct {
		rec Record
		raw string
	}
	var sel []found
	more := false
	stop := errors.New("limit reached")
	k := a.keys()
	for _, key := range k.records {
		err := scanHash(ctx, a.Client, key, a.scanCount(), func(kv []string) error {
			for i := 0; i+1 < len(kv); i += 2 {
				r, err := decodeRecord(kv[i], kv[i+1])
				if err != nil {
					return err
				}
				if !q.selects(r) {
					continue
				}
				if q.Limit > 0 && len(sel) == q.Limit {
					more = true
					return stop
				}
				sel = append(sel, found{r, kv[i+1]})
			}
			return nil
		})
		if errors.Is(err, stop) {
			break
		}
		if err != nil {
			return PurgeResult{}, err
		}
	}
	var out []Record
	loaded := false
	for start := 0; start < len(sel); start += a.pageSize() {
		page := sel[start:min(start+a.pageSize(), len(sel))]
		if q.DryRun {
			for _, f := range page {
				out = append(out, f.rec)
			}
			continue
		}
		cmds := make([]*redis.Cmd, len(page))
		_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, f := range page {
				cmds[i] = casDelete.EvalSha(ctx, p, []string{k.recordsOf(f.rec.Hash)}, f.rec.Hash.String(), f.raw)
			}
			return nil
		})
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && !loaded {
			// Nothing was deleted: load the script and send the page again.
			loaded = true
			if err = casDelete.Load(ctx, a.Client).Err(); err == nil {
				start -= a.pageSize()
				continue
			}
		}
		if err != nil {
			return PurgeResult{Keys: out}, fmt.Errorf("keystore: purge: %w", err)
		}
		var gone []Record
		_, err = a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, f := range page {
				if cmds[i].Val() == int64(1) {
					gone = append(gone, f.rec)
					p.HDel(ctx, k.idsOf(f.rec.ID), f.rec.ID)
				}
			}
			return nil
		})
		if err != nil {
			return PurgeResult{Keys: out}, fmt.Errorf("keystore: purge: ids of deleted records: %w", err)
		}
		if len(gone) > 0 {
			if err := a.announce(ctx, gone...); err != nil {
				return PurgeResult{Keys: append(out, gone...)}, err
			}
		}
		out = append(out, gone...)
	}
	oldestFirst(out, func(r *Record) time.Time { return r.CreatedAt }, func(r *Record) string { return r.ID })
	return PurgeResult{Keys: out, More: more}, nil
}

// Purge deletes the records of the keys q selects from the file, under
// its lock; replicas drop them at their next reload.
func (a *FileAdmin) Purge(ctx context.Context, q PurgeQuery) (PurgeResult, error) {
	var res PurgeResult
	pick := func(recs []Record) []Record {
		var kept []Record
		for _, r := range recs {
			if !q.selects(r) {
				kept = append(kept, r)
			} else if q.Limit > 0 && len(res.Keys) == q.Limit {
				res.More = true
				kept = append(kept, r)
			} else {
				res.Keys = append(res.Keys, r)
			}
		}
		return kept
	}
	if q.DryRun {
		recs, err := a.List(ctx)
		if err != nil {
			return PurgeResult{}, err
		}
		pick(recs)
	} else {
		err := a.update(ctx, func(recs []Record) ([]Record, error) {
			res = PurgeResult{}
			kept := pick(recs)
			if len(res.Keys) == 0 {
				return nil, errUnchanged
			}
			return kept, nil
		})
		if errors.Is(err, errUnchanged) {
			err = nil
		}
		if err != nil {
			return PurgeResult{}, err
		}
	}
	oldestFirst(res.Keys, func(r *Record) time.Time { return r.CreatedAt }, func(r *Record) string { return r.ID })
	return res, nil
}

// errUnchanged makes FileAdmin.update leave the file as it is.
var errUnchanged = errors.New("keystore: nothing to change")
