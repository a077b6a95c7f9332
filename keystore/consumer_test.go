package keystore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

const ctxOther = "0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d"

type lookupStore interface {
	Lookup(ctx context.Context, h keystore.Hash) (keystore.Record, bool, error)
}

func testLimits(t *testing.T) *policy.Resolver {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.Plans = map[string]policy.Plan{
		"team": {Limit: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 30, Per: time.Hour}}, Scope: policy.ScopeConsumer},
		"pro":  {Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400}},
	}
	r, err := cfg.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConsumersOnEveryBackend: consumers are created, checked when keys
// are issued, updated and deleted through either backend, and every
// change reaches two running stores (two replicas), with
// the keys' effective limits re-resolved.
func TestConsumersOnEveryBackend(t *testing.T) {
	t.Parallel()
	limits := testLimits(t)
	backends := map[string]func(t *testing.T) (adminStore, func() lookupStore){
		"file": func(t *testing.T) (adminStore, func() lookupStore) {
			path := filepath.Join(t.TempDir(), "keys.yaml")
			return &keystore.FileAdmin{Path: path}, func() lookupStore {
				s, err := keystore.OpenFile(keystore.FileConfig{Path: path, Limits: limits})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		},
		"redis": func(t *testing.T) (adminStore, func() lookupStore) {
			rs := redistest.Start(t)
			return &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}, func() lookupStore { return openSubscribed(t, rs.Addr, limits) }
		},
		// The admin checks a consumer's keys (to narrow its contexts, to
		// delete it) by the hashes a replica's index finds, as the
		// server wires it.
		"redis-index": func(t *testing.T) (adminStore, func() lookupStore) {
			rs := redistest.Start(t)
			admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
			return admin, func() lookupStore {
				s := openSubscribed(t, rs.Addr, limits)
				if admin.ConsumerKeys == nil { // before the admin's first call
					admin.ConsumerKeys = s.ConsumerKeys
				}
				return s
			}
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			admin, openStore := open(t)
			stores := []lookupStore{openStore(), openStore()}
			ctx := context.Background()
			con, err := keystore.NewConsumer(keystore.Consumer{Name: "Acme", Metadata: map[string]string{"crm": "A-17"}, Contexts: []string{ctxUUID}, Plan: "team"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.CreateConsumer(ctx, con); err != nil {
				t.Fatal(err)
			}
			if got, err := admin.GetConsumer(ctx, con.ID); err != nil || got.Name != "Acme" || got.Metadata["crm"] != "A-17" {
				t.Fatalf("get: %+v %v", got, err)
			}
			if _, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxOther, Consumer: con.ID}); !errors.Is(err, keystore.ErrContextNotAllowed) {
				t.Errorf("issue outside the consumer's contexts: %v", err)
			}
			if _, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Consumer: "con_0000000000000000"}); !errors.Is(err, keystore.ErrConsumerNotFound) {
				t.Errorf("issue for an unknown consumer: %v", err)
			}
			key, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxUUID, Consumer: con.ID})
			if err != nil {
				t.Fatal(err)
			}
			limit := func(s lookupStore) *policy.Effective {
				r, ok, err := s.Lookup(ctx, keystore.HashKey(key))
				if err != nil || !ok || r.Limits == nil {
					return nil
				}
				return r.Limits
			}
			waitAll := func(what string, cond func(e *policy.Effective) bool) {
				t.Helper()
				for _, s := range stores {
					testkit.Eventually(t, testkit.HangCheck, what, func() error { e := limit(s); return testkit.True(e != nil && cond(e), "limit now %+v", e) })
				}
			}
			waitAll("the consumer's scope-consumer plan", func(e *policy.Effective) bool {
				return e.Bucket(rec.ID) == con.ID && e.Limit.Quota.Requests == 30 && e.Sources.Rate == policy.FromConsumerPlan
			})
			if _, err := admin.UpdateConsumer(ctx, con.ID, func(c keystore.Consumer) (keystore.Consumer, error) {
				c.Override = &policy.Override{Quota: &policy.Quota{Requests: 60, Per: time.Hour}}
				return c, nil
			}); err != nil {
				t.Fatal(err)
			}
			waitAll("the consumer's override", func(e *policy.Effective) bool {
				return e.Bucket(rec.ID) == con.ID && e.Limit.Quota.Requests == 60 && e.Sources.Quota == policy.FromConsumerOverride
			})
			until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			if _, err := admin.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) {
				r.Plan, r.Override = "pro", &policy.Override{Rate: 500, Until: until}
				return r, nil
			}); err != nil {
				t.Fatal(err)
			}
			waitAll("the key's plan and temporary override", func(e *policy.Effective) bool {
				return e.Bucket(rec.ID) == rec.ID && e.Limit.Rate == 500 && e.Limit.Burst == 400 && e.Until.Equal(until) && e.Next != nil && e.Next.Limit.Rate == 200
			})
			if _, err := admin.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) {
				r.Context = ctxOther
				return r, nil
			}); err == nil {
				t.Error("update changed the key's context")
			}
			scans := func() int { return 0 }
			if ra, ok := admin.(*keystore.RedisAdmin); ok && ra.ConsumerKeys != nil {
				scans = func() int { return hscans(t, ra.Client) }
			}
			scans0 := scans()
			if _, err := admin.UpdateConsumer(ctx, con.ID, func(c keystore.Consumer) (keystore.Consumer, error) {
				c.Contexts = []string{ctxOther}
				return c, nil
			}); !errors.Is(err, keystore.ErrConsumerInUse) || !strings.Contains(err.Error(), rec.ID) {
				t.Errorf("narrowing contexts away from an active key: %v", err)
			}
			if _, err := admin.DeleteConsumer(ctx, con.ID); !errors.Is(err, keystore.ErrConsumerInUse) || !strings.Contains(err.Error(), rec.ID) {
				t.Errorf("delete with an active key: %v", err)
			}
			if _, err := admin.Revoke(ctx, rec.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.DeleteConsumer(ctx, con.ID); err != nil {
				t.Fatalf("delete after revoking its keys: %v", err)
			}
			if n := scans() - scans0; n != 0 {
				t.Errorf("the consumer's checks read the key set: %d HSCANs", n)
			}
			if _, err := admin.GetConsumer(ctx, con.ID); !errors.Is(err, keystore.ErrConsumerNotFound) {
				t.Errorf("get after delete: %v", err)
			}
			if cons, err := admin.ListConsumers(ctx); err != nil || len(cons) != 0 {
				t.Errorf("list after delete: %v %v", cons, err)
			}
			if _, err := admin.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) {
				r.Plan, r.Override = "", nil
				return r, nil
			}); err != nil {
				t.Fatal(err)
			}
			waitAll("a deleted consumer counts as none", func(e *policy.Effective) bool {
				return e.Bucket(rec.ID) == rec.ID && e.Limit.Rate == 50 && e.Sources.Rate == policy.FromEnvDefault
			})
		})
	}
}

