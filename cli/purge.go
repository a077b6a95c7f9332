package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// keysPurge deletes the keys that ended more than --older-than ago, in one
// pass over the key set, printing each purged id on stdout as its batch
// is done, and the count on stderr.
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
		if *dryRun {
			verb = "would purge"
		}
		total := 0
		_, err := ops.PurgeKeys(ctx, actor, keyops.PurgeRequest{OlderThan: d, DryRun: *dryRun}, func(recs []keystore.Record) error {
			for _, r := range recs {
				fmt.Fprintln(stdout, r.ID)
			}
			total += len(recs)
			return nil
		})
		if err != nil {
			fmt.Fprintf(stderr, "%s %d keys before the error\n", verb, total)
			return opError(err)
		}
		fmt.Fprintf(stderr, "%s %d keys that ended before %s ago\n", verb, total, *olderThan)
		return nil
	})
}
