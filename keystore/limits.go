package keystore

import (
	"time"

	"github.com/keygate/keygate/policy"
)

// Subject is what rec's limit is resolved from: the key's plan and
// override and, when con is not nil, its consumer's.
func Subject(rec Record, con *Consumer) policy.Subject {
	s := policy.Subject{KeyID: rec.ID, Env: string(rec.Env), KeyPlan: rec.Plan, KeyOverride: rec.Override,
		Products: []string{string(rec.Product)}, KeyPermissions: rec.Permissions, KeyCIDRs: rec.AllowedCIDRs}
	if con != nil {
		s.ConsumerID, s.ConsumerPlan, s.ConsumerOverride = con.ID, con.Plan, con.Override
		s.ConsumerPermissions, s.ConsumerCIDRs = con.Permissions, con.AllowedCIDRs
	}
	return s
}

// limitResolver fills Record.Limits in a store's in-memory copy, so that
// the request path finds each key's effective limit with its record and
// resolves nothing per request. The zero value (no resolver) leaves
// Limits nil: the gateway then applies the env default.
type limitResolver struct {
	res *policy.Resolver
}

// resolve returns rec with Limits set from cons (consumers by id). A
// consumer that is not in cons (deleted) counts as none.
func (l limitResolver) resolve(rec Record, cons map[string]Consumer, now time.Time) Record {
	var con *Consumer
	if c, ok := cons[rec.Consumer]; ok && rec.Consumer != "" {
		con = &c
	}
	return l.resolveFor(rec, con, now)
}

// resolveFor returns rec with Limits set from con, its consumer (nil for
// none).
func (l limitResolver) resolveFor(rec Record, con *Consumer, now time.Time) Record {
	if l.res == nil {
		return rec
	}
	rec.Limits = l.res.Resolve(Subject(rec, con), now)
	return rec
}

// resolveAll sets Limits on every record of m in place.
func (l limitResolver) resolveAll(m map[Hash]Record, cons map[string]Consumer, now time.Time) {
	if l.res == nil {
		return
	}
	for h, r := range m {
		m[h] = l.resolve(r, cons, now)
	}
}

// consumerMap indexes cons by id.
func consumerMap(cons []Consumer) map[string]Consumer {
	m := make(map[string]Consumer, len(cons))
	for _, c := range cons {
		m[c.ID] = c
	}
	return m
}
