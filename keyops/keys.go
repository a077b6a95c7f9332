package keyops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keygate/keygate/keystore"
)

// IssueKey issues a key. The key is returned once and stored nowhere; a
// key of a consumer must be bound to one of the consumer's contexts, if
// it lists any.
func (s *Service) IssueKey(ctx context.Context, a Actor, req keystore.IssueRequest) (string, keystore.Record, error) {
	if err := checkActor(a); err != nil {
		return "", keystore.Record{}, err
	}
	changes := map[string]string{"product": string(req.Product), "env": string(req.Env), "context": req.Context, "name": req.Name}
	if req.Consumer != "" {
		changes["consumer"] = req.Consumer
	}
	if req.ExpiresIn > 0 {
		changes["expires_in"] = req.ExpiresIn.String()
	}
	if req.Permissions != nil {
		changes["permissions"] = strings.Join(req.Permissions, ",")
	}
	if err := CheckName("name", req.Name); err != nil {
		return "", keystore.Record{}, s.audit(ctx, a, "key.issue", "", changes, err)
	}
	if req.Permissions != nil && len(req.Permissions) == 0 {
		req.Permissions = nil // the default: every operation of the product
	}
	if err := s.checkPermissions(string(req.Product), req.Permissions); err != nil {
		return "", keystore.Record{}, s.audit(ctx, a, "key.issue", "", changes, err)
	}
	if req.AllowedCIDRs != nil {
		cidrs, err := normalizeCIDRs(req.AllowedCIDRs)
		if err != nil {
			return "", keystore.Record{}, s.audit(ctx, a, "key.issue", "", changes, err)
		}
		req.AllowedCIDRs = cidrs
		changes["allowed_cidrs"] = strings.Join(cidrs, ",")
	}
	if err := req.Validate(); err != nil {
		return "", keystore.Record{}, s.audit(ctx, a, "key.issue", "", changes, asInvalid(err))
	}
	key, rec, err := s.store.Issue(ctx, req)
	if errors.Is(err, keystore.ErrContextNotAllowed) || errors.Is(err, keystore.ErrConsumerNotFound) {
		err = asInvalid(err)
	}
	if err == nil {
		s.addKey(rec)
	}
	if aerr := s.audit(ctx, a, "key.issue", rec.ID, changes, err); aerr != nil {
		if err == nil {
			// Stored, but not audited: the key is not handed out, and
			// its record must not stay live and unaudited. Revoke it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, rerr := s.store.Revoke(rctx, rec.ID); rerr != nil && !errors.Is(rerr, keystore.ErrNotDurable) {
				return "", keystore.Record{}, fmt.Errorf("%w; revoking key %s failed too (nobody holds its key; revoke it): %w", aerr, rec.ID, rerr)
			}
			return "", keystore.Record{}, fmt.Errorf("%w; the key was revoked and not handed out", aerr)
		}
		return "", keystore.Record{}, aerr
	}
	return key, rec, nil
}

// KeyFilter selects keys; empty fields select all.
type KeyFilter struct {
	Consumer string
	Product  keystore.Product
	Env      keystore.Env
	// Status is an effective status: active, revoked or expired.
	Status keystore.Status
}

// ListKeys returns the keys that f selects, in the order they were
// issued. A consumer's keys are read by hash when Config.ConsumerKeys
// finds them (see consumerRecords); any other list reads every record,
// holding only the matches where the store filters as it reads (the
// Redis keystore's ListMatching). Either way each record read is checked against f, so a key whose
// consumer changed after the index was read is not listed.
func (s *Service) ListKeys(ctx context.Context, f KeyFilter) ([]keystore.Record, error) {
	recs, ok, err := s.consumerRecords(ctx, f.Consumer)
	now := s.now()
	if !ok {
		recs, err = s.store.ListMatching(ctx, func(r keystore.Record) bool { return f.match(r, now) })
	}
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if f.match(r, now) {
			out = append(out, r)
		}
	}
	return out, nil
}

// match reports whether f selects r at now.
func (f KeyFilter) match(r keystore.Record, now time.Time) bool {
	return (f.Consumer == "" || r.Consumer == f.Consumer) && (f.Product == "" || r.Product == f.Product) &&
		(f.Env == "" || r.Env == f.Env) && (f.Status == "" || r.StateAt(now) == f.Status)
}

// GetKey returns the record of the key with id, or keystore.ErrNotFound.
// The admin API answers every issue, revocation and rotation with the
// key's detail: the Redis keystore reads that one record, not the key set.
func (s *Service) GetKey(ctx context.Context, id string) (keystore.Record, error) {
	return s.store.Get(ctx, id)
}

// KeyDetail is a key as `keys show` prints it: its record (never the key
// or its hash) and its effective limit, explained.
type KeyDetail struct {
	keystore.RecordView
	// Limit is the effective limit now and where each field came from.
	Limit *Limit `json:"effective_limit"`
	// Permissions are the operations of the key's product, each with
	// whether the key may perform it and the sources that grant or
	// withhold it (key, consumer, plan); Allowed lists the permitted ones.
	Permissions []Permission `json:"effective_permissions"`
	Allowed     []string     `json:"allowed_operations"`
	// Warnings name what the limit ignores: a plan no longer configured,
	// a consumer that was deleted, an override that has expired.
	Warnings []string `json:"warnings,omitempty"`
}

// ShowKey returns the key with id and its effective limit.
func (s *Service) ShowKey(ctx context.Context, id string) (KeyDetail, error) {
	rec, err := s.GetKey(ctx, id)
	if err != nil {
		return KeyDetail{}, err
	}
	return s.DescribeKey(ctx, rec)
}

