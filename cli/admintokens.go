package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// adminTokens is `keygate admin-tokens create|list|revoke`. Changes are
// audited like key changes.
func adminTokens(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"admin-tokens: want create, list or revoke"}
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("admin-tokens "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	var (
		name, scopes, expiresIn *string
		asJSON                  *bool
	)
	switch sub {
	case "create":
		name = fs.String("name", "", "who or what uses the token")
		scopes = fs.String("scopes", "", "comma-separated: "+strings.Join(admintoken.Scopes, ","))
		expiresIn = fs.String("expires-in", "", "expire the token after this long, such as 90d or 12h (empty: never)")
	case "list":
		asJSON = fs.Bool("json", false, "print a JSON array")
	case "revoke":
	default:
		return usageError{fmt.Sprintf("admin-tokens: unknown subcommand %q", sub)}
	}
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if want := map[bool]int{true: 1, false: 0}[sub == "revoke"]; fs.NArg() != want {
		return usageError{fmt.Sprintf("admin-tokens %s: want %d argument(s), got %d", sub, want, fs.NArg())}
	}
	var req admintoken.CreateRequest
	if sub == "create" {
		sc, err := admintoken.ParseScopes(*scopes)
		if err != nil {
			return usageError{"--" + err.Error()}
		}
		d, err := parseLifetime(*expiresIn)
		if err != nil {
			return usageError{err.Error()}
		}
		req = admintoken.CreateRequest{Name: *name, Scopes: sc, ExpiresIn: d}
	}
	cfg, store, done, err := loadAdmin(*cfgPath)
	if err != nil {
		return err
	}
	defer done()
	ts, ok := store.(admintoken.Store)
	if !ok {
		return fmt.Errorf("keystore.backend %s keeps no admin tokens", cfg.Keystore.Backend)
	}
	log, err := openAudit(cfg, store)
	if err != nil {
		return err
	}
	defer log.Close()
	svc, err := admintoken.New(admintoken.Config{Store: ts, Auditor: log})
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch sub {
	case "create":
		tok, t, err := svc.Create(ctx, Actor(), req)
		if err != nil {
			return opError(err)
		}
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "created admin token %s: name=%q scopes=%s expires=%s\n", t.ID, t.Name, strings.Join(t.Scopes, ","), timeOrNever(t.ExpiresAt))
		fmt.Fprintln(stderr, "This is the only time the token is shown. Store it in a secret store.")
	case "list":
		list, err := svc.List(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		if *asJSON {
			views := make([]adminTokenView, 0, len(list))
			for _, t := range list {
				views = append(views, adminTokenView{AdminToken: t, State: t.StateAt(now)})
			}
			return writeJSON(stdout, views)
		}
		tw := newTable(stdout, cols("ID!", "NAME", "SCOPES", "STATUS", "CREATED", "EXPIRES"))
		for _, t := range list {
			tw.rowf(t.ID, orDash(t.Name), strings.Join(t.Scopes, ","), t.StateAt(now),
				t.CreatedAt.UTC().Format(time.RFC3339), timeOrNever(t.ExpiresAt))
		}
		return tw.flush()
	case "revoke":
		t, err := svc.Revoke(ctx, Actor(), fs.Arg(0))
		if err != nil {
			return opError(err)
		}
		fmt.Fprintln(stdout, t.ID)
		fmt.Fprintf(stderr, "revoked admin token %s; it is refused at once\n", t.ID)
	}
	return nil
}

// adminTokenView is a token as `admin-tokens list --json` shows it
// (never the token or its hash), with its effective state.
type adminTokenView struct {
	keystore.AdminToken
	// State is active, revoked or expired.
	State keystore.Status `json:"state"`
}

func timeOrNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// parseLifetime parses a Go duration or a number of days ("90d"); ""
// is zero.
func parseLifetime(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, ok := keyops.ParseAge(s)
	if !ok {
		return 0, fmt.Errorf("--expires-in %q: want a number of days such as 90d, or a duration such as 12h", s)
	}
	return d, nil
}
