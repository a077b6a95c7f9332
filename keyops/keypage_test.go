package keyops_test

import (
	"context"
	"fmt"
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

// TestListKeysPageReadsItsPageOnly: with the Redis keystore, a page of the
// key list (the admin API's GET /v1/keys) comes from the replica's index
// and the records of that page alone: no HSCAN through the key set, which
// took 6–11 s and 1.5 GiB of the replica per page at a million keys.
// Walking the pages lists, for every filter and page size, exactly what a
// read of every record lists, in the same order (creation second, then
// id), in as many pages as the keys fill. An index that lags the store
// changes nothing: a key whose record no longer matches is left out (its
// page is shorter, the next one follows), and a key this service has just
// issued is listed even before the index holds it.
func TestListKeysPageReadsItsPageOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	store := openIndex(t, rs)
	clock := testkit.NewClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	now, tick := clock.Now, clock.Add

	var stale atomic.Bool                    // the index has not seen the revocations
	var hidden atomic.Pointer[keystore.Hash] // nor this key
	pager := func(q keystore.PageQuery) ([]keystore.PageEntry, bool) {
		if stale.Load() {
			q.Status = ""
		}
		es, ok := store.KeysPage(q)
		if h := hidden.Load(); h != nil {
			es = slices.DeleteFunc(es, func(e keystore.PageEntry) bool { return e.Hash == *h })
		}
		return es, ok
	}
	res := defaultLimits(t)
	admin := &keystore.RedisAdmin{Client: rs.Client(t), PageSize: 10, Now: now}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: res, Auditor: &audittest.Recorder{}, Now: now, KeysPage: pager})
	if err != nil {
		t.Fatal(err)
	}
	// A plain service reads every record: what the pages must equal.
	plain, err := keyops.New(keyops.Config{Store: admin, Limits: res, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	actor := keyops.Actor{ID: "test"}
	con, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	issue := func(i int) keystore.Record {
		t.Helper()
		req := keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA}
		if i%3 == 0 {
			req.Consumer = con.ID
		}
		if i%4 == 1 {
			req.Product, req.Env, req.Context = keystore.Registry, keystore.Test, ""
		}
		if i%5 == 2 {
			req.ExpiresIn = time.Hour
		}
		_, rec, err := ops.IssueKey(ctx, actor, req)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	var recs []keystore.Record
	for i := range 45 {
		recs = append(recs, issue(i))
		tick(400 * time.Millisecond) // two or three keys a second: ties by id
	}
	for i := 0; i < 10; i += 2 {
		if _, err := ops.RevokeKey(ctx, actor, recs[i].ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := ops.RotateKey(ctx, actor, recs[11].ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	tick(2 * time.Hour) // past the keys' hour: expired, and past what the service remembers
	testkit.Eventually(t, testkit.HangCheck, "the index holds every key and revocation", func() error {
		es, _ := store.KeysPage(keystore.PageQuery{Status: keystore.Revoked, Now: now(), Limit: 1000})
		return testkit.Equal([2]int{store.Len(), len(es)}, [2]int{46, 5})
	})

	ids := func(recs []keystore.Record) []string {
		out := []string{}
		for _, r := range recs {
			out = append(out, r.ID+"/"+string(r.StateAt(now())))
		}
		return out
	}
	// walk pages through svc and returns what they list and how many.
	walk := func(t *testing.T, svc *keyops.Service, f keyops.KeyFilter, limit int) (listed []string, pages int) {
		t.Helper()
		return walkPages(t, limit, func(after *keystore.Position) ([]string, *keystore.Position, error) {
			p, err := svc.ListKeysPage(ctx, f, after, limit)
			return ids(p.Keys), p.Next, err
		})
	}
	scans := func() int { c := rs.Calls(t); return c["hscan"] + c["hgetall"] }
	filters := []keyops.KeyFilter{
		{},
		{Consumer: con.ID},
		{Status: keystore.Active},
		{Status: keystore.Revoked},
		{Status: keystore.Expired},
		{Product: keystore.Registry, Env: keystore.Test},
		{Consumer: con.ID, Status: keystore.Active},
		{Consumer: "con_0000000000000000"},
	}
	for _, lag := range []bool{false, true} {
		stale.Store(lag)
		for _, f := range filters {
			all, err := plain.ListKeys(ctx, f) // reads every record
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(all, func(a, b keystore.Record) int { return keystore.PositionOf(a).Compare(keystore.PositionOf(b)) })
			for _, limit := range []int{1, 4, 1000} {
				t.Run(fmt.Sprintf("stale %v %+v limit %d", lag, f, limit), func(t *testing.T) {
					wantIDs, wantPages := ids(all), max(1, (len(all)+limit-1)/limit)
					if limit == 4 { // the pages of a service without an index
						if plainIDs, pages := walk(t, plain, f, limit); !slices.Equal(plainIDs, wantIDs) || pages != wantPages {
							t.Fatalf("a read of every record pages as %v in %d pages, want %v in %d", plainIDs, pages, wantIDs, wantPages)
						}
					}
					n0 := scans()
					got, pages := walk(t, ops, f, limit)
					if n := scans() - n0; n != 0 {
						t.Errorf("%d HSCANs, want none", n)
					}
					if !slices.Equal(got, wantIDs) {
						t.Errorf("listed %v\nwant %v (what a read of every record lists)", got, wantIDs)
					}
					if !lag && pages != wantPages {
						t.Errorf("%d pages, want %d (%d keys, %d a page)", pages, wantPages, len(all), limit)
					}
				})
			}
		}
	}

	// A key this service has just issued, that the index does not hold
	// yet, is listed where it belongs, once: after every other key, also
	// when the pages before are short.
	fresh := issue(0)
	hidden.Store(&fresh.Hash)
	// A page that ends before it reads its own records alone: the index's
	// five (four and the one that says a next page follows), not the key
	// this service has just issued.
	stale.Store(false)
	testkit.Eventually(t, testkit.HangCheck, "the replica's index has read the new record", func() error {
		return testkit.Equal(store.Len(), 47)
	})
	hgets := func() int { return rs.Calls(t)["hget"] }
	n0 := hgets()
	if p, err := ops.ListKeysPage(ctx, keyops.KeyFilter{}, nil, 4); err != nil || len(p.Keys) != 4 || p.Next == nil {
		t.Fatalf("first page: %d keys, next %v, %v", len(p.Keys), p.Next, err)
	}
	if n := hgets() - n0; n != 5 {
		t.Errorf("the first page of 4 read %d records, want 5", n)
	}
	for _, lag := range []bool{false, true} {
		stale.Store(lag)
		for _, f := range []keyops.KeyFilter{{}, {Consumer: con.ID}, {Status: keystore.Active}} {
			got, _ := walk(t, ops, f, 4)
			want, _ := walk(t, plain, f, 4)
			if !slices.Equal(got, want) || got[len(got)-1] != fresh.ID+"/active" {
				t.Errorf("stale %v %+v, after an issue the index has not seen: listed %v\nwant %v, ending with %s", lag, f, got, want, fresh.ID)
			}
		}
	}
}

// walkPages reads a list page by page through list, which returns a
// page's items as text and where the next page starts after, and returns
// every item listed and the number of pages. A page must hold at most
// limit items.
func walkPages(t *testing.T, limit int, list func(after *keystore.Position) ([]string, *keystore.Position, error)) (listed []string, pages int) {
	t.Helper()
	var after *keystore.Position
	for pages = 1; ; pages++ {
		items, next, err := list(after)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) > limit {
			t.Fatalf("page %d: %d items, limit %d", pages, len(items), limit)
		}
		listed = append(listed, items...)
		if next == nil {
			return listed, pages
		}
		if pages > 100 {
			t.Fatal("no end of the list")
		}
		after = next
	}
}
