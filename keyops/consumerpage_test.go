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

// TestListConsumersPageReadsItsPageOnly: with the Redis keystore, a page
// of the consumer list (the admin API's GET /v1/consumers) comes from the
// replica's copy of the consumers and an HMGET of that page: no HSCAN
// through every consumer. Walking the pages lists exactly what a read of
// every consumer lists, in the same order (creation second, then id), in
// as many pages as the consumers fill. A copy that lags the store changes
// nothing: a consumer deleted meanwhile is left out (its page is shorter,
// the next one follows), and one this service has just created is listed
// even before the copy holds it.
func TestListConsumersPageReadsItsPageOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	store := openIndex(t, rs)
	clock := testkit.NewClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	now, tick := clock.Now, clock.Add

	var ghost atomic.Pointer[keystore.Position] // deleted, and still in the copy
	var hidden atomic.Pointer[string]           // created, and not in the copy yet
	pager := func(after *keystore.Position, limit int) ([]keystore.Position, bool) {
		ps, ok := store.ConsumersPage(after, limit)
		if g := ghost.Load(); g != nil && (after == nil || g.Compare(*after) > 0) {
			ps = append(ps, *g)
			slices.SortFunc(ps, keystore.Position.Compare)
			ps = ps[:min(len(ps), limit)]
		}
		if h := hidden.Load(); h != nil {
			ps = slices.DeleteFunc(ps, func(p keystore.Position) bool { return p.ID == *h })
		}
		return ps, ok
	}
	admin := &keystore.RedisAdmin{Client: rs.Client(t), PageSize: 10, Now: now}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: defaultLimits(t), Auditor: &audittest.Recorder{}, Now: now, ConsumersPage: pager})
	if err != nil {
		t.Fatal(err)
	}
	// A plain service reads every consumer: what the pages must equal.
	plain, err := keyops.New(keyops.Config{Store: admin, Limits: defaultLimits(t), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	actor := keyops.Actor{ID: "test"}
	create := func(i int) keystore.Consumer {
		t.Helper()
		c, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: fmt.Sprintf("customer %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var cons []keystore.Consumer
	for i := range 35 {
		cons = append(cons, create(i))
		tick(400 * time.Millisecond) // two or three a second: ties by id
	}
	gone, err := ops.DeleteConsumer(ctx, actor, cons[7].ID)
	if err != nil {
		t.Fatal(err)
	}
	tick(time.Minute) // past what the service remembers
	testkit.Eventually(t, testkit.HangCheck, "the copy holds every consumer", func() error {
		ps, _ := store.ConsumersPage(nil, 1000)
		return testkit.Equal(len(ps), 34)
	})

	names := func(cs []keystore.Consumer) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	walk := func(t *testing.T, svc *keyops.Service, limit int) (listed []string, pages int) {
		t.Helper()
		return walkPages(t, limit, func(after *keystore.Position) ([]string, *keystore.Position, error) {
			p, err := svc.ListConsumersPage(ctx, after, limit)
			return names(p.Consumers), p.Next, err
		})
	}
	want := func(t *testing.T) []string {
		all, err := plain.ListConsumers(ctx) // reads every consumer, oldest first
		if err != nil {
			t.Fatal(err)
		}
		return names(all)
	}
	scans := func() int { c := rs.Calls(t); return c["hscan"] + c["hgetall"] }
	for _, lag := range []bool{false, true} {
		if lag {
			g := keystore.Position{Created: gone.CreatedAt.Unix(), ID: gone.ID}
			ghost.Store(&g)
		}
		for _, limit := range []int{1, 4, 1000} {
			t.Run(fmt.Sprintf("deleted one still in the copy %v, limit %d", lag, limit), func(t *testing.T) {
				all := want(t)
				wantPages := max(1, (len(all)+limit-1)/limit)
				if got, pages := walk(t, plain, limit); !slices.Equal(got, all) || pages != wantPages {
					t.Fatalf("a read of every consumer pages as %v in %d pages, want %v in %d", got, pages, all, wantPages)
				}
				n0 := scans()
				got, pages := walk(t, ops, limit)
				if n := scans() - n0; n != 0 {
					t.Errorf("%d HSCANs, want none", n)
				}
				if !slices.Equal(got, all) {
					t.Errorf("listed %v\nwant %v (what a read of every consumer lists)", got, all)
				}
				if !lag && pages != wantPages {
					t.Errorf("%d pages, want %d (%d consumers, %d a page)", pages, wantPages, len(all), limit)
				}
			})
		}
	}
	ghost.Store(nil)

	// A page reads its own consumers alone: the five the copy gives
	// (four and the one that says a next page follows), with an HMGET
	// for each bucket they fall in (one pipelined round trip), and no
	// scan.
	c0 := rs.Calls(t)
	if p, err := ops.ListConsumersPage(ctx, nil, 4); err != nil || len(p.Consumers) != 4 || p.Next == nil {
		t.Fatalf("first page: %d consumers, next %v, %v", len(p.Consumers), p.Next, err)
	}
	if c := rs.Calls(t); c["hmget"]-c0["hmget"] < 1 || c["hmget"]-c0["hmget"] > 5 || c["hget"] != c0["hget"] || c["hscan"] != c0["hscan"] {
		t.Errorf("the first page of 4 made %d HMGETs, %d HGETs and %d HSCANs, want 1 to 5 and none", c["hmget"]-c0["hmget"], c["hget"]-c0["hget"], c["hscan"]-c0["hscan"])
	}

	// A consumer this service has just created, that the copy does not
	// hold yet, is listed where it belongs, once: last.
	fresh := create(99)
	hidden.Store(&fresh.ID)
	for _, limit := range []int{4, 1000} {
		got, _ := walk(t, ops, limit)
		if all := want(t); !slices.Equal(got, all) || got[len(got)-1] != fresh.Name {
			t.Errorf("limit %d, after a creation the copy has not seen: listed %v\nwant %v, ending with %s", limit, got, all, fresh.Name)
		}
	}

	if _, err := ops.ListConsumersPage(ctx, nil, 0); err == nil {
		t.Error("a limit of 0 was taken")
	}
}

// TestConsumersWhereReadsWhatTheCopyFinds: with the Redis keystore,
// finding consumers by a field (the portal's sign-in by metadata) picks
// them in the replica's copy, which holds only what a replica reads of a
// consumer, and reads those alone: the consumers come back whole (their
// names too), with no HSCAN, and one the copy still shows with an old
// value that no longer matches in Redis is left out.
func TestConsumersWhereReadsWhatTheCopyFinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	store := openIndex(t, rs)
	var stale atomic.Pointer[string] // an id the copy is made to match
	finder := func(match func(*keystore.Consumer) bool) ([]string, bool) {
		ids, ok := store.ConsumersWhere(match)
		if s := stale.Load(); s != nil && !slices.Contains(ids, *s) {
			ids = append(ids, *s)
		}
		return ids, ok
	}
	admin := &keystore.RedisAdmin{Client: rs.Client(t)}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: defaultLimits(t), ConsumersWhere: finder})
	if err != nil {
		t.Fatal(err)
	}
	actor := keyops.Actor{ID: "test"}
	var ids []string
	for i := range 30 {
		c, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: fmt.Sprintf("customer %d", i), Metadata: map[string]string{"team": fmt.Sprint(i % 3)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	testkit.Eventually(t, testkit.HangCheck, "the copy holds every consumer", func() error {
		got, _ := store.ConsumersWhere(func(*keystore.Consumer) bool { return true })
		return testkit.Equal(len(got), 30)
	})
	team := func(v string) func(*keystore.Consumer) bool {
		return func(c *keystore.Consumer) bool { return c.Metadata["team"] == v }
	}
	stale.Store(&ids[1]) // in team 1, never in team 0
	scans := func() int { c := rs.Calls(t); return c["hscan"] + c["hgetall"] }
	n0 := scans()
	got, err := ops.ConsumersWhere(ctx, team("0"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	want := []string{"customer 0", "customer 12", "customer 15", "customer 18", "customer 21", "customer 24", "customer 27", "customer 3", "customer 6", "customer 9"}
	if !slices.Equal(names, want) {
		t.Errorf("team 0: %v, want %v", names, want)
	}
	if n := scans() - n0; n != 0 {
		t.Errorf("%d scans of the consumers, want none", n)
	}
}