// DescribeKey is ShowKey for a record the caller holds already, such as
// the one IssueKey, RevokeKey, UpdateKey or RotateKey returned: it reads
// the key's consumer (if it has one), not the key again. The admin API
// answers every change with the key's detail; re-reading the key for it
// cost two Redis round trips per change.
func (s *Service) DescribeKey(ctx context.Context, rec keystore.Record) (KeyDetail, error) {
	var con *keystore.Consumer
	if rec.Consumer != "" {
		c, err := s.store.GetConsumer(ctx, rec.Consumer)
		switch {
		case err == nil:
			con = &c
		case !errors.Is(err, keystore.ErrConsumerNotFound): // deleted: counts as none
			return KeyDetail{}, err
		}
	}
	now := s.now()
	d := KeyDetail{RecordView: rec.View(now), Limit: s.explain(rec, con, now)}
	d.Permissions, d.Allowed = permissionsOf(s.limits.Resolve(keystore.Subject(rec, con), now), string(rec.Product))
	if rec.Consumer != "" && con == nil {
		d.Warnings = append(d.Warnings, "consumer "+rec.Consumer+" no longer exists; its plan and override do not apply")
	}
	if s.limits.CheckPlan(rec.Plan) != nil {
		d.Warnings = append(d.Warnings, "plan "+rec.Plan+" is not in ratelimit.plans; it is skipped")
	}
	if con != nil && s.limits.CheckPlan(con.Plan) != nil {
		d.Warnings = append(d.Warnings, "the consumer's plan "+con.Plan+" is not in ratelimit.plans; it is skipped")
	}
	if o := rec.Override; o != nil && !o.ActiveAt(now) {
		d.Warnings = append(d.Warnings, "the key's override ended at "+o.Until.UTC().Format(time.RFC3339))
	}
	if con != nil && con.Override != nil && !con.Override.ActiveAt(now) {
		d.Warnings = append(d.Warnings, "the consumer's override ended at "+con.Override.Until.UTC().Format(time.RFC3339))
	}
	return d, nil
}

// KeyUpdate changes a key. Nil fields are left as they are.
type KeyUpdate struct {
	Name *string
	// ExpiresAt sets when the key stops working; the zero time means
	// never.
	ExpiresAt *time.Time
	Limits    LimitUpdate
	Access    AccessUpdate
}

// UpdateKey changes the name, expiry, plan or override of the key with
// id. The change reaches every running gateway within a second.
func (s *Service) UpdateKey(ctx context.Context, a Actor, id string, u KeyUpdate) (keystore.Record, error) {
	if err := checkActor(a); err != nil {
		return keystore.Record{}, err
	}
	changes := map[string]string{}
	if u.Name == nil && u.ExpiresAt == nil && u.Limits.IsZero() && u.Access.IsZero() {
		return keystore.Record{}, invalid("nothing to update")
	}
	err := s.checkLimits(u.Limits)
	if err == nil && !u.Access.IsZero() {
		var rec keystore.Record
		if rec, err = s.GetKey(ctx, id); err == nil {
			err = s.prepareAccess(string(rec.Product), &u.Access)
		}
	}
	if err == nil && u.Name != nil {
		err = CheckName("name", *u.Name)
	}
	if err == nil {
		err = s.precheckKey(ctx, id, u.Limits, s.now())
	}
	var rec keystore.Record
	if err == nil {
		now := s.now()
		rec, err = s.store.UpdateKey(ctx, id, func(r keystore.Record) (keystore.Record, error) {
			if u.Name != nil {
				r.Name = *u.Name
				changes["name"] = r.Name
			}
			if u.ExpiresAt != nil {
				if r.Status != keystore.Active {
					return r, invalid("expires_at: only an active key's expiry can change (this one is %s)", r.Status)
				}
				r.ExpiresAt = u.ExpiresAt.UTC().Truncate(time.Second)
				changes["expires_at"] = ""
				if !r.ExpiresAt.IsZero() {
					changes["expires_at"] = r.ExpiresAt.Format(time.RFC3339)
				}
			}
			var err error
			r.Plan, r.Override, err = u.Limits.apply(r.Plan, r.Override, now, changes)
			r.Permissions, r.AllowedCIDRs = u.Access.apply(r.Permissions, r.AllowedCIDRs, changes)
			return r, err
		})
	}
	if err := s.audit(ctx, a, "key.update", id, changes, err); err != nil {
		return keystore.Record{}, err
	}
	return rec, nil
}

// RevokeKey revokes the key with id at once.
func (s *Service) RevokeKey(ctx context.Context, a Actor, id string) (keystore.Record, error) {
	if err := checkActor(a); err != nil {
		return keystore.Record{}, err
	}
	rec, err := s.store.Revoke(ctx, id)
	if err := s.audit(ctx, a, "key.revoke", id, map[string]string{"status": string(keystore.Revoked)}, err); err != nil {
		return keystore.Record{}, err
	}
	return rec, nil
}

// RotateKey replaces the key with id by a new one (same product, env,
// context, name, consumer, plan and override); the old key keeps working
// for grace. It returns the new key, once, and its record.
func (s *Service) RotateKey(ctx context.Context, a Actor, id string, grace time.Duration) (string, keystore.Record, error) {
	if err := checkActor(a); err != nil {
		return "", keystore.Record{}, err
	}
	if grace < 0 {
		return "", keystore.Record{}, invalid("grace: must not be negative, got %s", grace)
	}
	key, rec, err := s.store.Rotate(ctx, id, grace)
	if err == nil {
		s.addKey(rec)
	}
	changes := map[string]string{"grace": grace.String(), "replaced_by": rec.ID}
	if err := s.audit(ctx, a, "key.rotate", id, changes, err); err != nil {
		return "", keystore.Record{}, err
	}
	return key, rec, nil
}
