package keyops_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
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
	cfg.Plans = map[string]ratelimit.Plan{
		"team": {Limit: ratelimit.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: ratelimit.Quota{Requests: 100, Per: 24 * time.Hour}}, Scope: ratelimit.ScopeConsumer},
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
	c.Record(ids[0], usage.Admitted, 10, now.Add(-time.Second))
	c.Record(ids[1], usage.Admitted, 5, now)
	c.Record(ids[1], usage.RefusedQuota, 0, now)
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
