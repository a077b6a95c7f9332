package keyops_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/usage"
)

// TestUsageOfKeysAndConsumers: a key's usage is its own counts; a
// consumer's sums its keys; the quota left comes from the QuotaReader of
// the bucket in effect (the consumer's, for a consumer-scoped plan), and
// without one it is "per replica".
func TestUsageOfKeysAndConsumers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := ratelimit.DefaultConfig()
	cfg.Plans = map[string]policy.Plan{
		"team": {Limit: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 100, Per: 24 * time.Hour}}, Scope: policy.ScopeConsumer},
	}
	res, err := cfg.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	store := &usage.FileStore{Path: filepath.Join(dir, "keys.yaml.usage.json")}
	quota := func(_ context.Context, bucket string) (int64, time.Duration, error) {
		if bucket[:4] != "con_" {
			return 0, 0, errors.New("asked for a key's bucket: " + bucket)
		}
		return 30, time.Hour, nil
	}
	s, err := keyops.New(keyops.Config{Store: &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}, Limits: res, Usage: store, Quota: quota})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cli := keyops.Actor{ID: "cli:test"}
	con, err := s.CreateConsumer(ctx, cli, keyops.ConsumerSpec{Name: "Acme", Plan: "team", Contexts: []string{ctxA}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		_, rec, err := s.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: con.ID})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	now := time.Now()
	c := usage.NewCounters(0)
	c.Record(ids[0], usage.ByAPIKey, usage.Admitted, 10, now.Add(-time.Second))
	c.Record(ids[1], usage.ByAPIKey, usage.Admitted, 5, now)
	c.Record(ids[1], usage.ByAPIKey, usage.RefusedQuota, 0, now)
	if err := store.Flush(ctx, c.Drain(), now); err != nil {
		t.Fatal(err)
	}
	u, err := s.KeyUsage(ctx, ids[0], 0)
	if err != nil || u.Admitted != 1 || u.BytesIn != 10 || u.Since != "24h0m0s" || u.LastUsedAt == nil {
		t.Fatalf("key usage: %+v, %v", u, err)
	}
	if q := u.QuotaNow; q == nil || q.Bucket != con.ID || q.Remaining == nil || *q.Remaining != 70 {
		t.Fatalf("key quota: %+v", u.QuotaNow)
	}
	u, err = s.ConsumerUsage(ctx, con.ID, time.Hour)
	if err != nil || u.Admitted != 2 || u.Quota != 1 || u.BytesIn != 15 || len(u.Keys) != 2 {
		t.Fatalf("consumer usage: %+v, %v", u, err)
	}
	if !u.LastUsedAt.Equal(now.UTC().Truncate(time.Millisecond)) {
		t.Errorf("consumer last use %v, want the latest of its keys %v", u.LastUsedAt, now)
	}
	if _, err := s.KeyUsage(ctx, ids[0], 8*24*time.Hour); !errors.Is(err, keyops.ErrInvalid) {
		t.Errorf("8 days: %v, want ErrInvalid", err)
	}
	local, _ := keyops.New(keyops.Config{Store: &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}, Limits: res, Usage: store})
	if u, err := local.KeyUsage(ctx, ids[0], 0); err != nil || u.QuotaNow.Remaining != nil || u.QuotaNow.Note == "" {
		t.Errorf("local limiter: %+v, %v; want a note instead of a remainder", u.QuotaNow, err)
	}
}

