package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/keygate/keygate/keyops"
)

// purgeBatch is how many keys one step of `keys purge` deletes (and
// audits) before it reports and goes on.
const purgeBatch = 1000

// keysPurge deletes the keys that ended more than --older-than ago, a
// batch at a time, printing each purged id on stdout and a count per
// batch on stderr.
func keysPurge(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	cfgPath := fs.Lookup("config").Value
	olderThan := fs.String("older-than", "", "purge the keys revoked or expired more than this long ago: days such as 90d, or a duration such as 12h (required)")
	dryRun := fs.Bool("dry-run", false, "print the keys a purge would delete, and delete nothing")
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{"keys purge: unexpected arguments"}
	}
	d, err := parseLifetime(*olderThan)
	if err != nil || *olderThan == "" {
		return usageError{fmt.Sprintf("keys purge: --older-than %q: want days such as 90d, or a duration such as 12h", *olderThan)}
	}
	return withOps(cfgPath.String(), func(ctx context.Context, ops *keyops.Service, actor keyops.Actor) error {
		verb := "purged"
		limit := purgeBatch
		if *dryRun {
			verb, limit = "would purge", 0 // a dry run finds them all at once
		}
		total := 0
		for {
			res, err := ops.PurgeKeys(ctx, actor, keyops.PurgeRequest{OlderThan: d, Limit: limit, DryRun: *dryRun})
			for _, r := range res.Keys {
				fmt.Fprintln(stdout, r.ID)
			}
			total += len(res.Keys)
			if err != nil {
				fmt.Fprintf(stderr, "%s %d keys before the error\n", verb, total)
				return opError(err)
			}
			if !res.More || len(res.Keys) == 0 {
				fmt.Fprintf(stderr, "%s %d keys that ended before %s ago\n", verb, total, *olderThan)
				return nil
			}
			fmt.Fprintf(stderr, "%s %d keys so far\n", verb, total)
		}
	})
}
