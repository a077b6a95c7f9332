package keyops_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/audittest"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// TestListKeysByConsumerReadsItsKeysOnly: with the Redis keystore, the
// lists by consumer (the portal's keys page, consumer show and usage)
// find the consumer's keys in the replica's index and read their records
// alone: no HSCAN through the key set, which took 8.6–9.7 s and 1.1–1.3
// GiB for one consumer's keys out of a million. They list exactly what a
// read of every record would: the consumer's keys, revoked and rotated
// ones included, and nobody else's. A key this service has just issued
// is listed even before the replica's index has caught up.
func TestListKeysByConsumerReadsItsKeysOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	client := rs.Client(t)
	store := openIndex(t, rs)
	lagging := atomic.Bool{} // the index has not caught up with anything since
	var frozen []keystore.Hash
	find := func(consumer string) ([]keystore.Hash, bool) {
		if lagging.Load() {
			return frozen, true
		}
		return store.ConsumerKeys(consumer)
	}
	res := defaultLimits(t)
	admin := &keystore.RedisAdmin{Client: client, PageSize: 10}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: res, Auditor: &audittest.Recorder{}, ConsumerKeys: find})
	if err != nil {
		t.Fatal(err)
	}
	// A plain service reads every record: what the lists must equal.
	plain, err := keyops.New(keyops.Config{Store: admin, Limits: res})
	if err != nil {
		t.Fatal(err)
	}
	actor := keyops.Actor{ID: "test"}
	conA, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	conB, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	issue := func(consumer string) keystore.Record {
		t.Helper()
		_, rec, err := ops.IssueKey(ctx, actor, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: consumer})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	var a []keystore.Record
	for range 3 {
		a = append(a, issue(conA.ID))
	}
	for range 30 { // others' keys: more pages of the key set than of A's
		issue(conB.ID)
		issue("")
	}
	if _, err := ops.RevokeKey(ctx, actor, a[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ops.RotateKey(ctx, actor, a[1].ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	ids := func(recs []keystore.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.ID+"/"+string(r.Status))
		}
		return out
	}
	want := func(f keyops.KeyFilter) []string {
		t.Helper()
		recs, err := plain.ListKeys(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return ids(recs)
	}
	// scans counts the commands that read a whole hash a page at a time.
	scans := func() int { c := rs.Calls(t); return c["hscan"] + c["hgetall"] }
	// The index follows the change log: wait until it lists A's four keys.
	testkit.Eventually(t, testkit.HangCheck, "the index holds A's keys", func() error {
		hs, ok := store.ConsumerKeys(conA.ID)
		if !ok {
			return testkit.Equal(ok, true)
		}
		return testkit.Equal(len(hs), 4)
	})
	for _, f := range []keyops.KeyFilter{
		{Consumer: conA.ID},
		{Consumer: conA.ID, Status: keystore.Active},
		{Consumer: conA.ID, Status: keystore.Revoked},
		{Consumer: conB.ID},
		{Consumer: "con_0000000000000000"},
	} {
		wantIDs := want(f) // reads every record
		n0 := scans()
		got, err := ops.ListKeys(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if n := scans() - n0; n != 0 {
			t.Errorf("%+v: %d HSCANs, want none", f, n)
		}
		if !slices.Equal(ids(got), wantIDs) {
			t.Errorf("%+v: listed %v, want %v (what a read of every record lists)", f, ids(got), wantIDs)
		}
	}
	if got := want(keyops.KeyFilter{Consumer: conA.ID}); len(got) != 4 {
		t.Fatalf("A has %d keys (%v), want 4: three issued and the rotation's", len(got), got)
	}

	// An index that has not caught up: the keys this service issued are
	// listed all the same.
	frozen, _ = store.ConsumerKeys(conA.ID)
	lagging.Store(true)
	fresh := issue(conA.ID)
	got, err := ops.ListKeys(ctx, keyops.KeyFilter{Consumer: conA.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(got, func(r keystore.Record) bool { return r.ID == fresh.ID }) || len(got) != 5 {
		t.Errorf("after an issue the index has not seen yet: listed %v, want A's 5 keys with %s", ids(got), fresh.ID)
	}
}
