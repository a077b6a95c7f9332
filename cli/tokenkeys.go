package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/tokenissuer"
)

// tokenKeys runs `keygate token-keys rotate|list`: the signing keys of
// auth.token_endpoint, in the keystore backend. Running replicas pick a
// change up within a second. No private key is ever printed.
func tokenKeys(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"token-keys: want rotate or list"}
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("token-keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	now := fs.Bool("now", false, "rotate: withdraw the previous keys at once, refusing their tokens (emergency)")
	asJSON := fs.Bool("json", false, "list: print JSON")
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{"token-keys " + sub + ": unexpected arguments"}
	}
	cfg, admin, done, err := loadAdmin(*cfgPath)
	if err != nil {
		return err
	}
	defer done()
	store := server.TokenKeyStore(cfg, redisOf(admin))
	ctx := context.Background()
	switch sub {
	case "rotate":
		log, err := openAudit(cfg, admin)
		if err != nil {
			return err
		}
		defer log.Close()
		k, err := tokenissuer.Rotate(ctx, store, cfg.Auth.TokenEndpoint, *now, time.Now())
		if err != nil {
			return err
		}
		server.RotationAuditor{Auditor: log, Actor: Actor()}.SigningKeyRotated(ctx, k.Kid, k.Alg, *now)
		what := "previous keys stay published until their tokens expire"
		if *now {
			what = "previous keys withdrawn: their tokens are refused"
		}
		fmt.Fprintf(stdout, "new signing key %s (%s); %s\n", k.Kid, k.Alg, what)
		return nil
	case "list":
		infos, err := tokenissuer.List(ctx, store, time.Now())
		if err != nil {
			return err
		}
		if *asJSON {
			if infos == nil {
				infos = []tokenissuer.KeyInfo{}
			}
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(infos)
		}
		t := newTable(stdout, cols("KID!", "ALG!", "CREATED!", "RETIRING!", "WITHDRAWN AT!"))
		for _, k := range infos {
			t.row(k.Kid, k.Alg, stamp(k.Created), stamp(k.Retiring), stamp(k.Withdraw))
		}
		return t.flush()
	}
	return usageError{"token-keys: want rotate or list, got " + sub}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
