package keyops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keygate/keygate/keystore"
)

// LeakAction is what ReportLeak does with a key that was found public.
type LeakAction string

const (
	// LeakRevoke revokes the key at once.
	LeakRevoke LeakAction = "revoke"
	// LeakQuarantine keeps the key working until the end of a grace
	// period (its expires_at is brought forward), then it is refused.
	LeakQuarantine LeakAction = "quarantine"
	// LeakNotify changes nothing; the leak is only recorded and told.
	LeakNotify LeakAction = "notify"
	// LeakNone is reported when the key was already revoked or expired,
	// so nothing was left to do.
	LeakNone LeakAction = "none"
)

// Valid reports whether a is an action an operator may configure.
func (a LeakAction) Valid() bool { return a == LeakRevoke || a == LeakQuarantine || a == LeakNotify }

// Leak is a key found in public, as a secret scanner reported it.
type Leak struct {
	// KeyID is the id of the key found.
	KeyID string
	// URL and Source say where it was found (a commit's URL; "content",
	// "commit", "gist", …).
	URL, Source string
	// Action is what to do; Grace is the quarantine's length.
	Action LeakAction
	Grace  time.Duration
}

// ReportLeak applies l.Action to the key and records the leak in the
// audit log as "key.leak" (key id, consumer, url, source, action taken).
// A revocation is the same as RevokeKey's (audited as key.revoke, and the
// key's OAuth access tokens die with it); a quarantine brings the key's
// expires_at forward to now+Grace unless it ends sooner already (audited
// as key.update). It returns the record after the change and the action
// taken: LeakNone when the key was revoked or expired already.
func (s *Service) ReportLeak(ctx context.Context, a Actor, l Leak) (keystore.Record, LeakAction, error) {
	if err := checkActor(a); err != nil {
		return keystore.Record{}, "", err
	}
	if !l.Action.Valid() {
		return keystore.Record{}, "", invalid("leak action: must be revoke, quarantine or notify, got %q", l.Action)
	}
	rec, err := s.GetKey(ctx, l.KeyID)
	if err != nil {
		return keystore.Record{}, "", err
	}
	now := s.now()
	taken := l.Action
	if rec.StateAt(now) != keystore.Active {
		taken = LeakNone
	}
	if taken == LeakQuarantine && (rec.Status != keystore.Active || l.Grace <= 0) {
		// A rotated key's expiry is its grace period, which UpdateKey
		// cannot change; a zero grace is a revocation.
		taken = LeakRevoke
	}
	switch taken {
	case LeakRevoke:
		rec, err = s.RevokeKey(ctx, a, l.KeyID)
		if errors.Is(err, keystore.ErrRevoked) {
			taken, err = LeakNone, nil
		}
	case LeakQuarantine:
		end := now.Add(l.Grace).UTC().Truncate(time.Second)
		if rec.ExpiresAt.IsZero() || end.Before(rec.ExpiresAt) {
			rec, err = s.UpdateKey(ctx, a, l.KeyID, KeyUpdate{ExpiresAt: &end})
		}
	}
	if err != nil {
		return keystore.Record{}, "", fmt.Errorf("keyops: leak of %s: %w", l.KeyID, err)
	}
	changes := map[string]string{"url": l.URL, "source": l.Source, "action": string(taken), "consumer": rec.Consumer}
	if taken == LeakQuarantine {
		changes["expires_at"] = rec.ExpiresAt.Format(time.RFC3339)
	}
	if err := s.audit(ctx, a, "key.leak", l.KeyID, changes, nil); err != nil {
		return keystore.Record{}, "", err
	}
	return rec, taken, nil
}