// openSubscribed opens a RedisStore on the redis-server at addr and waits
// until it has loaded and subscribed to the change log.
func openSubscribed(t *testing.T, addr string, limits *policy.Resolver) *keystore.RedisStore {
	t.Helper()
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: redisClient(t, addr), Timeout: testTimeout, ResyncInterval: time.Minute, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "store loaded and subscribed", func() error {
		return testkit.True(s.Ready() && !s.Degraded(), "ready %v, degraded %v", s.Ready(), s.Degraded())
	})
	return s
}

// TestConsumerValidation: messages name the field.
func TestConsumerValidation(t *testing.T) {
	t.Parallel()
	ok := keystore.Consumer{ID: "con_0123456789abcdef", Name: "Acme"}
	for _, c := range []struct {
		mut   func(*keystore.Consumer)
		field string
	}{
		{func(c *keystore.Consumer) { c.ID = "key_0123456789abcdef" }, "id:"},
		{func(c *keystore.Consumer) { c.Name = "a\x01" }, "name:"},
		{func(c *keystore.Consumer) { c.Contexts = []string{"nope"} }, "contexts[0]:"},
		{func(c *keystore.Consumer) { c.Plan = "Pro Plan" }, "plan:"},
		{func(c *keystore.Consumer) { c.Override = &policy.Override{Rate: -1} }, "override.rate:"},
		{func(c *keystore.Consumer) { c.Metadata = map[string]string{"a=b": "x"} }, "metadata:"},
	} {
		x := ok
		c.mut(&x)
		err := keystore.ValidateConsumer(x)
		if err == nil || len(err.Error()) < len(c.field) || err.Error()[:len(c.field)] != c.field {
			t.Errorf("%+v: %v, want %s", x, err, c.field)
		}
	}
	if err := keystore.ValidateConsumer(ok); err != nil {
		t.Error(err)
	}
}

