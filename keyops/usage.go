package keyops

import (
	"context"
	"errors"
	"time"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/usage"
)

// UsageReader is what keyops needs from the usage store the replicas
// flush to: usage.RedisStore and usage.FileStore.
type UsageReader interface {
	Read(ctx context.Context, ids []string, since time.Duration, now time.Time) (usage.Counts, map[string]time.Time, error)
	// Series reads the counts hour by hour (for charts).
	Series(ctx context.Context, ids []string, since time.Duration, now time.Time) ([]usage.Hour, error)
	// LastUsed returns the last use of each of ids that has one, reading
	// only those ids.
	LastUsed(ctx context.Context, ids []string) (map[string]time.Time, error)
	// Methods reads each key's requests by how they authenticated.
	Methods(ctx context.Context, ids []string, since time.Duration, now time.Time) (map[string]usage.MethodCounts, error)
	// Forget drops the last uses of keys that were purged, where the
	// store keeps them apart from counts that expire (usage.RedisStore).
	Forget(ctx context.Context, ids []string) error
}

// The usage stores fit.
var (
	_ UsageReader = (*usage.RedisStore)(nil)
	_ UsageReader = (*usage.FileStore)(nil)
)

// QuotaReader returns how much of a limiter bucket's quota is used and
// when it renews (0 when nothing is used yet). Nil means the quota is
// counted per replica (ratelimit.backend local) and cannot be read here.
type QuotaReader func(ctx context.Context, bucket string) (used int64, resetsIn time.Duration, err error)

// Usage is a key's (or a consumer's keys') counts over a recent period.
type Usage struct {
	// ID is the key or the consumer; Keys are a consumer's keys summed.
	ID   string   `json:"id"`
	Keys []string `json:"keys,omitempty"`
	// Since is the period asked for; counts are per whole hour, so the
	// period starts at the top of its first hour.
	Since string `json:"since"`
	usage.Counts
	LastUsedAt *time.Time   `json:"last_used_at"`
	QuotaNow   *QuotaStatus `json:"quota"`
	// Leak is where a key was found in public; nil if it never was (and
	// for a consumer's sum).
	Leak *keystore.Leak `json:"leak,omitempty"`
}

// QuotaStatus is the quota in effect now and what is left of it.
type QuotaStatus struct {
	// Limit is "none" or "REQUESTS/PERIOD".
	Limit string `json:"limit"`
	// Bucket is the limiter id the quota is counted under.
	Bucket string `json:"bucket,omitempty"`
	// Remaining and ResetsIn are known with the Redis rate limiter only.
	Remaining *int64 `json:"remaining,omitempty"`
	ResetsIn  string `json:"resets_in,omitempty"`
	// Note says why Remaining is missing.
	Note string `json:"note,omitempty"`
}

// ErrNoUsage means the Service was built without a UsageReader.
var ErrNoUsage = errors.New("keyops: usage is not available")

// KeyUsage returns key id's usage over the last since (at most 7 days;
// 0 means 24 hours) and its quota now.
func (s *Service) KeyUsage(ctx context.Context, id string, since time.Duration) (Usage, error) {
	rec, err := s.GetKey(ctx, id)
	if err != nil {
		return Usage{}, err
	}
	var con *keystore.Consumer
	if rec.Consumer != "" {
		if c, err := s.store.GetConsumer(ctx, rec.Consumer); err == nil {
			con = &c
		}
	}
	u, err := s.readUsage(ctx, id, []string{id}, since)
	if err != nil {
		return Usage{}, err
	}
	u.Keys = nil
	u.Leak = rec.Leak
	u.QuotaNow, err = s.quota(ctx, keystore.Subject(rec, con))
	return u, err
}

// ConsumerUsage sums the usage of consumer id's keys (revoked ones
// included). The quota is shown when the consumer's keys share one
// (a consumer-scoped plan); otherwise each key has its own.
func (s *Service) ConsumerUsage(ctx context.Context, id string, since time.Duration) (Usage, error) {
	con, recs, ids, err := s.consumerKeys(ctx, id)
	if err != nil {
		return Usage{}, err
	}
	u, err := s.readUsage(ctx, id, ids, since)
	if err != nil {
		return Usage{}, err
	}
	if len(recs) > 0 {
		q, err := s.quota(ctx, keystore.Subject(recs[0], &con))
		if err != nil {
			return Usage{}, err
		}
		if q.Bucket != id {
			q = &QuotaStatus{Limit: q.Limit, Note: "per key: see keys usage"}
		}
		u.QuotaNow = q
	}
	return u, nil
}

