package keyops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/audittest"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/usage"
)

// TestPurgeKeysAuditsAndForgets: a purge through the service leaves a
// key.purge audit event per purged key (its status and when it ended)
// and drops their last uses from the usage store's sorted sets, which
// keep the other keys'; a dry run names the same keys and changes
// nothing; bad requests are refused before anything is read.
func TestPurgeKeysAuditsAndForgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	client := rs.Client(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := now.Add(-100 * 24 * time.Hour)
	admin := &keystore.RedisAdmin{Client: client, Now: func() time.Time { return clock }}
	res := defaultLimits(t)
	rec := &audittest.Recorder{}
	us := &usage.RedisStore{Client: client, Prefix: "keygate:"}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: res, Auditor: rec, Usage: us, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	actor := keyops.Actor{ID: "ops"}
	var ids []string
	for range 4 {
		_, r, err := ops.IssueKey(ctx, actor, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	for _, id := range ids[:2] {
		if _, err := ops.RevokeKey(ctx, actor, id); err != nil {
			t.Fatal(err)
		}
	}
	// Each key was used once, long ago.
	var ds []usage.Delta
	for _, id := range ids {
		ds = append(ds, usage.Delta{ID: id, LastUsed: clock, LastAPIKey: clock, APIKey: 1})
	}
	if err := us.Flush(ctx, ds, clock); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []keyops.PurgeRequest{{OlderThan: -time.Hour}, {OlderThan: time.Hour, Limit: -1}} {
		if _, err := ops.PurgeKeys(ctx, actor, bad, nil); !errors.Is(err, keyops.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := ops.PurgeKeys(ctx, keyops.Actor{}, keyops.PurgeRequest{OlderThan: time.Hour}, nil); !errors.Is(err, keyops.ErrInvalid) {
		t.Errorf("a purge without an actor: %v, want ErrInvalid", err)
	}

	events := len(rec.Events())
	// purge runs a purge and returns the ids each was given, sorted.
	purge := func(req keyops.PurgeRequest) []string {
		t.Helper()
		var out []string
		if _, err := ops.PurgeKeys(ctx, actor, req, func(recs []keystore.Record) error {
			for _, r := range recs {
				out = append(out, r.ID)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	dry := purge(keyops.PurgeRequest{OlderThan: 30 * 24 * time.Hour, DryRun: true})
	want := slices.Sorted(slices.Values(ids[:2]))
	if !slices.Equal(dry, want) || len(rec.Events()) != events {
		t.Errorf("dry run: %v and %d events, want %v and none", dry, len(rec.Events())-events, want)
	}
	if got := purge(keyops.PurgeRequest{OlderThan: 30 * 24 * time.Hour}); !slices.Equal(got, want) {
		t.Errorf("purged %v, want %v", got, want)
	}
	var audited []string
	for _, e := range rec.Events()[events:] {
		if e.Action != "key.purge" || e.Actor != actor || e.Changes["status"] != "revoked" || e.Changes["ended_at"] != clock.Format(time.RFC3339) {
			t.Errorf("audit event %+v, want key.purge by %s, revoked, ended at %s", e, actor.ID, clock.Format(time.RFC3339))
		}
		audited = append(audited, e.Target)
	}
	if slices.Sort(audited); !slices.Equal(audited, want) {
		t.Errorf("audited %v, want %v", audited, want)
	}
	last, err := us.LastUsed(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if _, ok := last[id]; ok == (i < 2) {
			t.Errorf("key %d (%s): last use kept %v after the purge", i, id, ok)
		}
	}
	for _, name := range []string{"last", "last_api_key"} {
		var n int64
		for b := range 16 { // the sorted sets of last uses (usage/lastsets.go)
			n += client.ZCard(ctx, fmt.Sprintf("keygate:usage:%s:{lu:%x}", name, b)).Val()
		}
		if n != 2 {
			t.Errorf("the sorted sets of %s hold %d members, want the 2 keys left", name, n)
		}
	}
}
