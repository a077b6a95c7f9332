package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/keygate/keygate/product"
)

// Access is what a key may do and where from, resolved once when the key
// loads (see Resolver.Resolve), so that a request costs a match, a bit
// test and, with address rules, a prefix walk. The key may perform an
// operation when its own permissions, its consumer's and its plan's
// features all include it; and it may be used from an address that its
// own allowed_cidrs and its consumer's (each when not empty) contain. An
// Access is immutable and safe to share; the nil *Access allows
// everything (a principal without a key record).
type Access struct {
	// Allowed is Key & Consumer & Plan.
	Allowed OpSet
	// Key is the key's own permissions (or every operation of its product
	// when KeyDefault); Consumer and Plan are every operation when they do
	// not narrow (ConsumerNarrows, PlanName == "").
	Key, Consumer, Plan OpSet
	KeyDefault          bool
	ConsumerNarrows     bool
	// PlanName is the plan in effect when it carries features; "" when
	// none does.
	PlanName string
	// KeyAddrs and ConsumerAddrs are the allowed_cidrs; empty means any
	// address. BadAddrs is set when a stored entry did not parse: no
	// address is then allowed (a damaged record refuses, never admits).
	KeyAddrs, ConsumerAddrs []netip.Prefix
	BadAddrs                bool

	ops *Operations
}

// Denial says which rule refused a request; DenyNone lets it through.
type Denial uint8

const (
	DenyNone Denial = iota
	// DenyAddress: the client address is outside allowed_cidrs.
	DenyAddress
	// DenyOperation: the key's (or its consumer's) permissions lack the
	// operation.
	DenyOperation
	// DenyPlan: the plan's features lack the operation.
	DenyPlan
)

// Decide says whether a request for op from client may go on. The
// address is checked first, then the key's and its consumer's
// permissions, then the plan's features. The nil *Access allows all.
func (a *Access) Decide(op Op, client netip.Addr) Denial {
	if a == nil {
		return DenyNone
	}
	if a.BadAddrs || len(a.KeyAddrs) > 0 || len(a.ConsumerAddrs) > 0 {
		if !a.AddrAllowed(client) {
			return DenyAddress
		}
	}
	if a.Allowed.Has(op) {
		return DenyNone
	}
	if !a.Key.Has(op) || !a.Consumer.Has(op) {
		return DenyOperation
	}
	return DenyPlan
}

// AddrAllowed reports whether client passes the address rules.
func (a *Access) AddrAllowed(client netip.Addr) bool {
	if a == nil {
		return true
	}
	if a.BadAddrs {
		return false
	}
	client = client.Unmap()
	return inPrefixes(a.KeyAddrs, client) && inPrefixes(a.ConsumerAddrs, client)
}

// inPrefixes: empty means any address.
func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Permission is one operation of a key's products in `keys show` and the
// admin API's key view: whether the key may perform it, and what grants
// or withholds it.
type Permission struct {
	Operation string `json:"operation"`
	Allowed   bool   `json:"allowed"`
	// Sources say where the grant came from: "key" (its permissions),
	// "key default" (every operation of its product), "consumer", "plan
	// NAME". DeniedBy names the rules that withhold it (same words).
	Sources  []string `json:"sources,omitempty"`
	DeniedBy []string `json:"denied_by,omitempty"`
}

// Permissions lists every operation of the key's products with its
// sources. The nil *Access gives nil.
func (a *Access) Permissions(products ...string) []Permission {
	if a == nil || a.ops == nil {
		return nil
	}
	var out []Permission
	for _, name := range a.ops.NamesOf(a.ops.OfProducts(products...)) {
		op := a.ops.index[name]
		p := Permission{Operation: name, Allowed: a.Allowed.Has(op)}
		keySrc := "key"
		if a.KeyDefault {
			keySrc = "key default"
		}
		mark := func(has bool, src string) {
			if has {
				p.Sources = append(p.Sources, src)
			} else {
				p.DeniedBy = append(p.DeniedBy, src)
			}
		}
		mark(a.Key.Has(op), keySrc)
		if a.ConsumerNarrows {
			mark(a.Consumer.Has(op), "consumer")
		}
		if a.PlanName != "" {
			mark(a.Plan.Has(op), "plan "+a.PlanName)
		}
		out = append(out, p)
	}
	return out
}