// TestUsageSeries: a key's series is its own counts hour by hour; a
// consumer's sums its keys, the revoked one included; the period defaults
// to 24 hours and is at most 7 days; without a UsageReader the series
// are not available.
func TestUsageSeries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := defaultLimits(t)
	now := time.Now().UTC().Truncate(time.Hour).Add(20 * time.Minute)
	store := &usage.FileStore{Path: filepath.Join(dir, "keys.yaml.usage.json")}
	cfg := keyops.Config{Store: &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}, Limits: res, Usage: store, Now: func() time.Time { return now }}
	s, err := keyops.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cli := keyops.Actor{ID: "cli:test"}
	con, err := s.CreateConsumer(ctx, cli, keyops.ConsumerSpec{Name: "Acme", Contexts: []string{ctxA}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		_, rec, err := s.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: con.ID})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	_, other, err := s.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(ctx, cli, ids[2]); err != nil {
		t.Fatal(err)
	}
	flush := func(at time.Time, id string, o usage.Outcome) {
		t.Helper()
		c := usage.NewCounters(0)
		c.Record(id, usage.ByAPIKey, o, 0, at)
		if err := store.Flush(ctx, c.Drain(), at); err != nil {
			t.Fatal(err)
		}
	}
	flush(now, ids[0], usage.Admitted)
	flush(now, ids[1], usage.RefusedRate)
	flush(now.Add(-2*time.Hour), ids[2], usage.Admitted) // revoked since
	flush(now.Add(-30*time.Hour), ids[0], usage.RefusedQuota)
	flush(now, other.ID, usage.Admitted) // not the consumer's

	type want struct {
		ago int // hours before the current one
		c   usage.Counts
	}
	cases := []struct {
		name  string
		read  func(time.Duration) ([]usage.Hour, error)
		since time.Duration
		n     int
		want  []want
	}{
		{"key, default 24h", func(d time.Duration) ([]usage.Hour, error) { return s.KeyUsageSeries(ctx, ids[0], d) }, 0, 24,
			[]want{{0, usage.Counts{Admitted: 1}}}},
		{"key, 2 days", func(d time.Duration) ([]usage.Hour, error) { return s.KeyUsageSeries(ctx, ids[0], d) }, 48 * time.Hour, 48,
			[]want{{30, usage.Counts{Quota: 1}}, {0, usage.Counts{Admitted: 1}}}},
		{"revoked key", func(d time.Duration) ([]usage.Hour, error) { return s.KeyUsageSeries(ctx, ids[2], d) }, 3 * time.Hour, 3,
			[]want{{2, usage.Counts{Admitted: 1}}}},
		{"consumer, 24h", func(d time.Duration) ([]usage.Hour, error) { return s.ConsumerUsageSeries(ctx, con.ID, d) }, 24 * time.Hour, 24,
			[]want{{2, usage.Counts{Admitted: 1}}, {0, usage.Counts{Admitted: 1, Rate: 1}}}},
		{"consumer, 7 days", func(d time.Duration) ([]usage.Hour, error) { return s.ConsumerUsageSeries(ctx, con.ID, d) }, 7 * 24 * time.Hour, 168,
			[]want{{30, usage.Counts{Quota: 1}}, {2, usage.Counts{Admitted: 1}}, {0, usage.Counts{Admitted: 1, Rate: 1}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := tc.read(tc.since)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != tc.n {
				t.Fatalf("%d hours, want %d", len(hs), tc.n)
			}
			exp := make([]usage.Counts, tc.n)
			for _, w := range tc.want {
				exp[tc.n-1-w.ago] = w.c
			}
			cur := now.Truncate(time.Hour)
			for i, h := range hs {
				if start := cur.Add(-time.Duration(tc.n-1-i) * time.Hour); !h.Start.Equal(start) {
					t.Fatalf("hour %d starts %v, want %v", i, h.Start, start)
				}
				if h.Counts != exp[i] {
					t.Errorf("hour %d (%v): %+v, want %+v", i, h.Start, h.Counts, exp[i])
				}
			}
		})
	}

	if _, err := s.KeyUsageSeries(ctx, ids[0], 8*24*time.Hour); !errors.Is(err, keyops.ErrInvalid) {
		t.Errorf("8 days: %v, want ErrInvalid", err)
	}
	if _, err := s.KeyUsageSeries(ctx, "key_nope", 0); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("unknown key: %v, want ErrNotFound", err)
	}
	if _, err := s.ConsumerUsageSeries(ctx, "con_nope", 0); !errors.Is(err, keystore.ErrConsumerNotFound) {
		t.Errorf("unknown consumer: %v, want ErrConsumerNotFound", err)
	}
	cfg.Usage = nil
	none, err := keyops.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.KeyUsageSeries(ctx, ids[0], 0); !errors.Is(err, keyops.ErrNoUsage) {
		t.Errorf("no usage reader: key series: %v, want ErrNoUsage", err)
	}
	if _, err := none.ConsumerUsageSeries(ctx, con.ID, 0); !errors.Is(err, keyops.ErrNoUsage) {
		t.Errorf("no usage reader: consumer series: %v, want ErrNoUsage", err)
	}
}
