package portal

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// beyondOffer returns the page's problem when perms ask for an operation
// the consumer and its plan do not allow, or one of another product; ""
// when every one is offered. The form offers only those; this is the
// server's refusal of a crafted form.
func (p *Portal) beyondOffer(r *http.Request, sess *Session, product string, perms []string) string {
	offered, err := p.ops.Offered(r.Context(), sess.Consumer)
	if err != nil {
		return "Your account could not be read; try again."
	}
	for _, op := range perms {
		if !slices.Contains(offered, op) || !strings.HasPrefix(op, product+":") {
			return "A key cannot get " + op + ": your account and plan allow " + strings.Join(forProduct(offered, product), ", ") + " for this product."
		}
	}
	return ""
}

func forProduct(ops []string, product string) []string {
	var out []string
	for _, op := range ops {
		if strings.HasPrefix(op, product+":") {
			out = append(out, op)
		}
	}
	return out
}

// permissionsPage offers to narrow a key: the operations it may perform
// now (it may keep some of them) and its address ranges.
func (p *Portal) permissionsPage(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok {
		return
	}
	p.permissionsForm(w, r, sess, rec, http.StatusOK, "")
}

func (p *Portal) permissionsForm(w http.ResponseWriter, r *http.Request, sess *Session, rec keystore.Record, status int, problem string) {
	d, err := p.ops.ShowKey(r.Context(), rec.ID)
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	p.render(w, r, status, "permissions", sess, map[string]any{"Key": d, "Allowed": d.Allowed,
		"CIDRs": strings.Join(rec.AllowedCIDRs, "\n"), "Problem": problem})
}

// narrowKey applies a narrowing: the operations kept must be ones the key
// may perform now, and the address ranges must lie within its current
// ones (any, when it has none). Anything wider is refused with 403.
func (p *Portal) narrowKey(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok {
		return
	}
	d, err := p.ops.ShowKey(r.Context(), rec.ID)
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	perms := r.PostForm["permissions"]
	if len(perms) == 0 {
		p.permissionsForm(w, r, sess, rec, http.StatusBadRequest, "Keep at least one operation; to stop a key altogether, revoke it.")
		return
	}
	if err := p.ops.CheckOperations(string(rec.Product), perms); err != nil {
		p.permissionsForm(w, r, sess, rec, http.StatusBadRequest, userMessage(err))
		return
	}
	for _, op := range perms {
		if !slices.Contains(d.Allowed, op) {
			p.permissionsForm(w, r, sess, rec, http.StatusForbidden, "This key cannot be given "+op+": a key can only be narrowed here, within what your account and plan allow.")
			return
		}
	}
	var cidrs []string
	for _, line := range strings.FieldsFunc(r.PostForm.Get("allowed_cidrs"), func(c rune) bool { return c == '\n' || c == ',' || c == '\r' || c == ' ' }) {
		cidrs = append(cidrs, line)
	}
	// Host bits are refused before the ranges are put in canonical form,
	// as on every way in (keyops.CheckCIDRs).
	err = keyops.CheckCIDRs("allowed_cidrs", cidrs)
	if err == nil {
		cidrs, err = policy.NormalizeCIDRs("allowed_cidrs", cidrs)
	}
	if err != nil {
		p.permissionsForm(w, r, sess, rec, http.StatusBadRequest, "Addresses: "+userMessage(err))
		return
	}
	if problem := widens(rec.AllowedCIDRs, cidrs); problem != "" {
		p.permissionsForm(w, r, sess, rec, http.StatusForbidden, problem)
		return
	}
	u := keyops.KeyUpdate{Access: keyops.AccessUpdate{Permissions: &perms}}
	if len(cidrs) > 0 {
		u.Access.AllowedCIDRs = cidrs
	}
	if _, err := p.ops.UpdateKey(r.Context(), p.actor(r, sess), rec.ID, u); err != nil {
		if errors.Is(err, keyops.ErrInvalid) {
			p.permissionsForm(w, r, sess, rec, http.StatusBadRequest, userMessage(err))
			return
		}
		p.storeError(w, r, sess, err)
		return
	}
	http.Redirect(w, r, "/keys?done=narrowed", http.StatusSeeOther)
}

// widens says why next is wider than cur (allowed_cidrs, canonical), or
// "": with cur empty (any address) anything narrows; otherwise next must
// not be empty and each of its ranges must lie within one of cur's.
func widens(cur, next []string) string {
	if len(cur) == 0 {
		return ""
	}
	if len(next) == 0 {
		return "This key is held to " + strings.Join(cur, ", ") + "; the portal cannot open it to every address."
	}
	for _, n := range next {
		np := netip.MustParsePrefix(n)
		inside := false
		for _, c := range cur {
			cp := netip.MustParsePrefix(c)
			if cp.Bits() <= np.Bits() && cp.Contains(np.Addr()) {
				inside = true
			}
		}
		if !inside {
			return n + " is outside the key's current ranges (" + strings.Join(cur, ", ") + "); the portal can only narrow them."
		}
	}
	return ""
}