// TestRedisImportConsumers moves a file keystore's consumers into Redis
// once, with `keys import`.
func TestRedisImportConsumers(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "keys.yaml")
	fa := &keystore.FileAdmin{Path: path}
	ctx := context.Background()
	con, _ := keystore.NewConsumer(keystore.Consumer{Name: "Acme", Plan: "team", Override: &policy.Override{Quota: &policy.Quota{}}}, time.Now())
	if err := fa.CreateConsumer(ctx, con); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := keystore.ParseFileConsumers(data)
	if err != nil || len(cons) != 1 {
		t.Fatalf("parse: %v %v", cons, err)
	}
	admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}
	if added, skipped, err := admin.ImportConsumers(ctx, cons); err != nil || added != 1 || skipped != 0 {
		t.Fatalf("import: %d %d %v", added, skipped, err)
	}
	if added, skipped, err := admin.ImportConsumers(ctx, cons); err != nil || added != 0 || skipped != 1 {
		t.Fatalf("second import: %d %d %v", added, skipped, err)
	}
	got, err := admin.GetConsumer(ctx, con.ID)
	if err != nil || got.Name != "Acme" || got.Override == nil || got.Override.Quota == nil || *got.Override.Quota != (policy.Quota{}) {
		t.Errorf("imported: %+v %v", got, err)
	}

	// Many consumers go in pipelined batches (of 2 here): those already
	// there are skipped, whichever batch they fall in.
	batched := &keystore.RedisAdmin{Client: admin.Client, PageSize: 2}
	more := []keystore.Consumer{con}
	for i := range 6 {
		c, _ := keystore.NewConsumer(keystore.Consumer{Name: fmt.Sprintf("customer %d", i)}, time.Now())
		more = append(more, c)
	}
	if added, skipped, err := batched.ImportConsumers(ctx, more); err != nil || added != 6 || skipped != 1 {
		t.Fatalf("import in batches: %d added, %d skipped, %v; want 6, 1", added, skipped, err)
	}
	all, err := admin.ListConsumers(ctx)
	if err != nil || len(all) != 7 {
		t.Fatalf("after the batches: %d consumers, %v; want 7", len(all), err)
	}
	for _, c := range more[1:] {
		if got, err := admin.GetConsumer(ctx, c.ID); err != nil || got.Name != c.Name {
			t.Errorf("%s: %+v %v", c.ID, got, err)
		}
	}
}

// TestRedisConsumerMissedMessageIsResynced: a consumer change whose
// announcement was lost reaches the keys' limits at the periodic resync.
func TestRedisConsumerMissedMessageIsResynced(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redisClient(t, rs.Addr)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: c}
	con, _ := keystore.NewConsumer(keystore.Consumer{Name: "Acme"}, time.Now())
	if err := admin.CreateConsumer(ctx, con); err != nil {
		t.Fatal(err)
	}
	key, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live, Consumer: con.ID})
	if err != nil {
		t.Fatal(err)
	}
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: redisClient(t, rs.Addr), Timeout: testTimeout, ResyncInterval: 300 * time.Millisecond, Limits: testLimits(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rate := func() float64 {
		r, ok, err := s.Lookup(ctx, keystore.HashKey(key))
		if err != nil || !ok || r.Limits == nil {
			return 0
		}
		return r.Limits.Limit.Rate
	}
	testkit.Eventually(t, testkit.HangCheck, "env default", func() error { return testkit.Equal(rate(), 50) })
	// Put the consumer on a plan behind the admin's back: no message.
	con.Plan = "pro"
	b, _ := json.Marshal(con)
	c.HSet(ctx, consumerBucket(con.ID), con.ID, string(b))
	testkit.Eventually(t, testkit.HangCheck, "the consumer's plan after a resync", func() error { return testkit.Equal(rate(), 200) })
}

// TestRedisFullPassReadsEveryConsumer: a replica's full pass reads every
// consumer, over many HSCAN pages decoded side by side, and a consumer's
// plan reaches its key.
func TestRedisFullPassReadsEveryConsumer(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: redisClient(t, rs.Addr), PageSize: 100}
	cons := make([]keystore.Consumer, 2500)
	for i := range cons {
		c, err := keystore.NewConsumer(keystore.Consumer{Name: fmt.Sprintf("customer %d", i)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cons[i] = c
	}
	cons[1234].Plan = "team"
	if _, _, err := admin.ImportConsumers(ctx, cons); err != nil {
		t.Fatal(err)
	}
	key, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live, Consumer: cons[1234].ID})
	if err != nil {
		t.Fatal(err)
	}
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: redisClient(t, rs.Addr), Timeout: testTimeout, PageSize: 7, Limits: testLimits(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testkit.Eventually(t, testkit.HangCheck, "the replica's first pass", func() error { return testkit.True(s.Ready(), "not ready") })
	plans := map[string]string{}
	got, ok := s.ConsumersWhere(func(c *keystore.Consumer) bool { plans[c.ID] = c.Plan; return true })
	if !ok || len(got) != len(cons) || len(plans) != len(cons) {
		t.Fatalf("the copy holds %d consumers (ok %v), want %d", len(got), ok, len(cons))
	}
	for i, c := range cons {
		if p, ok := plans[c.ID]; !ok || p != c.Plan {
			t.Fatalf("consumer %d: plan %q in the copy (held %v), want %q", i, p, ok, c.Plan)
		}
	}
	rec, found, err := s.Lookup(ctx, keystore.HashKey(key))
	if err != nil || !found || rec.Limits == nil || rec.Limits.Plan != "team" {
		t.Errorf("the key of the consumer on plan team: %+v, %v, %v", rec.Limits, found, err)
	}
}
