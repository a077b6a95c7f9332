package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keyops"
)

// openAudit opens the audit log of cfg (audit.file, and the Redis stream
// with the Redis keystore, through the admin's client).
func openAudit(cfg config.Config, store any) (*audit.Log, error) {
	return audit.Open(cfg.AuditConfig(redisOf(store)))
}

// redisBacked is a keystore admin that keeps its records in Redis: the
// audit stream and the token endpoint's signing keys share its client.
type redisBacked interface {
	RedisClient() redis.UniversalClient
}

// redisOf is the Redis client of a Redis-backed admin, else nil.
func redisOf(store any) redis.UniversalClient {
	if rb, ok := store.(redisBacked); ok {
		return rb.RedisClient()
	}
	return nil
}

// auditImport records a `keys import` (made, partly made or failed) in
// the audit log, and returns err or the audit log's error.
func auditImport(log *audit.Log, from string, added, skipped, cAdded, cSkipped int, err error) error {
	changes := map[string]string{
		"from": from, "keys_added": strconv.Itoa(added), "keys_skipped": strconv.Itoa(skipped),
		"consumers_added": strconv.Itoa(cAdded), "consumers_skipped": strconv.Itoa(cSkipped),
	}
	aerr := log.Audit(context.Background(), keyops.Event{Time: time.Now().UTC(), Actor: Actor(), Action: "key.import", Changes: changes, Err: err})
	if err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("keys import was made but not audited: %w", aerr)
	}
	return nil
}

// auditCmd is `keygate audit`: the newest events (all of them with
// --limit 0), printed oldest first.
func auditCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	since := fs.Duration("since", 0, "only events of the last DURATION, such as 24h (0: all)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	limit := fs.Int("limit", 100, "at most the N newest events (0: all)")
	actor := fs.String("actor", "", "only the events of this actor")
	target := fs.String("target", "", "only the events on this id")
	if err := fs.Parse(interleave(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("audit: unexpected argument %q", fs.Arg(0))}
	}
	if *since < 0 || *limit < 0 {
		return usageError{"audit: --since and --limit must not be negative"}
	}
	cfg, store, done, err := loadAdmin(*cfgPath)
	if err != nil {
		return err
	}
	defer done()
	log, err := openAudit(cfg, store)
	if err != nil {
		return err
	}
	defer log.Close()
	q := audit.Query{Actor: *actor, Target: *target, Limit: audit.MaxLimit}
	if *since > 0 {
		q.Since = time.Now().Add(-*since)
	}
	events := []audit.Event{}
	for {
		if *limit > 0 && *limit-len(events) < q.Limit {
			q.Limit = *limit - len(events)
		}
		page, next, err := log.Events(context.Background(), q)
		if err != nil {
			return err
		}
		events = append(events, page...)
		if next == "" || (*limit > 0 && len(events) >= *limit) {
			break
		}
		q.Cursor = next
	}
	slices.Reverse(events)
	if *asJSON {
		return writeJSON(stdout, events)
	}
	tw := newTable(stdout, cols("TIME!", "ACTOR", "SOURCE", "ACTION", "TARGET", "OUTCOME~", "CHANGES~"))
	for _, e := range events {
		outcome := e.Outcome
		if e.Error != "" {
			outcome += ": " + e.Error
		}
		tw.row(e.Time.UTC().Format(time.RFC3339), e.Actor, orDash(e.Source),
			e.Action, orDash(e.Target), outcome, orDash(changesText(e.Changes)))
	}
	return tw.flush()
}

// changesText is k=v pairs sorted by k, values quoted when they need it.
func changesText(m map[string]string) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(' ')
		}
		v := m[k]
		if v == "" || strings.ContainsAny(v, " \t\"=") {
			q, _ := json.Marshal(v)
			v = string(q)
		}
		b.WriteString(k + "=" + v)
	}
	return b.String()
}