// KeyUsageSeries returns key id's counts hour by hour over the last
// since (at most 7 days; 0 means 24 hours): one entry per hour, oldest
// first, the current hour included, zero for hours without requests.
func (s *Service) KeyUsageSeries(ctx context.Context, id string, since time.Duration) ([]usage.Hour, error) {
	if _, err := s.GetKey(ctx, id); err != nil {
		return nil, err
	}
	return s.readSeries(ctx, []string{id}, since)
}

// ConsumerUsageSeries is KeyUsageSeries summed over consumer id's keys
// (revoked ones included), as ConsumerUsage sums them.
func (s *Service) ConsumerUsageSeries(ctx context.Context, id string, since time.Duration) ([]usage.Hour, error) {
	_, _, ids, err := s.consumerKeys(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.readSeries(ctx, ids, since)
}

// consumerKeys returns consumer id and all its keys, and their ids.
func (s *Service) consumerKeys(ctx context.Context, id string) (keystore.Consumer, []keystore.Record, []string, error) {
	con, err := s.store.GetConsumer(ctx, id)
	if err != nil {
		return keystore.Consumer{}, nil, nil, err
	}
	recs, err := s.ListKeys(ctx, KeyFilter{Consumer: id})
	if err != nil {
		return keystore.Consumer{}, nil, nil, err
	}
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	return con, recs, ids, nil
}

// usageSince applies the default (24 hours) and the limit (the 7 days
// kept) of a usage period.
func usageSince(since time.Duration) (time.Duration, error) {
	if since <= 0 {
		return 24 * time.Hour, nil
	}
	if since > 7*24*time.Hour {
		return 0, invalid("since: at most 7 days (168h) of usage is kept")
	}
	return since, nil
}

func (s *Service) readSeries(ctx context.Context, ids []string, since time.Duration) ([]usage.Hour, error) {
	if s.usage == nil {
		return nil, ErrNoUsage
	}
	since, err := usageSince(since)
	if err != nil {
		return nil, err
	}
	return s.usage.Series(ctx, ids, since, s.now())
}

func (s *Service) readUsage(ctx context.Context, id string, ids []string, since time.Duration) (Usage, error) {
	if s.usage == nil {
		return Usage{}, ErrNoUsage
	}
	since, err := usageSince(since)
	if err != nil {
		return Usage{}, err
	}
	c, last, err := s.usage.Read(ctx, ids, since, s.now())
	if err != nil {
		return Usage{}, err
	}
	u := Usage{ID: id, Keys: ids, Since: since.String(), Counts: c}
	for _, t := range last {
		if u.LastUsedAt == nil || t.After(*u.LastUsedAt) {
			t := t
			u.LastUsedAt = &t
		}
	}
	return u, nil
}

func (s *Service) quota(ctx context.Context, sub policy.Subject) (*QuotaStatus, error) {
	e := s.limits.Resolve(sub, s.now())
	bucket := e.Bucket(sub.KeyID)
	q := &QuotaStatus{Limit: e.Limit.Quota.String(), Bucket: bucket}
	if !e.Limit.Quota.Enabled() {
		return q, nil
	}
	if s.quotaReader == nil {
		q.Note = "per replica (ratelimit.backend local): not readable here"
		return q, nil
	}
	used, reset, err := s.quotaReader(ctx, bucket)
	if err != nil {
		return nil, err
	}
	rem := max(e.Limit.Quota.Requests-used, 0)
	q.Remaining = &rem
	if reset <= 0 {
		reset = e.Limit.Quota.Per
	}
	q.ResetsIn = reset.Round(time.Second).String()
	return q, nil
}

// LastUsed returns the last use, as flushed, of each of recs' keys that
// has one; empty without a UsageReader. It reads only those keys', never
// the whole fleet's.
func (s *Service) LastUsed(ctx context.Context, recs []keystore.Record) (map[string]time.Time, error) {
	if s.usage == nil || len(recs) == 0 {
		return map[string]time.Time{}, nil
	}
	ids := make([]string, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
	}
	return s.usage.LastUsed(ctx, ids)
}
