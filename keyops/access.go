package keyops

import (
	"context"
	"strings"

	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/product"
)

// AccessUpdate changes the permissions and allowed_cidrs of a key or a
// consumer. The zero value changes nothing.
type AccessUpdate struct {
	// Permissions, when not nil, replaces the permissions: operation
	// names (see policy.Operations). An empty slice goes back to the
	// default: every operation of the key's product; for a consumer, no
	// narrowing.
	Permissions *[]string
	// AllowedCIDRs, when not nil, replaces allowed_cidrs (CIDRs or
	// addresses); ClearAllowedCIDRs empties them (any address).
	AllowedCIDRs      []string
	ClearAllowedCIDRs bool
}

// IsZero reports whether u changes nothing.
func (u AccessUpdate) IsZero() bool {
	return u.Permissions == nil && u.AllowedCIDRs == nil && !u.ClearAllowedCIDRs
}

// checkPermissions checks that every name is a configured operation (of
// product, when product is not ""), each once. Errors are ErrInvalid and
// name the field.
func (s *Service) checkPermissions(product string, names []string) error {
	ops := s.limits.Operations()
	seen := map[string]bool{}
	for i, n := range names {
		if err := ops.Check([]string{n}); err != nil {
			return invalid("permissions[%d]: %v", i, err)
		}
		if seen[n] {
			return invalid("permissions[%d]: %s is listed twice", i, n)
		}
		seen[n] = true
		if product != "" && !strings.HasPrefix(n, product+":") {
			return invalid("permissions[%d]: %s is not an operation of %s keys (they have %s)", i, n, product,
				strings.Join(ops.NamesOf(ops.OfProducts(product)), ", "))
		}
	}
	return nil
}

// normalizeCIDRs checks allowed_cidrs and returns them in canonical form.
func normalizeCIDRs(cidrs []string) ([]string, error) {
	if err := CheckCIDRs("allowed_cidrs", cidrs); err != nil {
		return nil, err
	}
	out, err := policy.NormalizeCIDRs("allowed_cidrs", cidrs)
	if err != nil {
		return nil, asInvalid(err)
	}
	return out, nil
}

// prepare checks u for a key of product ("" for a consumer) and puts its
// addresses in canonical form.
func (s *Service) prepareAccess(product string, u *AccessUpdate) error {
	if u.Permissions != nil {
		if err := s.checkPermissions(product, *u.Permissions); err != nil {
			return err
		}
	}
	if u.ClearAllowedCIDRs && len(u.AllowedCIDRs) > 0 {
		return invalid("allowed_cidrs: give addresses or clear them, not both")
	}
	if u.AllowedCIDRs != nil {
		n, err := normalizeCIDRs(u.AllowedCIDRs)
		if err != nil {
			return err
		}
		u.AllowedCIDRs = n
	}
	return nil
}

// apply returns permissions and allowed_cidrs after u, recording the
// changes for the audit.
func (u AccessUpdate) apply(perms, cidrs []string, changes map[string]string) ([]string, []string) {
	if u.Permissions != nil {
		perms = nil
		if len(*u.Permissions) > 0 {
			perms = append([]string(nil), (*u.Permissions)...)
		}
		changes["permissions"] = strings.Join(perms, ",")
	}
	if u.ClearAllowedCIDRs {
		cidrs = nil
		changes["allowed_cidrs"] = ""
	}
	if len(u.AllowedCIDRs) > 0 {
		cidrs = append([]string(nil), u.AllowedCIDRs...)
		changes["allowed_cidrs"] = strings.Join(cidrs, ",")
	}
	return perms, cidrs
}

// Permission is one operation in `keys show`: whether the key may perform
// it and where that comes from.
type Permission = policy.Permission

// permissionsOf explains what the resolved access allows, for product.
func permissionsOf(e *policy.Effective, product string) ([]Permission, []string) {
	if e == nil || e.Access == nil {
		return nil, nil
	}
	return e.Access.Permissions(product), e.Access.AllowedNames()
}

// Offered returns the operations a key of the consumer with id may be
// given at most: those its own permissions and its plan's features allow
// (every operation when neither narrows), of every product. The portal
// offers only these and refuses anything else.
func (s *Service) Offered(ctx context.Context, consumerID string) ([]string, error) {
	con, err := s.store.GetConsumer(ctx, consumerID)
	if err != nil {
		return nil, err
	}
	e := s.limits.Resolve(policy.Subject{
		KeyID: "offer", Env: "live", ConsumerID: con.ID, ConsumerPlan: con.Plan,
		ConsumerPermissions: con.Permissions, ConsumerCIDRs: con.AllowedCIDRs, Products: product.All(),
	}, s.now())
	return e.Access.AllowedNames(), nil
}

// CheckOperations checks that every name is a configured operation of
// product, each once; the error is ErrInvalid and names the entry (for
// the portal's 400).
func (s *Service) CheckOperations(product string, names []string) error {
	return s.checkPermissions(product, names)
}
