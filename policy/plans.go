package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"
)

// Scope says who shares a plan's bucket and quota.
type Scope string

const (
	// ScopeKey (the default) gives every key its own bucket and quota.
	ScopeKey Scope = "key"
	// ScopeConsumer makes all of a consumer's keys on the plan share one
	// bucket and one quota, so that holding more keys does not multiply
	// what a customer may use.
	ScopeConsumer Scope = "consumer"
)

// Plan is a named limit set of `ratelimit.plans`. Like an env default it
// is whole: a plan without a quota means no quota.
type Plan struct {
	Limit `yaml:",inline"`
	// Scope is "key" (default, also for "") or "consumer".
	Scope Scope `yaml:"scope,omitempty"`
	// Features are the operations the plan includes (see Operations); a
	// key on the plan gets 403 for any other. Absent means every
	// operation.
	Features []string `yaml:"features,omitempty"`
}

// planName is what a plan may be called: it is stored in key records and
// typed on the command line.
var planName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidPlanName reports whether name may name a plan.
func ValidPlanName(name string) bool { return planName.MatchString(name) }

// ValidatePlans reports the first problem in plans through bad.
func ValidatePlans(plans map[string]Plan, bad func(path, format string, args ...any)) {
	names := make([]string, 0, len(plans))
	for name := range plans {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, path := plans[name], "plans."+name
		if !ValidPlanName(name) {
			bad(path, "plan names are 1 to 63 characters of [a-z0-9_-], starting with a letter or digit")
		}
		ValidateLimit(p.Limit, path, bad)
		if p.Scope != "" && p.Scope != ScopeKey && p.Scope != ScopeConsumer {
			bad(path+".scope", "must be %q or %q, got %q", ScopeKey, ScopeConsumer, p.Scope)
		}
	}
}

// ValidateLimit checks one whole limit (an env default or a plan)
// against the bounds of CheckFields.
func ValidateLimit(l Limit, p string, bad func(path, format string, args ...any)) {
	var fe *FieldError
	if errors.As(CheckFields(WholeLimit(l)), &fe) {
		bad(p+"."+fe.Field, "%s", fe.Msg)
	}
}

// Override replaces some fields of a limit for one key or one consumer.
// A zero field (nil Quota) is not overridden; a non-nil Quota with zero
// Requests overrides the quota to none. Until, when set, is when the
// override stops applying (a temporary grant); the zero value applies for
// good. The zero Override overrides nothing.
type Override struct {
	Rate  float64       `yaml:"rate,omitempty" json:"rate,omitempty"`
	Per   time.Duration `yaml:"per,omitempty" json:"per,omitempty"`
	Burst int           `yaml:"burst,omitempty" json:"burst,omitempty"`
	Quota *Quota        `yaml:"quota,omitempty" json:"quota,omitempty"`
	Until time.Time     `yaml:"until,omitempty" json:"until,omitzero"`
}

// IsZero reports whether o overrides nothing.
func (o Override) IsZero() bool {
	return o.Rate == 0 && o.Per == 0 && o.Burst == 0 && o.Quota == nil
}

// ActiveAt reports whether o overrides something at now.
func (o *Override) ActiveAt(now time.Time) bool {
	return o != nil && !o.IsZero() && (o.Until.IsZero() || now.Before(o.Until))
}

// Validate checks the fields that are set against the bounds of
// CheckFields; messages name the field.
func (o Override) Validate() error { return CheckFields(OverrideFields(o)) }

// Source says where a field of an effective limit came from.
type Source string

// Sources, in the order they are consulted.
const (
	FromKeyOverride      Source = "key override"
	FromKeyPlan          Source = "key plan"
	FromConsumerOverride Source = "consumer override"
	FromConsumerPlan     Source = "consumer plan"
	FromEnvDefault       Source = "env default"
)

// Subject is what a limit is resolved for: a key, its environment, and
// the plan and override of the key and of its consumer.
type Subject struct {
	KeyID            string
	Env              string
	KeyPlan          string
	KeyOverride      *Override
	ConsumerID       string // "" when the key belongs to no consumer
	ConsumerPlan     string
	ConsumerOverride *Override
	// Products are the key's products; with KeyPermissions nil, the key
	// may perform every operation of them.
	Products []string
	// KeyPermissions and ConsumerPermissions are the operations the key
	// and its consumer allow; nil means no restriction of their own.
	KeyPermissions      []string
	ConsumerPermissions []string
	// KeyCIDRs and ConsumerCIDRs are allowed_cidrs; empty means any.
	KeyCIDRs      []string
	ConsumerCIDRs []string
}

