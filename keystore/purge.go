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

// casDelete deletes a hash field if it still holds the value read: a
// record that was changed since (an expiry extended, say) is kept.
var casDelete = redis.NewScript(`if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0`)

// Purge deletes the records of the keys q selects, and their ids, and
// announces them, so that every replica drops them from its index: a
// purged key is an unknown key (401) from then on. It reads every record
// once, a page at a time, and deletes the selected ones as it goes, a
// batch of PageSize at a time: each is deleted only if its record is
// still the one read (a compare-and-delete on its bucket), so a key
// changed meanwhile stays. After each batch it calls each with the
// records it deleted (with q.DryRun: selected, and deleted nothing); an
// error from each stops the purge. more is true when q.Limit stopped it
// before the last key it selects.
func (a *RedisAdmin) Purge(ctx context.Context, q PurgeQuery, each func([]Record) error) (more bool, err error) {
	k := a.keys()
	var pending []purgeCandidate
	selected := 0
	loaded := false
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		batch := pending
		pending = nil
		if q.DryRun {
			recs := make([]Record, len(batch))
			for i, f := range batch {
				recs[i] = f.rec
			}
			return each(recs)
		}
		gone, err := a.deleteUnchanged(ctx, batch, &loaded)
		if len(gone) > 0 {
			if aerr := a.announce(ctx, gone...); aerr != nil && err == nil {
				err = aerr
			}
			if eerr := each(gone); eerr != nil && err == nil {
				err = eerr
			}
		}
		return err
	}
	stop := errors.New("limit reached")
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
				if q.Limit > 0 && selected == q.Limit {
					more = true
					return stop
				}
				selected++
				pending = append(pending, purgeCandidate{r, kv[i+1]})
				if len(pending) == a.pageSize() {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if errors.Is(err, stop) {
			break
		}
		if err != nil {
			return false, err
		}
	}
	return more, flush()
}

// purgeCandidate is a record a purge selected, with its value as read.
type purgeCandidate struct {
	rec Record
	raw string
}

// deleteUnchanged deletes the records of batch that still hold the value
// read, and then their ids, in two round trips; it returns those it
// deleted.
func (a *RedisAdmin) deleteUnchanged(ctx context.Context, batch []purgeCandidate, loaded *bool) ([]Record, error) {
	k := a.keys()
	cmds := make([]*redis.Cmd, len(batch))
	for {
		_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, f := range batch {
				cmds[i] = casDelete.EvalSha(ctx, p, []string{k.recordsOf(f.rec.Hash)}, f.rec.Hash.String(), f.raw)
			}
			return nil
		})
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && !*loaded {
			// Nothing was deleted: load the script and send the batch again.
			*loaded = true
			if err = casDelete.Load(ctx, a.Client).Err(); err == nil {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("keystore: purge: %w", err)
		}
		break
	}
	var gone []Record
	_, err := a.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, f := range batch {
			if cmds[i].Val() == int64(1) {
				gone = append(gone, f.rec)
				p.HDel(ctx, k.idsOf(f.rec.ID), f.rec.ID)
			}
		}
		return nil
	})
	if err != nil {
		return gone, fmt.Errorf("keystore: purge: ids of deleted records: %w", err)
	}
	return gone, nil
}

// Purge deletes the records of the keys q selects from the file, under
// its lock, and then calls each once with them (with q.DryRun: selected,
// and deleted nothing); replicas drop them at their next reload.
func (a *FileAdmin) Purge(ctx context.Context, q PurgeQuery, each func([]Record) error) (more bool, err error) {
	var sel []Record
	pick := func(recs []Record) []Record {
		var kept []Record
		for _, r := range recs {
			if !q.selects(r) {
				kept = append(kept, r)
			} else if q.Limit > 0 && len(sel) == q.Limit {
				more = true
				kept = append(kept, r)
			} else {
				sel = append(sel, r)
			}
		}
		return kept
	}
	if q.DryRun {
		recs, err := a.List(ctx)
		if err != nil {
			return false, err
		}
		pick(recs)
	} else {
		err := a.update(ctx, func(recs []Record) ([]Record, error) {
			sel, more = nil, false
			kept := pick(recs)
			if len(sel) == 0 {
				return nil, errUnchanged
			}
			return kept, nil
		})
		if errors.Is(err, errUnchanged) {
			err = nil
		}
		if err != nil {
			return false, err
		}
	}
	if len(sel) == 0 {
		return more, nil
	}
	return more, each(sel)
}

// errUnchanged makes FileAdmin.update leave the file as it is.
var errUnchanged = errors.New("keystore: nothing to change")