// Grant is the Access of a credential that may perform exactly the
// operations of set, from any address (an OAuth 2.0 token, whose scopes
// grant them).
func Grant(ops *Operations, set OpSet) *Access {
	return &Access{ops: ops, Allowed: set, Key: set, Consumer: ops.All(), Plan: ops.All()}
}

// AllowedNames is the names of the operations the key may perform.
func (a *Access) AllowedNames() []string {
	if a == nil || a.ops == nil {
		return nil
	}
	return a.ops.NamesOf(a.Allowed)
}

// ParseCIDRs parses allowed_cidrs: CIDRs ("10.0.0.0/8") or bare addresses
// (one host), IPv4-mapped IPv6 ones as IPv4, each masked. field names the
// option in errors ("allowed_cidrs[0]: …").
func ParseCIDRs(field string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, c := range cidrs {
		p, err := parseCIDR(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %q is neither a CIDR (203.0.113.0/24) nor an IP address", field, i, c)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseCIDR(c string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(c)
	if err != nil {
		a, aerr := netip.ParseAddr(c)
		if aerr != nil || a.Zone() != "" {
			return netip.Prefix{}, err
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zone not allowed")
	}
	if p.Addr().Is4In6() {
		bits := p.Bits() - 96
		if bits < 0 {
			bits = 0
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), bits)
	}
	return p.Masked(), nil
}

// NormalizeCIDRs parses and writes back cidrs in canonical form
// ("10.1.2.3" → "10.1.2.3/32", "::ffff:10.0.0.0/104" → "10.0.0.0/8"),
// for storing.
func NormalizeCIDRs(field string, cidrs []string) ([]string, error) {
	ps, err := ParseCIDRs(field, cidrs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out, nil
}

// access resolves s's Access with plan in effect ("" for none). A key
// that no rule narrows (the common case) shares its product's default
// Access, so that it costs no memory of its own.
func (r *Resolver) access(s Subject, plan string) *Access {
	if len(s.Products) == 1 && s.KeyPermissions == nil && len(s.KeyCIDRs) == 0 &&
		(s.ConsumerID == "" || s.ConsumerPermissions == nil && len(s.ConsumerCIDRs) == 0) &&
		(plan == "" || r.plans[plan].Features == nil) {
		if a, ok := r.defaults[s.Products[0]]; ok {
			return a
		}
	}
	return r.newAccess(s, plan)
}

// defaultAccess builds the shared default Access of each product.
func (r *Resolver) defaultAccess() {
	r.defaults = map[string]*Access{}
	for _, p := range product.All() {
		r.defaults[p] = r.newAccess(Subject{Products: []string{p}}, "")
	}
}

// newAccess builds s's Access with plan in effect.
func (r *Resolver) newAccess(s Subject, plan string) *Access {
	ops := r.ops
	a := &Access{ops: ops, Consumer: ops.All(), Plan: ops.All()}
	products := s.Products
	if s.KeyPermissions == nil {
		a.Key, a.KeyDefault = ops.OfProducts(products...), true
	} else {
		a.Key = ops.lenientSet(s.KeyPermissions)
	}
	if s.ConsumerID != "" && s.ConsumerPermissions != nil {
		a.Consumer, a.ConsumerNarrows = ops.lenientSet(s.ConsumerPermissions), true
	}
	if p, ok := r.plans[plan]; ok && plan != "" && p.Features != nil {
		a.Plan, a.PlanName = ops.lenientSet(p.Features), plan
	}
	a.Allowed = a.Key & a.Consumer & a.Plan
	var err error
	if a.KeyAddrs, err = ParseCIDRs("allowed_cidrs", s.KeyCIDRs); err != nil {
		a.BadAddrs = true
	}
	if s.ConsumerID != "" {
		if a.ConsumerAddrs, err = ParseCIDRs("allowed_cidrs", s.ConsumerCIDRs); err != nil {
			a.BadAddrs = true
		}
	}
	return a
}

// lenientSet is Set without the error: a name that is no longer an
// operation (removed from the config since) grants nothing.
func (o *Operations) lenientSet(names []string) OpSet {
	var s OpSet
	for _, n := range names {
		if i, ok := o.index[n]; ok {
			s |= 1 << uint(i)
		}
	}
	return s
}
