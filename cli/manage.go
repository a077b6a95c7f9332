package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// openOps returns the key and consumer operations on the configured
// keystore backend, every change audited (see openAudit), and a function
// to release them. The CLI writes the
// store directly through package keyops, as the admin API does: there is
// one implementation of the rules, and the CLI works without a running
// gateway.
// loadAdmin loads the config at path and opens its keystore's admin;
// done closes what it opened.
func loadAdmin(path string) (config.Config, keyops.Store, func(), error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return cfg, nil, nil, err
	}
	store, done, err := openAdmin(cfg)
	return cfg, store, done, err
}

// withOps runs f with keyops opened over the keystore of the config at
// path, as the CLI's actor, and closes what it opened when f returns.
func withOps(path string, f func(ctx context.Context, ops *keyops.Service, actor keyops.Actor) error) error {
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	ops, done, err := openOps(cfg)
	if err != nil {
		return err
	}
	defer done()
	return f(context.Background(), ops, Actor())
}

func openOps(cfg config.Config) (*keyops.Service, func(), error) {
	store, done, err := openAdmin(cfg)
	if err != nil {
		return nil, nil, err
	}
	limits, err := cfg.Resolver()
	if err != nil {
		done()
		return nil, nil, err
	}
	log, err := openAudit(cfg, store)
	if err != nil {
		done()
		return nil, nil, err
	}
	ur, qr, udone, err := usageReaders(cfg)
	if err != nil {
		_ = log.Close()
		done()
		return nil, nil, err
	}
	release := func() { udone(); _ = log.Close(); done() }
	ops, err := keyops.New(keyops.Config{Store: store, Limits: limits, Auditor: log, Usage: ur, Quota: qr})
	if err != nil {
		release()
		return nil, nil, err
	}
	return ops, release, nil
}

// Actor is "cli:<os user>", the actor the audit log records for every
// change the CLI makes.
func Actor() keyops.Actor {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = "uid" + strconv.Itoa(os.Getuid())
	}
	return keyops.Actor{ID: "cli:" + name}
}

// opError turns an error in what was asked for into a usage error (exit
// 2); other errors (the store failed, the key is revoked) exit 1.
func opError(err error) error {
	if errors.Is(err, keyops.ErrInvalid) {
		return usageError{err.Error()}
	}
	return err
}

// limitFlags are the flags that change a plan and an override, shared by
// `keys update` and `consumers create|update`.
type limitFlags struct {
	plan, quota, until *string
	rate               *float64
	per                *time.Duration
	burst              *int
	clear              *bool
}

func addLimitFlags(fs *flag.FlagSet, update bool) *limitFlags {
	l := &limitFlags{
		plan:  fs.String("plan", "", "a plan of ratelimit.plans (\"\" with update: none)"),
		rate:  fs.Float64("rate", 0, "override: requests per --per"),
		per:   fs.Duration("per", 0, "override: the period of --rate, such as 1s"),
		burst: fs.Int("burst", 0, "override: the burst"),
		quota: fs.String("quota", "", "override: the quota, REQUESTS/PERIOD such as 50000/24h, or none"),
		until: fs.String("until", "", "the override ends at this RFC 3339 time and the limit falls back by itself (never: permanent)"),
	}
	if update {
		l.clear = fs.Bool("clear-override", false, "drop the override (before applying --rate, --per, --burst, --quota)")
	}
	return l
}

// update builds the LimitUpdate of the flags that were given.
func (l *limitFlags) update(fs *flag.FlagSet) (keyops.LimitUpdate, error) {
	var u keyops.LimitUpdate
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "plan":
			u.Plan = l.plan
		case "rate":
			u.Rate = l.rate
		case "per":
			u.Per = l.per
		case "burst":
			u.Burst = l.burst
		case "quota":
			q, qerr := parseQuota(*l.quota)
			if qerr != nil {
				err = fmt.Errorf("--quota: %w", qerr)
			}
			u.Quota = &q
		case "until":
			var t time.Time
			if *l.until != "never" {
				if t, err = time.Parse(time.RFC3339, *l.until); err != nil {
					err = fmt.Errorf("--until: want an RFC 3339 time such as 2026-12-31T00:00:00Z, or never")
				}
			}
			u.Until = &t
		case "clear-override":
			u.ClearOverride = *l.clear
		}
	})
	if err == nil {
		// The same bounds as config, the admin API and the portal.
		var fe *policy.FieldError
		if errors.As(policy.CheckFields(policy.Fields{Rate: u.Rate, Per: u.Per, Burst: u.Burst, Quota: u.Quota, NoQuotaOK: true}), &fe) {
			flagName, _, _ := strings.Cut(fe.Field, ".")
			err = fmt.Errorf("--%s: %s", flagName, fe)
		}
	}
	if err != nil {
		return keyops.LimitUpdate{}, usageError{err.Error()}
	}
	return u, nil
}

