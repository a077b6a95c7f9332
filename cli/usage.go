package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/redisconn"
	"github.com/keygate/keygate/server"
)

// usageReaders opens what keyops needs to read usage: the usage store the
// gateways flush to (server.UsageStore), and the Redis limiter's quota
// counters when ratelimit.backend is redis.
func usageReaders(cfg config.Config) (keyops.UsageReader, keyops.QuotaReader, func(), error) {
	var client redis.UniversalClient
	done := func() {}
	if cfg.Keystore.Backend == "redis" || cfg.RateLimit.Backend == "redis" {
		rc := cfg.Redis
		rc.ReadTimeout, rc.WriteTimeout, rc.DialTimeout = 2*time.Second, 2*time.Second, 2*time.Second
		c, err := redisconn.New(rc, os.Getenv)
		if err != nil {
			return nil, nil, nil, fieldpath.Within("redis", err)
		}
		client, done = c, func() { _ = c.Close() }
	}
	r, _ := server.UsageStore(cfg, client).(keyops.UsageReader)
	return r, server.QuotaReader(cfg, client), done, nil
}

// showUsage is `keys usage ID` and `consumers usage ID`.
func showUsage(what string, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	cfgPath := fs.Lookup("config").Value.String
	asJSON := fs.Bool("json", false, "print JSON")
	since := fs.Duration("since", 24*time.Hour, "the period counted, up to 168h (whole hours)")
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Sprintf("%s usage: want exactly one ID", what)}
	}
	var u keyops.Usage
	err := withOps(cfgPath(), func(ctx context.Context, ops *keyops.Service, _ keyops.Actor) (err error) {
		if what == "keys" {
			u, err = ops.KeyUsage(ctx, fs.Arg(0), *since)
		} else {
			u, err = ops.ConsumerUsage(ctx, fs.Arg(0), *since)
		}
		return err
	})
	if err != nil {
		return opError(err)
	}
	if *asJSON {
		return writeJSON(stdout, u)
	}
	last := "never"
	if u.LastUsedAt != nil {
		last = u.LastUsedAt.UTC().Format(time.RFC3339)
	}
	tw := fields(stdout)
	tw.row("id:", u.ID)
	if what == "consumers" {
		tw.row("keys:", orDash(strings.Join(u.Keys, ", ")))
	}
	tw.rowf("since:", u.Since)
	tw.row("last used at:", last)
	if u.Leak != nil {
		tw.row("leaked:", escapeCell(keyops.LeakSummary(u.Leak)))
	}
	tw.rowf("admitted:", u.Admitted)
	tw.row("refused:", fmt.Sprintf("rate %d, quota %d, context %d, product %d, concurrency %d", u.Rate, u.Quota, u.Context, u.Product, u.Concurrency))
	tw.row("forbidden:", fmt.Sprintf("operation %d, plan %d, address %d", u.ForbiddenOperation, u.ForbiddenPlan, u.ForbiddenAddress))
	tw.rowf("bytes in:", u.BytesIn)
	if q := u.QuotaNow; q != nil {
		line := q.Limit
		if q.Remaining != nil {
			line += fmt.Sprintf(", %d remaining, renews in %s", *q.Remaining, q.ResetsIn)
		}
		if q.Note != "" {
			line += " (" + q.Note + ")"
		}
		tw.row("quota:", line)
	}
	return tw.flush()
}