// Effective is a key's limit as resolved from its plan and overrides,
// with the limiter id (its bucket) that goes with it. When an override in
// it expires, Next takes over at Until, so the request path falls back
// with one time comparison (see At). An Effective is immutable once built
// and safe to share.
type Effective struct {
	// Limit is what the key is allowed.
	Limit Limit
	// ID is the limiter id when the plan's scope is consumer: the
	// consumer id (and the plan's name, for a key's own plan); "" when
	// the bucket is the key's own (see Bucket). Keys whose limits resolve
	// alike share one Effective.
	ID string
	// Until is when an override this limit depends on expires; zero
	// means never. At and after Until, Next applies.
	Until time.Time
	// Next is the limit after Until; nil when Until is zero.
	Next *Effective
	// Sources say where each field came from, and Plan is the name of the
	// plan that supplied any of them (for `keys show`).
	Sources FieldSources
	Plan    string
	// Scope is the scope of the limit's plan.
	Scope Scope
	// Access is what the key may do and where from; the same for every
	// successor in Next.
	Access *Access
}

// FieldSources say where each field of an effective limit came from.
type FieldSources struct {
	Rate, Per, Burst, Quota Source
}

// Bucket is the limiter id (the bucket and quota counter) of the key
// keyID under e: e.ID, or keyID when the bucket is the key's own.
func (e *Effective) Bucket(keyID string) string {
	if e.ID == "" {
		return keyID
	}
	return e.ID
}

// At returns the effective limit at now: e itself until Until, then its
// successors. The common case (no expiry) costs one comparison.
func (e *Effective) At(now time.Time) *Effective {
	for e.Next != nil && !now.Before(e.Until) {
		e = e.Next
	}
	return e
}

// Resolver resolves keys' effective limits from the env defaults and the
// plans. It is immutable and safe for concurrent use.
type Resolver struct {
	envs  map[string]Limit
	plans map[string]Plan
	ops   *Operations
	// defaults are the shared Access of a key of each product that no
	// rule narrows.
	defaults map[string]*Access
	// shared holds the Effective of each kind of key that no override and
	// no rule of its own sets apart (see Resolve), so that a million keys
	// on a few plans hold a few limits, not a million.
	shared *sharedLimits
}

// sharedLimits is a Resolver's bounded memo of shared Effectives.
type sharedLimits struct {
	m sync.Map // sharedKey → *Effective
	n atomic.Int64
}

// maxShared bounds the shared Effectives of a Resolver: a deployment with
// more kinds of key (each consumer with a plan of consumer scope is one)
// resolves the rest one by one, as before.
const maxShared = 4096

// sharedKey is what the Effective of a key without overrides, permissions
// or address rules of its own (nor its consumer's) depends on: the
// consumer's id only under a plan of consumer scope.
type sharedKey struct {
	env, keyPlan, product, consumerID, consumerPlan string
}

// NewResolver builds a resolver; envs must hold "live" and "test" (as a
// validated Config does).
func NewResolver(envs map[string]Limit, plans map[string]Plan) (*Resolver, error) {
	for _, env := range []string{"live", "test"} {
		if _, ok := envs[env]; !ok {
			return nil, fieldpath.Errorf("limits."+env, "missing")
		}
	}
	r := &Resolver{envs: make(map[string]Limit, len(envs)), plans: make(map[string]Plan, len(plans))}
	for k, v := range envs {
		r.envs[k] = v
	}
	for k, v := range plans {
		r.plans[k] = v
	}
	r.ops = BuiltinOperations()
	r.defaultAccess()
	r.shared = &sharedLimits{}
	return r, nil
}

// WithOperations returns a resolver like r that resolves permissions
// against ops (the built-in and configured operations) instead of the
// built-in ones alone.
func (r *Resolver) WithOperations(ops *Operations) *Resolver {
	c := *r
	if ops != nil {
		c.ops = ops
	}
	c.defaultAccess()
	c.shared = &sharedLimits{} // r's hold r's operations
	return &c
}

// Operations is the table of operations r resolves permissions against.
func (r *Resolver) Operations() *Operations { return r.ops }

// Plan returns the plan named name.
func (r *Resolver) Plan(name string) (Plan, bool) {
	p, ok := r.plans[name]
	return p, ok
}