func keysManage(sub string, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	cfgPath := fs.Lookup("config").Value
	var (
		asJSON *bool
		lf     *limitFlags
		af     *accessFlags
		name   *string
	)
	if sub == "show" {
		asJSON = fs.Bool("json", false, "print JSON")
	} else {
		name = fs.String("name", "", "a new name for the key")
		lf = addLimitFlags(fs, true)
		af = addAccessFlags(fs, true)
	}
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Sprintf("keys %s: want exactly one key ID", sub)}
	}
	id := fs.Arg(0)
	var u keyops.KeyUpdate
	if sub == "update" {
		var err error
		if u.Limits, err = lf.update(fs); err != nil {
			return err
		}
		if u.Access, err = af.update(fs); err != nil {
			return err
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "name" {
				u.Name = name
			}
		})
	}
	return withOps(cfgPath.String(), func(ctx context.Context, ops *keyops.Service, actor keyops.Actor) error {
		if sub == "update" {
			rec, err := ops.UpdateKey(ctx, actor, id, u)
			if err != nil {
				return opError(err)
			}
			fmt.Fprintf(stderr, "updated %s; running gateways apply it within a second\n", rec.ID)
			asJSON = new(bool)
		}
		d, err := ops.ShowKey(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, d)
		}
		printKey(stdout, d)
		return nil
	})
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printKey(w io.Writer, d keyops.KeyDetail) {
	tw := fields(w)
	exp := "never"
	if d.ExpiresAt != nil {
		exp = d.ExpiresAt.UTC().Format(time.RFC3339)
	}
	tw.rowf("id", d.ID)
	tw.rowf("name", orDash(d.Name))
	tw.rowf("product", d.Product)
	tw.rowf("env", d.Env)
	tw.rowf("context", orDash(d.Context))
	tw.rowf("consumer", orDash(d.Consumer))
	tw.rowf("status", d.Status)
	tw.rowf("created", d.CreatedAt.UTC().Format(time.RFC3339))
	tw.rowf("expires", exp)
	tw.rowf("plan", orDash(d.Plan))
	if d.Override != nil {
		b, _ := json.Marshal(d.Override)
		tw.row("override", string(b))
	}
	if d.Leak != nil {
		tw.row("leaked", escapeCell(keyops.LeakSummary(d.Leak)))
	}
	_ = tw.flush()
	printLimit(w, d.Limit, "effective limit")
	printPermissions(w, d)
	for _, warn := range d.Warnings {
		fmt.Fprintln(w, "note:", escapeCell(warn))
	}
}

