package keyops

import (
	"context"
	"strconv"
	"time"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// LimitUpdate changes the plan and override of a key or a consumer. Nil
// fields are left as they are.
type LimitUpdate struct {
	// Plan names an entry of ratelimit.plans; "" clears the plan.
	Plan *string
	// ClearOverride drops the whole override before the fields below
	// are applied.
	ClearOverride bool
	// Rate, Per, Burst and Quota set fields of the override. A Quota of
	// zero value overrides the quota to none.
	Rate  *float64
	Per   *time.Duration
	Burst *int
	Quota *policy.Quota
	// Until sets when the whole override stops applying (a temporary
	// grant); the zero time makes it permanent. Without it, an update
	// keeps the override's expiry, unless that has passed: setting a
	// field of an expired override starts a new one.
	Until *time.Time
}

// IsZero reports whether u changes nothing.
func (u LimitUpdate) IsZero() bool {
	return u.Plan == nil && !u.ClearOverride && u.Rate == nil && u.Per == nil && u.Burst == nil && u.Quota == nil && u.Until == nil
}

func (u LimitUpdate) setsOverride() bool {
	return u.Rate != nil || u.Per != nil || u.Burst != nil || u.Quota != nil
}

// check validates u against the configured plans.
func (s *Service) checkLimits(u LimitUpdate) error {
	if u.Plan != nil {
		if err := s.limits.CheckPlan(*u.Plan); err != nil {
			return invalid("plan: %v", err)
		}
	}
	if err := policy.CheckFields(policy.Fields{Rate: u.Rate, Per: u.Per, Burst: u.Burst, Quota: u.Quota, NoQuotaOK: true}); err != nil {
		return asInvalid(err)
	}
	if u.Until != nil && !u.Until.IsZero() && !u.Until.After(s.now()) {
		return invalid("until: %s is not in the future", u.Until.UTC().Format(time.RFC3339))
	}
	return nil
}

// apply returns plan and override after u, and the changes for the audit.
func (u LimitUpdate) apply(plan string, o *policy.Override, now time.Time, changes map[string]string) (string, *policy.Override, error) {
	if u.Plan != nil {
		plan = *u.Plan
		changes["plan"] = plan
	}
	var next policy.Override
	if o != nil && !u.ClearOverride && (o.Until.IsZero() || now.Before(o.Until) || !u.setsOverride()) {
		next = *o
	}
	if u.ClearOverride {
		changes["override"] = ""
	}
	if u.Rate != nil {
		next.Rate = *u.Rate
		changes["override.rate"] = strconv.FormatFloat(*u.Rate, 'g', -1, 64)
	}
	if u.Per != nil {
		next.Per = *u.Per
		changes["override.per"] = u.Per.String()
	}
	if u.Burst != nil {
		next.Burst = *u.Burst
		changes["override.burst"] = strconv.Itoa(*u.Burst)
	}
	if u.Quota != nil {
		q := *u.Quota
		next.Quota = &q
		changes["override.quota"] = q.String()
	}
	if u.Until != nil {
		next.Until = u.Until.UTC()
		changes["override.until"] = ""
		if !u.Until.IsZero() {
			changes["override.until"] = next.Until.Format(time.RFC3339)
		}
	}
	if err := next.Validate(); err != nil {
		// Each field is in bounds (checkLimits), but together with the
		// ones kept they may not be: 1e6 per 1ms.
		return "", nil, asInvalid(err)
	}
	if next.IsZero() {
		if u.Until != nil && !u.Until.IsZero() {
			return "", nil, invalid("until: there is no override to expire; give --rate, --per, --burst or --quota with it")
		}
		return plan, nil, nil
	}
	return plan, &next, nil
}

// Limit is an effective limit as `keys show` explains it: each field's
// value and where it came from.
type Limit struct {
	Rate  float64 `json:"rate"`
	Per   string  `json:"per"`
	Burst int     `json:"burst"`
	// Quota is "none" or "REQUESTS/PERIOD".
	Quota string `json:"quota"`
	// Sources say where each field came from: "key override", "key plan
	// NAME", "consumer override", "consumer plan NAME" or "env default
	// (live)".
	Sources map[string]string `json:"sources"`
	// Bucket is the limiter id: the key's, or its consumer's when a
	// consumer-scoped plan makes its keys share one bucket and quota.
	Bucket string `json:"bucket"`
	// Scope is the scope of the plan in effect: key or consumer.
	Scope string `json:"scope"`
	// Until is when an override in effect expires; Then is the limit
	// from that moment.
	Until *time.Time `json:"until,omitempty"`
	Then  *Limit     `json:"then,omitempty"`
}

// explain resolves rec (with its consumer, if any) at now.
func (s *Service) explain(rec keystore.Record, con *keystore.Consumer, now time.Time) *Limit {
	sub := keystore.Subject(rec, con)
	return describe(s.limits.Resolve(sub, now), sub)
}

func describe(e *policy.Effective, sub policy.Subject) *Limit {
	name := func(src policy.Source) string {
		switch src {
		case policy.FromKeyPlan:
			return string(src) + " " + sub.KeyPlan
		case policy.FromConsumerPlan:
			return string(src) + " " + sub.ConsumerPlan
		case policy.FromEnvDefault:
			return string(src) + " (" + sub.Env + ")"
		}
		return string(src)
	}
	l := &Limit{
		Rate: e.Limit.Rate, Per: e.Limit.Per.String(), Burst: e.Limit.Burst, Quota: e.Limit.Quota.String(),
		Sources: map[string]string{
			"rate": name(e.Sources.Rate), "per": name(e.Sources.Per),
			"burst": name(e.Sources.Burst), "quota": name(e.Sources.Quota),
		},
		Bucket: e.Bucket(sub.KeyID), Scope: string(e.Scope),
	}
	if e.Next != nil {
		t := e.Until.UTC()
		l.Until, l.Then = &t, describe(e.Next, sub)
	}
	return l
}

// checkEffective holds the limits keys end up with, every source
// combined, to the bounds of policy.CheckFields: fields from different
// sources (a key's rate, its consumer's per) may each be in bounds and
// not together. It checks rec (as it would be after the change) with con,
// and its successors while overrides expire.
func (s *Service) checkEffective(rec keystore.Record, con *keystore.Consumer, now time.Time) error {
	for e := s.limits.Resolve(keystore.Subject(rec, con), now); e != nil; e = e.Next {
		if err := policy.CheckFields(policy.WholeLimit(e.Limit)); err != nil {
			return invalid("key %s would get a limit out of bounds, its plan, overrides and defaults combined: %v", rec.ID, err)
		}
	}
	return nil
}

// precheckKey applies u to a copy of the key with id and checks the
// limit it would get. The store applies u again, atomically; this only
// refuses early what cannot be right.
func (s *Service) precheckKey(ctx context.Context, id string, u LimitUpdate, now time.Time) error {
	if !u.setsOverride() && u.Plan == nil && !u.ClearOverride {
		return nil
	}
	rec, err := s.GetKey(ctx, id)
	if err != nil {
		return nil // the update reports it
	}
	var con *keystore.Consumer
	if rec.Consumer != "" {
		if c, err := s.store.GetConsumer(ctx, rec.Consumer); err == nil {
			con = &c
		}
	}
	if rec.Plan, rec.Override, err = u.apply(rec.Plan, rec.Override, now, map[string]string{}); err != nil {
		return err
	}
	return s.checkEffective(rec, con, now)
}

// precheckConsumer applies u to a copy of the consumer with id and checks
// the limit each of its keys would get.
func (s *Service) precheckConsumer(ctx context.Context, id string, u LimitUpdate, now time.Time) error {
	if !u.setsOverride() && u.Plan == nil && !u.ClearOverride {
		return nil
	}
	con, err := s.store.GetConsumer(ctx, id)
	if err != nil {
		return nil // the update reports it
	}
	if con.Plan, con.Override, err = u.apply(con.Plan, con.Override, now, map[string]string{}); err != nil {
		return err
	}
	recs, err := s.ListKeys(ctx, KeyFilter{Consumer: id})
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := s.checkEffective(rec, &con, now); err != nil {
			return err
		}
	}
	return nil
}
