package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/keygate/keygate/keyops"
)

// accessFlags are --permissions, --allow-cidr and --clear-allow-cidr,
// shared by `keys issue|update` and `consumers create|update`.
type accessFlags struct {
	permissions *string
	cidrs       stringList
	clear       *bool
}

func addAccessFlags(fs *flag.FlagSet, update bool) *accessFlags {
	a := &accessFlags{
		permissions: fs.String("permissions", "", "operations, comma-separated, such as registry:read (default: every operation of the product; for a consumer, no narrowing; \"default\" goes back to it)"),
	}
	fs.Var(&a.cidrs, "allow-cidr", "a client address range the key may be used from, such as 203.0.113.0/24 (repeatable; on update, replaces the list)")
	if update {
		a.clear = fs.Bool("clear-allow-cidr", false, "allow any client address again")
	}
	return a
}

// update builds the AccessUpdate of the flags that were given.
func (a *accessFlags) update(fs *flag.FlagSet) (keyops.AccessUpdate, error) {
	var u keyops.AccessUpdate
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "permissions":
			p := []string{}
			if v := strings.TrimSpace(*a.permissions); v != "default" {
				if v == "" {
					err = usageError{"--permissions: name at least one operation, such as registry:read (or default)"}
					return
				}
				for _, n := range strings.Split(v, ",") {
					p = append(p, strings.TrimSpace(n))
				}
			}
			u.Permissions = &p
		case "allow-cidr":
			u.AllowedCIDRs = append([]string(nil), a.cidrs...)
		case "clear-allow-cidr":
			u.ClearAllowedCIDRs = *a.clear
		}
	})
	return u, err
}

// printPermissions prints each operation of the key's product, whether it
// is allowed and where that comes from.
func printPermissions(w io.Writer, d keyops.KeyDetail) {
	if len(d.Permissions) == 0 {
		return
	}
	fmt.Fprintln(w, "effective permissions:")
	tw := fields(w, cols("!", "!", "")...)
	tw.indent = "  "
	for _, p := range d.Permissions {
		verdict := "allowed"
		if !p.Allowed {
			verdict = "denied by " + strings.Join(p.DeniedBy, ", ")
		}
		tw.rowf(p.Operation, verdict, "from "+orDash(strings.Join(p.Sources, ", ")))
	}
	_ = tw.flush()
	if len(d.AllowedCIDRs) > 0 {
		fmt.Fprintln(w, "allowed addresses:", strings.Join(d.AllowedCIDRs, ", "))
	}
}