func printLimit(w io.Writer, l *keyops.Limit, title string) {
	fmt.Fprintf(w, "%s (bucket %s, scope %s):\n", title, escapeCell(l.Bucket), l.Scope)
	tw := fields(w, cols("!", "!", "")...)
	tw.indent = "  "
	tw.rowf("rate", strconv.FormatFloat(l.Rate, 'g', -1, 64), l.Sources["rate"])
	tw.rowf("per", l.Per, l.Sources["per"])
	tw.rowf("burst", l.Burst, l.Sources["burst"])
	tw.rowf("quota", l.Quota, l.Sources["quota"])
	_ = tw.flush()
	if l.Then != nil {
		printLimit(w, l.Then, "from "+l.Until.UTC().Format(time.RFC3339))
	}
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func consumers(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"consumers: want create, list, show, update, usage or delete"}
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("consumers "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	var (
		name       *string
		meta, ctxs stringList
		anyContext *bool
		lf         *limitFlags
		af         *accessFlags
		asJSON     *bool
	)
	switch sub {
	case "create", "update":
		name = fs.String("name", "", "the consumer's name, such as the customer")
		fs.Var(&meta, "meta", "metadata KEY=VALUE (repeatable; KEY= removes it on update)")
		fs.Var(&ctxs, "context", "a context UUID its keys may be bound to (repeatable; on update, replaces the list)")
		lf = addLimitFlags(fs, sub == "update")
		af = addAccessFlags(fs, sub == "update")
		anyContext = fs.Bool("any-context", false, "allow its keys any context, in the self-service portal too (on update, drops its contexts; =false unsets it)")
	case "list", "show":
		asJSON = fs.Bool("json", false, "print JSON")
	case "delete":
	case "usage":
		return showUsage("consumers", fs, args, stdout)
	default:
		return usageError{fmt.Sprintf("consumers: unknown subcommand %q", sub)}
	}
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	wantID := sub == "show" || sub == "update" || sub == "delete"
	if wantID && fs.NArg() != 1 {
		return usageError{fmt.Sprintf("consumers %s: want exactly one consumer ID", sub)}
	}
	if !wantID && fs.NArg() != 0 {
		return usageError{fmt.Sprintf("consumers %s: unexpected argument %q", sub, fs.Arg(0))}
	}
	metadata := map[string]string{}
	for _, kv := range meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usageError{fmt.Sprintf("--meta %q: want KEY=VALUE", kv)}
		}
		metadata[k] = v
	}
	var lu keyops.LimitUpdate
	if lf != nil {
		var err error
		if lu, err = lf.update(fs); err != nil {
			return err
		}
	}
	var au keyops.AccessUpdate
	if af != nil {
		var err error
		if au, err = af.update(fs); err != nil {
			return err
		}
	}
	return withOps(*cfgPath, func(ctx context.Context, ops *keyops.Service, actor keyops.Actor) error {
		switch sub {
		case "create":
			spec := keyops.ConsumerSpec{Name: *name, Metadata: metadata, Contexts: ctxs, AnyContext: *anyContext, Limits: lu, Access: au}
			if lu.Plan != nil {
				spec.Plan = *lu.Plan
			}
			for k, v := range metadata {
				if v == "" {
					return usageError{fmt.Sprintf("--meta %s=: a value is required", k)}
				}
			}
			if len(metadata) == 0 {
				spec.Metadata = nil
			}
			c, err := ops.CreateConsumer(ctx, actor, spec)
			if err != nil {
				return opError(err)
			}
			fmt.Fprintln(stdout, c.ID)
			fmt.Fprintf(stderr, "created consumer %s: name=%q\n", c.ID, c.Name)
		case "list":
			cons, err := ops.ListConsumers(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				if cons == nil {
					cons = []keystore.Consumer{}
				}
				return writeJSON(stdout, cons)
			}
			tw := newTable(stdout, cols("ID!", "NAME", "PLAN", "OVERRIDE~", "CONTEXTS~", "CREATED"))
			for _, c := range cons {
				ov := "-"
				if c.Override != nil {
					b, _ := json.Marshal(c.Override)
					ov = string(b)
				}
				tw.row(c.ID, orDash(c.Name), orDash(c.Plan), ov, orDash(strings.Join(c.Contexts, ",")), c.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.flush()
		case "show":
			d, err := ops.ShowConsumer(ctx, fs.Arg(0))
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(stdout, d)
			}
			printConsumer(stdout, d)
		case "update":
			u := keyops.ConsumerUpdate{Limits: lu, Access: au}
			fs.Visit(func(f *flag.Flag) {
				switch f.Name {
				case "name":
					u.Name = name
				case "context":
					c := []string(ctxs)
					u.Contexts = &c
				case "any-context":
					u.AnyContext = anyContext
					if *anyContext {
						u.Contexts = &[]string{}
					}
				}
			})
			if len(metadata) > 0 {
				u.Metadata = metadata
			}
			c, err := ops.UpdateConsumer(ctx, actor, fs.Arg(0), u)
			if err != nil {
				return opError(err)
			}
			fmt.Fprintf(stderr, "updated consumer %s; running gateways apply it within a second\n", c.ID)
			d, err := ops.ShowConsumer(ctx, c.ID)
			if err != nil {
				return err
			}
			printConsumer(stdout, d)
		case "delete":
			c, err := ops.DeleteConsumer(ctx, actor, fs.Arg(0))
			if err != nil {
				return opError(err)
			}
			fmt.Fprintln(stdout, c.ID)
			fmt.Fprintf(stderr, "deleted consumer %s\n", c.ID)
		}
		return nil
	})
}

func printConsumer(w io.Writer, d keyops.ConsumerDetail) {
	tw := fields(w)
	tw.row("id", d.ID)
	tw.row("name", orDash(d.Name))
	tw.row("plan", orDash(d.Plan))
	if d.Override != nil {
		b, _ := json.Marshal(d.Override)
		tw.row("override", string(b))
	}
	tw.row("contexts", orDash(strings.Join(d.Contexts, ", ")))
	tw.row("permissions", orDefault(strings.Join(d.Permissions, ", "), "any (no narrowing)"))
	tw.row("allowed addresses", orDefault(strings.Join(d.AllowedCIDRs, ", "), "any"))
	keys := make([]string, 0, len(d.Metadata))
	for k := range d.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tw.row("metadata."+k, d.Metadata[k])
	}
	tw.row("created", d.CreatedAt.UTC().Format(time.RFC3339))
	for _, st := range []keystore.Status{keystore.Active, keystore.Expired, keystore.Revoked} {
		tw.rowf("keys "+string(st), orDash(strings.Join(d.Keys[st], ", ")))
	}
	_ = tw.flush()
}

// parseQuota parses --quota: REQUESTS/PERIOD or none.
func parseQuota(s string) (policy.Quota, error) { return policy.ParseQuota(s) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
