package keyops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/keystore"
)

// PurgeRequest asks to delete the keys that ended (were revoked, or
// expired, or reached the end of a rotation's grace) more than OlderThan
// ago.
type PurgeRequest struct {
	OlderThan time.Duration
	// Limit bounds the keys of one purge; 0 means no bound.
	Limit int
	// DryRun finds the keys and deletes nothing.
	DryRun bool
}

// purger is a Store that deletes ended keys (both keystore admins).
type purger interface {
	Purge(ctx context.Context, q keystore.PurgeQuery) (keystore.PurgeResult, error)
}

// usageForgetter is a usage store that can drop keys' last uses
// (usage.RedisStore), which would otherwise be kept for every key id ever
// used.
type usageForgetter interface {
	Forget(ctx context.Context, ids []string) error
}

// PurgeKeys deletes the records of the keys that ended before
// req.OlderThan ago, so that the key set, every replica's index and the
// lists hold the keys that still matter: a purged key is an unknown key
// from then on (401, as a revoked one). Each purged key gets a key.purge
// audit event (its id, its status and when it ended), which is all that
// is left of it besides the audit log's earlier events and its usage
// counts until they expire. Its last uses are dropped where the usage
// store can (Redis). A key changed while the purge ran is kept.
func (s *Service) PurgeKeys(ctx context.Context, a Actor, req PurgeRequest) (keystore.PurgeResult, error) {
	if err := checkActor(a); err != nil {
		return keystore.PurgeResult{}, err
	}
	if req.OlderThan < 0 {
		return keystore.PurgeResult{}, invalid("older_than: must not be negative, got %s", req.OlderThan)
	}
	if req.Limit < 0 {
		return keystore.PurgeResult{}, invalid("limit: must not be negative, got %d", req.Limit)
	}
	p, ok := s.store.(purger)
	if !ok {
		return keystore.PurgeResult{}, errors.New("keyops: this keystore cannot purge keys")
	}
	now := s.now()
	res, err := p.Purge(ctx, keystore.PurgeQuery{Before: now.Add(-req.OlderThan), Now: now, Limit: req.Limit, DryRun: req.DryRun})
	if req.DryRun || len(res.Keys) == 0 {
		return res, err
	}
	// What was purged is audited even when the purge stopped on an error.
	ids := make([]string, len(res.Keys))
	var auditErr error
	for i, r := range res.Keys {
		ids[i] = r.ID
		ended, _ := r.EndedAt(now)
		changes := map[string]string{"status": string(r.StateAt(now)), "ended_at": ended.UTC().Format(time.RFC3339)}
		if e := s.audit(ctx, a, "key.purge", r.ID, changes, nil); e != nil && auditErr == nil {
			auditErr = e
		}
	}
	if err != nil {
		return res, err
	}
	if f, ok := s.usage.(usageForgetter); ok {
		if err := f.Forget(ctx, ids); err != nil {
			return res, fmt.Errorf("keyops: %d keys purged, but their last uses were kept: %w", len(ids), err)
		}
	}
	return res, auditErr
}

// ParseAge parses a positive Go duration ("12h") or a number of days
// ("90d", at most 100 years), as the CLI and the admin API take a key's
// lifetime or age.
func ParseAge(s string) (time.Duration, bool) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		return time.Duration(days) * 24 * time.Hour, err == nil && days > 0 && days <= 36500
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}
