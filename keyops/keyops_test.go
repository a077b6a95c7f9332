package keyops_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/audittest"
	"github.com/keygate/keygate/internal/testsupport/redistest"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

const ctxA = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"

func newService(t *testing.T) (*keyops.Service, *audittest.Recorder) {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.Plans = map[string]policy.Plan{
		"pro":  {Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: 24 * time.Hour}}},
		"team": {Limit: policy.Limit{Rate: 20, Per: time.Second, Burst: 20}, Scope: policy.ScopeConsumer},
	}
	res, err := cfg.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	rec := &audittest.Recorder{}
	s, err := keyops.New(keyops.Config{Store: &keystore.FileAdmin{Path: filepath.Join(t.TempDir(), "keys.yaml")}, Limits: res, Auditor: rec})
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

// TestKeyOpsExplainAndAudit: an update's plan and override show in the
// explanation with their sources; every change, made or refused, reaches
// the Auditor with its actor and never with the key.
func TestKeyOpsExplainAndAudit(t *testing.T) {
	t.Parallel()
	s, audit := newService(t)
	ctx := context.Background()
	cli := keyops.Actor{ID: "cli:support"}
	con, err := s.CreateConsumer(ctx, cli, keyops.ConsumerSpec{Name: "Acme", Plan: "team", Contexts: []string{ctxA}})
	if err != nil {
		t.Fatal(err)
	}
	key, rec, err := s.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: con.ID})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.ShowKey(ctx, rec.ID)
	if err != nil || d.Limit.Bucket != con.ID || d.Limit.Sources["rate"] != "consumer plan team" || d.Limit.Quota != "none" {
		t.Fatalf("show: %+v %v", d.Limit, err)
	}
	bad := "enterprise"
	if _, err := s.UpdateKey(ctx, cli, rec.ID, keyops.KeyUpdate{Limits: keyops.LimitUpdate{Plan: &bad}}); !errors.Is(err, keyops.ErrInvalid) || !strings.Contains(err.Error(), "pro") {
		t.Errorf("unknown plan: %v", err)
	}
	past := time.Now().Add(-time.Hour)
	rate := 500.0
	if _, err := s.UpdateKey(ctx, cli, rec.ID, keyops.KeyUpdate{Limits: keyops.LimitUpdate{Rate: &rate, Until: &past}}); !errors.Is(err, keyops.ErrInvalid) {
		t.Errorf("until in the past: %v", err)
	}
	pro := "pro"
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if _, err := s.UpdateKey(ctx, cli, rec.ID, keyops.KeyUpdate{Limits: keyops.LimitUpdate{Plan: &pro, Rate: &rate, Until: &until}}); err != nil {
		t.Fatal(err)
	}
	d, err = s.ShowKey(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	l := d.Limit
	if l.Rate != 500 || l.Sources["rate"] != "key override" || l.Sources["burst"] != "key plan pro" || l.Bucket != rec.ID ||
		l.Until == nil || !l.Until.Equal(until) || l.Then == nil || l.Then.Rate != 200 || l.Quota != "50000/24h0m0s" {
		t.Errorf("explained: %+v then %+v", l, l.Then)
	}
	if _, err := s.UpdateKey(ctx, cli, rec.ID, keyops.KeyUpdate{Limits: keyops.LimitUpdate{ClearOverride: true}}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetKey(ctx, rec.ID); r.Override != nil || r.Plan != "pro" {
		t.Errorf("after --clear-override: %+v %q", r.Override, r.Plan)
	}
	if _, err := s.DeleteConsumer(ctx, cli, con.ID); !errors.Is(err, keystore.ErrConsumerInUse) {
		t.Errorf("delete with an active key: %v", err)
	}
	if _, err := s.UpdateKey(ctx, keyops.Actor{}, rec.ID, keyops.KeyUpdate{Limits: keyops.LimitUpdate{ClearOverride: true}}); !errors.Is(err, keyops.ErrInvalid) {
		t.Errorf("no actor: %v", err)
	}

	want := []string{"consumer.create ok", "key.issue ok", "key.update error", "key.update error", "key.update ok", "key.update ok", "consumer.delete error"}
	if len(audit.Events()) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(audit.Events()), len(want), audit.Events())
	}
	for i, e := range audit.Events() {
		if got := e.Action + " " + e.Outcome(); got != want[i] || e.Actor != cli || e.Time.IsZero() {
			t.Errorf("event %d: %s by %+v, want %s by %+v", i, got, e.Actor, want[i], cli)
		}
		for k, v := range e.Changes {
			if strings.Contains(v, key[9:]) || strings.Contains(v, "sha256") {
				t.Errorf("event %d: %s carries the key or its hash", i, k)
			}
		}
	}
	if audit.Events()[4].Changes["plan"] != "pro" || audit.Events()[4].Changes["override.rate"] != "500" {
		t.Errorf("update changes: %v", audit.Events()[4].Changes)
	}
}

// TestShowKeyWarns: a plan removed from the configuration is named as
// skipped.
func TestShowKeyWarns(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	fa := &keystore.FileAdmin{Path: path}
	ctx := context.Background()
	_, rec, err := fa.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) { r.Plan = "retired"; return r, nil }); err != nil {
		t.Fatal(err)
	}
	res, _ := ratelimit.DefaultConfig().Resolver()
	s, _ := keyops.New(keyops.Config{Store: fa, Limits: res})
	d, err := s.ShowKey(ctx, rec.ID)
	if err != nil || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "retired") || d.Limit.Sources["rate"] != "env default (test)" {
		t.Errorf("show: %+v %v %v", d.Limit, d.Warnings, err)
	}
}

// TestDescribeKeyIsShowKey: the detail the admin API answers a change
// with, made from the record the change returned, is what `keys show`
// reads from the store right after it: limits, permissions and warnings
// of a key with a consumer, a plan and an override, after each kind of
// change.
func TestDescribeKeyIsShowKey(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	cli := keyops.Actor{ID: "cli:support"}
	same := func(change string, rec keystore.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", change, err)
		}
		described, err := s.DescribeKey(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		shown, err := s.ShowKey(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(described, shown) {
			t.Errorf("%s: described %+v, shown %+v", change, described, shown)
		}
	}
	con, err := s.CreateConsumer(ctx, cli, keyops.ConsumerSpec{Name: "Acme", Plan: "team", Contexts: []string{ctxA}})
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := s.IssueKey(ctx, cli, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: con.ID})
	same("issue", rec, err)
	pro, rate, until := "pro", 500.0, time.Now().Add(time.Hour)
	up, err := s.UpdateKey(ctx, cli, rec.ID, keyops.KeyUpdate{Limits: keyops.LimitUpdate{Plan: &pro, Rate: &rate, Until: &until}})
	same("update", up, err)
	_, repl, err := s.RotateKey(ctx, cli, rec.ID, time.Hour)
	same("rotate", repl, err)
	rev, err := s.RevokeKey(ctx, cli, repl.ID)
	same("revoke", rev, err)
}

// defaultLimits resolves limits as the default rate limit config does.
func defaultLimits(t testing.TB) *policy.Resolver {
	t.Helper()
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// openIndex opens a replica's keystore index of rs's Redis keystore: what
// the server gives the Service to find keys with.
func openIndex(t testing.TB, rs *redistest.Server) *keystore.RedisStore {
	t.Helper()
	store, err := keystore.OpenRedis(keystore.RedisConfig{Client: rs.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}
