package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/redisconn"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// openAdmin returns the admin of the configured keystore backend, and a
// function to release it.
func openAdmin(cfg config.Config) (keyops.Store, func(), error) {
	switch cfg.Keystore.Backend {
	case "file":
		return &keystore.FileAdmin{Path: cfg.Keystore.File}, func() {}, nil
	case "redis":
		return newRedisAdmin(cfg)
	}
	return nil, nil, fmt.Errorf("keystore.backend: %q is not available", cfg.Keystore.Backend)
}

// newRedisAdmin opens the Redis keystore's admin of cfg, and a function
// that closes its client.
func newRedisAdmin(cfg config.Config) (*keystore.RedisAdmin, func(), error) {
	rc := cfg.Redis
	// The CLI is not on the request path: allow Redis a moment longer.
	rc.ReadTimeout, rc.WriteTimeout, rc.DialTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	client, err := redisconn.New(rc, os.Getenv)
	if err != nil {
		return nil, nil, fieldpath.Within("redis", err)
	}
	a := &keystore.RedisAdmin{Client: client, Prefix: cfg.Redis.KeyPrefix, WaitReplicas: cfg.Keystore.WaitReplicas, WaitTimeout: cfg.Keystore.WaitTimeout}
	return a, func() { _ = client.Close() }, nil
}

func keys(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"keys: want issue, list, show, update, usage, revoke, rotate, purge or import"}
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	var (
		product, env, contextID, name *string
		consumer                      *string
		expiresIn, grace              *time.Duration
		asJSON                        *bool
		af                            *accessFlags
	)
	switch sub {
	case "issue":
		product = fs.String("product", "", "extraction or registry")
		env = fs.String("env", "", "live or test")
		contextID = fs.String("context", "", "context UUID the key is bound to (required for extraction keys)")
		name = fs.String("name", "", "a name for the key, such as the application or team member")
		expiresIn = fs.Duration("expires-in", 0, "expire the key after this long (0: never)")
		consumer = fs.String("consumer", "", "the consumer (con_...) that owns the key")
		af = addAccessFlags(fs, false)
	case "list":
		asJSON = fs.Bool("json", false, "print a JSON array")
		consumer = fs.String("consumer", "", "only the keys of this consumer")
	case "revoke":
	case "rotate":
		grace = fs.Duration("grace", 0, "how long the old key keeps working (0: revoked at once)")
	case "import":
		return keysImport(fs, args, stdout, stderr)
	case "purge":
		return keysPurge(fs, args, stdout, stderr)
	case "update", "show":
		return keysManage(sub, fs, args, stdout, stderr)
	case "check-format":
		return keysCheckFormat(args, stdout)
	case "usage":
		return showUsage("keys", fs, args, stdout)
	default:
		return usageError{fmt.Sprintf("keys: unknown subcommand %q", sub)}
	}
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	var access keyops.AccessUpdate
	if af != nil {
		var err error
		if access, err = af.update(fs); err != nil {
			return err
		}
	}
	return withOps(*cfgPath, func(ctx context.Context, ops *keyops.Service, actor keyops.Actor) error {
		switch sub {
		case "issue":
			req := keystore.IssueRequest{Product: keystore.Product(*product), Env: keystore.Env(*env), Context: *contextID, Name: *name, ExpiresIn: *expiresIn, Consumer: *consumer}
			if access.Permissions != nil {
				req.Permissions = *access.Permissions
			}
			req.AllowedCIDRs = access.AllowedCIDRs
			if err := req.Validate(); err != nil {
				return usageError{err.Error()}
			}
			key, rec, err := ops.IssueKey(ctx, actor, req)
			if err != nil {
				return opError(err)
			}
			fmt.Fprintln(stdout, key)
			describe(stderr, "issued", rec)
			fmt.Fprintln(stderr, "This is the only time the key is shown. Store it in a secret store.")
		case "list":
			recs, err := ops.ListKeys(ctx, keyops.KeyFilter{Consumer: *consumer})
			if err != nil {
				return err
			}
			last, err := ops.LastUsed(ctx, recs)
			if err != nil {
				return err
			}
			return printList(stdout, recs, last, *asJSON)
		case "revoke", "rotate":
			if fs.NArg() != 1 {
				return usageError{fmt.Sprintf("keys %s: want exactly one key ID", sub)}
			}
			id := fs.Arg(0)
			if sub == "revoke" {
				rec, err := ops.RevokeKey(ctx, actor, id)
				if err != nil {
					return opError(err)
				}
				describe(stderr, "revoked", rec)
				fmt.Fprintln(stdout, rec.ID)
				return nil
			}
			if *grace < 0 {
				return usageError{"keys rotate: --grace must not be negative"}
			}
			key, rec, err := ops.RotateKey(ctx, actor, id, *grace)
			if err != nil {
				return opError(err)
			}
			fmt.Fprintln(stdout, key)
			describe(stderr, "issued", rec)
			if *grace > 0 {
				fmt.Fprintf(stderr, "The old key %s keeps working for %s, then it is rejected.\n", id, *grace)
			} else {
				fmt.Fprintf(stderr, "The old key %s is revoked now.\n", id)
			}
			fmt.Fprintln(stderr, "This is the only time the new key is shown. Store it in a secret store.")
		}
		return nil
	})
}

