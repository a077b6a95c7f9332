package keyops

import (
	"context"
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

// PurgeKeys deletes the records of the keys that ended before
// req.OlderThan ago, so that the key set, every replica's index and the
// lists hold the keys that still matter: a purged key is an unknown key
// from then on (401, as a revoked one). It goes through the key set once,
// deleting a batch at a time; after each batch it records a key.purge
// audit event per purged key (its id, its status and when it ended: all
// that is left of it besides the audit log's earlier events and its
// usage counts until they expire), drops their last uses where the usage
// store can (Redis), and then calls each with them. A key changed while
// the purge ran is kept. With req.DryRun each gets the keys a purge would
// delete, and nothing is changed. more is true when req.Limit stopped it.
func (s *Service) PurgeKeys(ctx context.Context, a Actor, req PurgeRequest, each func([]keystore.Record) error) (more bool, err error) {
	if err := checkActor(a); err != nil {
		return false, err
	}
	if req.OlderThan < 0 {
		return false, invalid("older_than: must not be negative, got %s", req.OlderThan)
	}
	if req.Limit < 0 {
		return false, invalid("limit: must not be negative, got %d", req.Limit)
	}
	now := s.now()
	q := keystore.PurgeQuery{Before: now.Add(-req.OlderThan), Now: now, Limit: req.Limit, DryRun: req.DryRun}
	return s.store.Purge(ctx, q, func(recs []keystore.Record) error {
		if req.DryRun {
			return each(recs)
		}
		ids := make([]string, len(recs))
		events := make([]Event, len(recs))
		for i, r := range recs {
			ids[i] = r.ID
			ended, _ := r.EndedAt(now)
			events[i] = Event{Time: s.now().UTC(), Actor: a, Action: "key.purge", Target: r.ID,
				Changes: map[string]string{"status": string(r.StateAt(now)), "ended_at": ended.UTC().Format(time.RFC3339)}}
		}
		if err := s.auditAll(ctx, events); err != nil {
			return err
		}
		if s.usage != nil {
			if err := s.usage.Forget(ctx, ids); err != nil {
				return fmt.Errorf("keyops: %d keys purged, but their last uses were kept: %w", len(ids), err)
			}
		}
		return each(recs)
	})
}

// BatchAuditor is an Auditor that records many events at once, as
// durably as one by one but cheaper (audit.Log: one fsync for the lot).
type BatchAuditor interface {
	Auditor
	AuditAll(ctx context.Context, es []Event) error
}

// auditAll records es, at once where the auditor can.
func (s *Service) auditAll(ctx context.Context, es []Event) error {
	var err error
	if b, ok := s.auditor.(BatchAuditor); ok {
		err = b.AuditAll(ctx, es)
	} else {
		for _, e := range es {
			if aerr := s.auditor.Audit(ctx, e); aerr != nil && err == nil {
				err = aerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("keyops: %d keys purged, but not all audited: %w", len(es), err)
	}
	return nil
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