// PlanNames returns the names of the configured plans, sorted.
func (r *Resolver) PlanNames() []string {
	names := make([]string, 0, len(r.plans))
	for n := range r.plans {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrUnknownPlan means a plan name is not in ratelimit.plans.
var ErrUnknownPlan = errors.New("policy: unknown plan")

// CheckPlan returns nil for "" (no plan) or a configured plan, and an
// error wrapping ErrUnknownPlan that lists the plans otherwise.
func (r *Resolver) CheckPlan(name string) error {
	if name == "" {
		return nil
	}
	if _, ok := r.plans[name]; ok {
		return nil
	}
	return fmt.Errorf("%w %q (the configured plans are %v)", ErrUnknownPlan, name, r.PlanNames())
}

// Resolve returns s's effective limit at now, with its successors for
// every override that is still to expire. Field by field, the first of
// these that sets it wins: the key's override, the key's plan, the
// consumer's override, the consumer's plan, the env default. A plan is
// whole, so nothing after a plan is consulted. A plan name that is not
// configured (removed from the config since) is skipped.
//
// The limiter id is the consumer's id when the key belongs to a consumer,
// has no override of its own in effect, and the plan in effect (the key's,
// else the consumer's) has scope consumer; a key's own consumer-scoped
// plan adds ":" and the plan name, so that the keys on it never share a
// bucket with keys on another limit. Otherwise it is the key's id:
// Effective.ID is then empty and Effective.Bucket gives the key's id, so
// that keys which resolve alike can share one Effective.
func (r *Resolver) Resolve(s Subject, now time.Time) *Effective {
	// A key with no override, permissions or address rules of its own or
	// its consumer's resolves the same at any time as every other such key
	// of its env, plan, product and consumer: they share one Effective.
	if r.shared != nil && s.KeyOverride == nil && s.KeyPermissions == nil && len(s.KeyCIDRs) == 0 && len(s.Products) == 1 &&
		(s.ConsumerID == "" || s.ConsumerOverride == nil && s.ConsumerPermissions == nil && len(s.ConsumerCIDRs) == 0) {
		k := sharedKey{env: s.Env, keyPlan: s.KeyPlan, product: s.Products[0], consumerPlan: s.ConsumerPlan}
		if r.consumerScoped(s) {
			// The bucket is the consumer's: its own Effective.
			k.consumerID = s.ConsumerID
		}
		if e, ok := r.shared.m.Load(k); ok {
			return e.(*Effective)
		}
		e := r.resolve(s, now)
		if r.shared.n.Load() < maxShared {
			if old, loaded := r.shared.m.LoadOrStore(k, e); loaded {
				return old.(*Effective)
			}
			r.shared.n.Add(1)
		}
		return e
	}
	return r.resolve(s, now)
}

// consumerScoped reports whether the plan that applies to s (its key's
// own, else its consumer's, as resolveAt picks it) is of consumer scope,
// so that its Effective names the consumer. Otherwise the consumer
// changes nothing a shared Effective holds, and the keys of a million
// consumers on no plan of consumer scope share a few (each held its own:
// 182 B a key).
func (r *Resolver) consumerScoped(s Subject) bool {
	plan := ""
	if _, ok := r.plans[s.KeyPlan]; ok && s.KeyPlan != "" {
		plan = s.KeyPlan
	} else if _, ok := r.plans[s.ConsumerPlan]; ok && s.ConsumerID != "" && s.ConsumerPlan != "" {
		plan = s.ConsumerPlan
	}
	return s.ConsumerID != "" && plan != "" && r.plans[plan].Scope == ScopeConsumer
}

// resolve is Resolve without sharing.
func (r *Resolver) resolve(s Subject, now time.Time) *Effective {
	e := r.resolveAt(s, now)
	head := e
	acc := r.access(s, e.Plan)
	e.Access = acc
	// An override that expires later makes a successor; at most two.
	for i := 0; i < 2; i++ {
		t := nextExpiry(s, now)
		if t.IsZero() {
			break
		}
		e.Until = t
		now = t
		e.Next = r.resolveAt(s, now)
		e = e.Next
		e.Access = acc
	}
	return head
}

// nextExpiry is the earliest Until after now of an override active at now.
func nextExpiry(s Subject, now time.Time) time.Time {
	var t time.Time
	for _, o := range []*Override{s.KeyOverride, s.ConsumerOverride} {
		if o.ActiveAt(now) && !o.Until.IsZero() && (t.IsZero() || o.Until.Before(t)) {
			t = o.Until
		}
	}
	return t
}

// resolveAt resolves s at one instant, ignoring Until and Next.
func (r *Resolver) resolveAt(s Subject, now time.Time) *Effective {
	e := &Effective{Scope: ScopeKey}
	var set FieldSources
	apply := func(o *Override, src Source) {
		if !o.ActiveAt(now) {
			return
		}
		if o.Rate > 0 && set.Rate == "" {
			e.Limit.Rate, set.Rate = o.Rate, src
		}
		if o.Per > 0 && set.Per == "" {
			e.Limit.Per, set.Per = o.Per, src
		}
		if o.Burst > 0 && set.Burst == "" {
			e.Limit.Burst, set.Burst = o.Burst, src
		}
		if o.Quota != nil && set.Quota == "" {
			e.Limit.Quota, set.Quota = *o.Quota, src
		}
	}
	whole := func(l Limit, src Source) {
		apply(&Override{Rate: l.Rate, Per: l.Per, Burst: l.Burst, Quota: &l.Quota}, src)
	}
	keyOwn := s.KeyOverride.ActiveAt(now)
	apply(s.KeyOverride, FromKeyOverride)
	plan, planFrom := "", Source("")
	if p, ok := r.plans[s.KeyPlan]; ok && s.KeyPlan != "" {
		whole(p.Limit, FromKeyPlan)
		plan, planFrom = s.KeyPlan, FromKeyPlan
	} else {
		if s.ConsumerID != "" {
			apply(s.ConsumerOverride, FromConsumerOverride)
		}
		if p, ok := r.plans[s.ConsumerPlan]; ok && s.ConsumerID != "" && s.ConsumerPlan != "" {
			whole(p.Limit, FromConsumerPlan)
			plan, planFrom = s.ConsumerPlan, FromConsumerPlan
		}
	}
	env, ok := r.envs[s.Env]
	if !ok {
		env = r.envs["live"]
	}
	whole(env, FromEnvDefault)
	e.Sources = set
	if plan != "" {
		e.Plan = plan
		if p := r.plans[plan]; p.Scope == ScopeConsumer {
			e.Scope = ScopeConsumer
			if s.ConsumerID != "" && !keyOwn {
				e.ID = s.ConsumerID
				if planFrom == FromKeyPlan {
					e.ID += ":" + plan
				}
			}
		}
	}
	return e
}

// overrideJSON is Override as JSON: durations as text ("1s"), a quota of
// none as the string "none", and no zero fields.
type overrideJSON struct {
	Rate  float64         `json:"rate,omitempty"`
	Per   string          `json:"per,omitempty"`
	Burst int             `json:"burst,omitempty"`
	Quota json.RawMessage `json:"quota,omitempty"`
	Until *time.Time      `json:"until,omitempty"`
}

type quotaJSON struct {
	Requests int64  `json:"requests"`
	Per      string `json:"per"`
}

// MarshalJSON writes durations as text and a quota of none as "none".
func (o Override) MarshalJSON() ([]byte, error) {
	v := overrideJSON{Rate: o.Rate, Burst: o.Burst}
	if o.Per != 0 {
		v.Per = o.Per.String()
	}
	if o.Quota != nil {
		var err error
		if *o.Quota == (Quota{}) {
			v.Quota = json.RawMessage(`"none"`)
		} else if v.Quota, err = json.Marshal(quotaJSON{o.Quota.Requests, o.Quota.Per.String()}); err != nil {
			return nil, err
		}
	}
	if !o.Until.IsZero() {
		v.Until = &o.Until
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *Override) UnmarshalJSON(b []byte) error {
	var v overrideJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Override{Rate: v.Rate, Burst: v.Burst}
	var err error
	if v.Per != "" {
		if out.Per, err = time.ParseDuration(v.Per); err != nil {
			return fmt.Errorf("per: %w", err)
		}
	}
	if len(v.Quota) > 0 && string(v.Quota) != "null" {
		out.Quota = &Quota{}
		if string(v.Quota) != `"none"` {
			var q quotaJSON
			if err := json.Unmarshal(v.Quota, &q); err != nil {
				return fmt.Errorf("quota: %w", err)
			}
			out.Quota.Requests = q.Requests
			if q.Per != "" {
				if out.Quota.Per, err = time.ParseDuration(q.Per); err != nil {
					return fmt.Errorf("quota.per: %w", err)
				}
			}
		}
	}
	if v.Until != nil {
		out.Until = *v.Until
	}
	*o = out
	return nil
}

// ParseQuota parses the command-line form of a quota: "50000/24h", or
// "none" for no quota.
func ParseQuota(s string) (Quota, error) {
	if s == "none" {
		return Quota{}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	if !ok {
		return Quota{}, fmt.Errorf("quota %q: want REQUESTS/PERIOD such as 50000/24h, or none", s)
	}
	req, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return Quota{}, fmt.Errorf("quota %q: requests must be a whole number from 1 to %d", s, int64(MaxQuotaRequests))
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return Quota{}, fmt.Errorf("quota %q: period must be a duration such as 24h", s)
	}
	q := Quota{Requests: req, Per: d}
	if err := CheckFields(Fields{Quota: &q}); err != nil {
		return Quota{}, err
	}
	return q, nil
}

// String is the command-line form of q: "50000/24h0m0s", or "none".
func (q Quota) String() string {
	if !q.Enabled() {
		return "none"
	}
	return strconv.FormatInt(q.Requests, 10) + "/" + q.Per.String()
}
