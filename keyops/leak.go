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

// ReportLeak applies l.Action to the key, marks the record with the leak
// (Record.Leak: where, when, what was done; `keys show` and the portal
// show it) and records it in the audit log as "key.leak" (key id,
// consumer, url, source, action taken). A revocation is RevokeKey's
// (audited as key.revoke; the key's OAuth access tokens die with it); a
// quarantine brings the key's expires_at forward to now+Grace unless it
// ends sooner already. It returns the record after the change and the
// action taken: LeakNone when the key was revoked or expired already, or
// was reported before at the same URL.
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
	if rec.StateAt(now) != keystore.Active || (rec.Leak != nil && rec.Leak.URL == l.URL) {
		// Nothing left to do, or reported already at that place (an
		// alert replayed to another replica): act and tell once.
		taken = LeakNone
	}
	if taken == LeakQuarantine && (rec.Status != keystore.Active || l.Grace <= 0) {
		// A rotated key's expiry is the end of its grace period; a zero
		// grace is a revocation.
		taken = LeakRevoke
	}
	changes := map[string]string{"url": l.URL, "source": l.Source, "action": string(taken), "consumer": rec.Consumer}
	if taken != LeakNone {
		end := now.Add(l.Grace).UTC().Truncate(time.Second)
		leak := &keystore.Leak{URL: l.URL, Source: l.Source, FoundAt: now.UTC().Truncate(time.Second), Action: string(taken)}
		rec, err = s.store.UpdateKey(ctx, l.KeyID, func(r keystore.Record) (keystore.Record, error) {
			r.Leak = leak
			if taken == LeakQuarantine && (r.ExpiresAt.IsZero() || end.Before(r.ExpiresAt)) {
				r.ExpiresAt = end
			}
			return r, nil
		})
		if err == nil && taken == LeakQuarantine {
			changes["expires_at"] = rec.ExpiresAt.Format(time.RFC3339)
		}
		if err == nil && taken == LeakRevoke {
			rec, err = s.RevokeKey(ctx, a, l.KeyID)
			if errors.Is(err, keystore.ErrRevoked) {
				taken, err = LeakNone, nil
			}
		}
	}
	changes["action"] = string(taken)
	if err != nil {
		_ = s.audit(ctx, a, "key.leak", l.KeyID, changes, err)
		return keystore.Record{}, "", fmt.Errorf("keyops: leak of %s: %w", l.KeyID, err)
	}
	if err := s.audit(ctx, a, "key.leak", l.KeyID, changes, nil); err != nil {
		return keystore.Record{}, "", err
	}
	return rec, taken, nil
}

// LeakSummary is the one-line account of a leak that `keys show` and the
// portal's banner give: "found public at <url> on <date>; revoked".
func LeakSummary(l *keystore.Leak) string {
	if l == nil {
		return ""
	}
	done := map[string]string{string(LeakRevoke): "revoked", string(LeakQuarantine): "quarantined: it stops working at its expiry", string(LeakNotify): "not changed; rotate it"}[l.Action]
	if done == "" {
		done = l.Action
	}
	where := l.URL
	if l.Source != "" {
		where += " (" + l.Source + ")"
	}
	return "found public at " + where + " on " + l.FoundAt.UTC().Format("2006-01-02") + "; " + done
}
