package keyops

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/usage"
)

// MigrationKey is one key in the migration report.
type MigrationKey struct {
	ID     string          `json:"id"`
	Name   string          `json:"name"`
	Status keystore.Status `json:"status"`
	// Requests are the key's requests over the window: with the key
	// itself (api_key) and with a token for it (bearer), and the last
	// time the key authenticated directly.
	Requests usage.MethodCounts `json:"requests"`
	// Moved: tokens only, for the whole window.
	Moved bool `json:"moved"`
	// Leaked: the key was found in public (secret scanning).
	Leaked bool `json:"leaked,omitempty"`
}

// MigrationConsumer is a consumer and its keys in the report; the keys
// of no consumer are under the consumer with the empty id.
type MigrationConsumer struct {
	ID   string         `json:"id"`
	Name string         `json:"name"`
	Keys []MigrationKey `json:"keys"`
	// Moved: at least one key used tokens and none the key itself, for
	// the whole window.
	Moved bool `json:"moved"`
}

// Migration is the report of who has moved from API keys to tokens.
type Migration struct {
	Since     string              `json:"since"`
	From      time.Time           `json:"from"`
	Consumers []MigrationConsumer `json:"consumers"`
}

// MigrationQuery asks for the migration report.
type MigrationQuery struct {
	// Since is the window: whole days, at most 30.
	Since time.Duration
	// Consumer, when set, narrows the report to that consumer.
	Consumer string
	// MaxKeys, when positive, refuses the whole report (ErrInvalid) when
	// the store holds more keys than this: the admin API's bound
	// (MaxReportKeys).
	MaxKeys int
}

// MaxReportKeys is the most keys the admin API reports on in one whole
// migration report: the whole report reads every key, so its time and the
// replica's memory grow with the key set, and a million keys outlast the
// admin API's write timeout (measured with bench/keyload's fill-redis
// store; docs/guides/oauth.md): past this, ask per consumer.
const MaxReportKeys = 100_000

// Migration reports, for each consumer and each of its keys (revoked and
// expired ones too), the requests by method over the last q.Since (whole
// days, at most 30), the last direct use of each key, and who has moved.
// With q.Consumer set, it reports that consumer alone (an error wrapping
// keystore.ErrConsumerNotFound when there is none), reading its keys
// alone where the Service finds a consumer's keys without reading every
// record (Config.ConsumerKeys): the whole report reads every record, and
// is refused past q.MaxKeys.
func (s *Service) Migration(ctx context.Context, q MigrationQuery) (Migration, error) {
	since := q.Since
	if s.usage == nil {
		return Migration{}, ErrNoUsage
	}
	if since <= 0 || since > usage.MaxMethodWindow {
		return Migration{}, fmt.Errorf("%w: the window must be between 1s and %s, got %s", ErrInvalid, usage.MaxMethodWindow, since)
	}
	recs, cons, err := s.migrationKeys(ctx, q)
	if err != nil {
		return Migration{}, err
	}
	now := s.now()
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	counts, err := s.usage.Methods(ctx, ids, since, now)
	if err != nil {
		return Migration{}, err
	}
	from := now.Add(-since)
	byCon := map[string]*MigrationConsumer{}
	order := []string{}
	for _, c := range cons {
		byCon[c.ID] = &MigrationConsumer{ID: c.ID, Name: c.Name, Keys: []MigrationKey{}}
		order = append(order, c.ID)
	}
	for _, r := range recs {
		c := byCon[r.Consumer]
		if c == nil {
			c = &MigrationConsumer{ID: r.Consumer, Keys: []MigrationKey{}}
			byCon[r.Consumer] = c
			order = append(order, r.Consumer)
		}
		m := counts[r.ID]
		k := MigrationKey{ID: r.ID, Name: r.Name, Status: r.StateAt(now), Requests: m,
			Moved: m.Bearer > 0 && m.APIKey == 0 && !m.LastAPIKey.After(from), Leaked: r.Leak != nil}
		c.Keys = append(c.Keys, k)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i] != "" && order[j] == "" })
	out := Migration{Since: since.String(), From: from.UTC(), Consumers: []MigrationConsumer{}}
	for _, id := range order {
		c := byCon[id]
		used, direct := false, false
		for _, k := range c.Keys {
			used = used || k.Requests.Bearer > 0
			direct = direct || !k.Moved && k.Requests.APIKey > 0
		}
		c.Moved = used && !direct
		out.Consumers = append(out.Consumers, *c)
	}
	return out, nil
}

// migrationKeys returns the keys and consumers q reports on: one
// consumer's, or every one within q.MaxKeys (counted first where the
// store counts without reading).
func (s *Service) migrationKeys(ctx context.Context, q MigrationQuery) ([]keystore.Record, []keystore.Consumer, error) {
	if q.Consumer != "" {
		con, err := s.store.GetConsumer(ctx, q.Consumer)
		if err != nil {
			return nil, nil, err
		}
		recs, err := s.ListKeys(ctx, KeyFilter{Consumer: q.Consumer})
		return recs, []keystore.Consumer{con}, err
	}
	if q.MaxKeys > 0 {
		n, err := s.store.Count(ctx)
		if err == nil {
			err = reportBound(n, q.MaxKeys)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	recs, err := s.store.List(ctx)
	if err == nil {
		err = reportBound(len(recs), q.MaxKeys)
	}
	if err != nil {
		return nil, nil, err
	}
	cons, err := s.store.ListConsumers(ctx)
	return recs, cons, err
}

// reportBound refuses a whole migration report over n keys when n is
// past limit (none when limit is 0).
func reportBound(n, limit int) error {
	if limit <= 0 || n <= limit {
		return nil
	}
	return invalid("the whole report covers %d keys, more than %d: ask for one consumer at a time (?consumer=ID; GET /v1/consumers lists them)", n, limit)
}