// interleave moves flags after positional arguments to the front, so that
// `keys revoke ID --config FILE` works like `keys revoke --config FILE ID`.
func interleave(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && !isBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func isBoolFlag(a string) bool {
	switch strings.TrimLeft(a, "-") {
	case "json", "clear-override", "any-context":
		return true
	}
	return false
}

func describe(w io.Writer, what string, r keystore.Record) {
	exp := "never"
	if !r.ExpiresAt.IsZero() {
		exp = r.ExpiresAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%s %s: product=%s env=%s context=%s name=%q expires=%s", what, r.ID, r.Product, r.Env, orDash(r.Context), r.Name, exp)
	if r.Consumer != "" {
		fmt.Fprintf(w, " consumer=%s", r.Consumer)
	}
	fmt.Fprintln(w)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printList(w io.Writer, recs []keystore.Record, last map[string]time.Time, asJSON bool) error {
	now := time.Now()
	if asJSON {
		type view struct {
			keystore.RecordView
			LastUsedAt *time.Time `json:"last_used_at"`
		}
		views := make([]view, 0, len(recs))
		for _, r := range recs {
			v := view{RecordView: r.View(now)}
			if t, ok := last[r.ID]; ok {
				v.LastUsedAt = &t
			}
			views = append(views, v)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(views)
	}
	tw := newTable(w, cols("ID!", "NAME", "PRODUCT", "ENV", "CONTEXT", "STATUS", "CREATED", "EXPIRES", "CONSUMER", "PLAN", "LAST USED"))
	for _, r := range recs {
		exp := "never"
		if !r.ExpiresAt.IsZero() {
			exp = r.ExpiresAt.UTC().Format(time.RFC3339)
		}
		used := "never"
		if t, ok := last[r.ID]; ok {
			used = t.UTC().Format(time.RFC3339)
		}
		tw.rowf(r.ID, orDash(r.Name), r.Product, r.Env, orDash(r.Context), r.StateAt(now), r.CreatedAt.UTC().Format(time.RFC3339), exp, orDash(r.Consumer), orDash(r.Plan), used)
	}
	return tw.flush()
}

func keysImport(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	cfgPath := fs.Lookup("config").Value
	from := fs.String("from", "", "the file keystore (YAML) to import")
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if *from == "" {
		return usageError{"keys import: --from FILE is required"}
	}
	cfg, err := loadConfig(cfgPath.String())
	if err != nil {
		return err
	}
	if cfg.Keystore.Backend != "redis" {
		return usageError{"keys import: keystore.backend must be redis in --config; import moves a file keystore into Redis"}
	}
	// Check the whole file before writing anything, then stream it into
	// Redis a batch at a time: one batch of records in memory.
	total, cons, err := keystore.CheckFile(*from)
	if err != nil {
		return fmt.Errorf("keys import: %s: %w", *from, err)
	}
	ra, log, done, err := openRedisAdmin(cfg)
	if err != nil {
		return err
	}
	defer done()
	ctx := context.Background()
	cAdded, cSkipped, err := ra.ImportConsumers(ctx, cons)
	var added, skipped int
	if err == nil {
		p := newImportProgress(stderr, total)
		err = keystore.StreamFile(*from, importBatch, func(batch []keystore.Record) error {
			a, s, err := ra.ImportBatch(ctx, batch)
			added, skipped = added+a, skipped+s
			p.add(len(batch))
			return err
		})
		p.finish()
		if err == nil {
			err = ra.AnnounceAll(ctx)
		}
	}
	if err := auditImport(log, *from, added, skipped, cAdded, cSkipped, err); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "imported %d keys, skipped %d already in Redis\n", added, skipped)
	if len(cons) > 0 {
		fmt.Fprintf(stdout, "imported %d consumers, skipped %d already in Redis\n", cAdded, cSkipped)
	}
	return nil
}

// openRedisAdmin opens the Redis keystore's admin of cfg (whose
// keystore.backend is redis) and its audit log, and a function that
// closes both.
func openRedisAdmin(cfg config.Config) (*keystore.RedisAdmin, *audit.Log, func(), error) {
	ra, done, err := newRedisAdmin(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	log, err := openAudit(cfg, ra)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return ra, log, func() { _ = log.Close(); done() }, nil
}

// importBatch is how many records `keys import` writes per pipelined
// batch.
const importBatch = 1000

// importProgress shows how far an import is: a progress bar on a
// terminal, a plain count every 100,000 keys otherwise.
type importProgress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int
	done  int
}

func newImportProgress(w io.Writer, total int) *importProgress {
	p := &importProgress{w: w, total: total}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("importing keys"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("keys"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
	}
	return p
}

func (p *importProgress) add(n int) {
	before := p.done
	p.done += n
	if p.bar != nil {
		_ = p.bar.Add(n)
		return
	}
	if p.done/100_000 != before/100_000 {
		fmt.Fprintf(p.w, "imported %d of %d keys\n", p.done, p.total)
	}
}

func (p *importProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
