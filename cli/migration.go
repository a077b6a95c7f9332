package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/keygate/keygate/keyops"
)

// migrationCmd is `keygate migration`: for each consumer and key, the
// requests with the key itself against those with a token for it, the
// key's last direct use, and who has moved to tokens.
func migrationCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migration", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	sinceFlag := fs.String("since", "30d", "the window: days such as 30d (at most), or a duration such as 12h")
	consumer := fs.String("consumer", "", "report this consumer alone")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{"migration: unexpected arguments"}
	}
	since, err := parseLifetime(*sinceFlag)
	if err != nil || since == 0 {
		return usageError{fmt.Sprintf("migration: --since %q: want days such as 30d, or a duration such as 12h", *sinceFlag)}
	}
	var m keyops.Migration
	err = withOps(*cfgPath, func(ctx context.Context, ops *keyops.Service, _ keyops.Actor) (err error) {
		m, err = ops.Migration(ctx, keyops.MigrationQuery{Since: since, Consumer: *consumer})
		return err
	})
	if errors.Is(err, keyops.ErrNoUsage) {
		return errors.New("migration: no usage store for this configuration")
	}
	if err != nil {
		return opError(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	t := newTable(stdout, cols("CONSUMER~", "KEY!", "STATUS!", "API_KEY!", "BEARER!", "LAST DIRECT USE!", "MOVED!"))
	for _, c := range m.Consumers {
		name := c.Name
		if c.ID == "" {
			name = "(no consumer)"
		}
		for _, k := range c.Keys {
			status := string(k.Status)
			if k.Leaked {
				status += " (leaked)"
			}
			t.row(name, k.ID, status, strconv.FormatInt(k.Requests.APIKey, 10), strconv.FormatInt(k.Requests.Bearer, 10), stamp(k.Requests.LastAPIKey), yesNo(k.Moved))
		}
	}
	return t.flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
