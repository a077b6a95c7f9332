package ratelimit_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

func newClock() *testkit.Clock { return testkit.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) }

// step is one request in a scripted sequence.
type step struct {
	advance time.Duration // clock advance before the request
	lim     *policy.Limit // nil: the case's limit
	allowed bool
	reason  ratelimit.Reason
	limit   int64 // RateLimit-Limit; 0: don't check
	remain  int64 // checked when allowed
	retry   time.Duration
	reset   time.Duration // 0: don't check
}

func TestLocalAllow(t *testing.T) {
	t.Parallel()
	tenPerSecBurst3 := policy.Limit{Rate: 10, Per: time.Second, Burst: 3}
	burst5 := policy.Limit{Rate: 10, Per: time.Second, Burst: 5}
	cases := []struct {
		name  string
		lim   policy.Limit
		steps []step
	}{
		{
			name: "burst is admitted then the bucket refuses with retry-after of one token",
			lim:  tenPerSecBurst3,
			steps: []step{
				{allowed: true, limit: 3, remain: 2, reset: 100 * time.Millisecond},
				{allowed: true, limit: 3, remain: 1, reset: 200 * time.Millisecond},
				{allowed: true, limit: 3, remain: 0, reset: 300 * time.Millisecond},
				{reason: ratelimit.ReasonRate, limit: 3, retry: 100 * time.Millisecond, reset: 300 * time.Millisecond},
				{advance: 40 * time.Millisecond, reason: ratelimit.ReasonRate, limit: 3, retry: 60 * time.Millisecond},
			},
		},
		{
			name: "tokens come back at the configured rate",
			lim:  tenPerSecBurst3,
			steps: []step{
				{allowed: true, remain: 2}, {allowed: true, remain: 1}, {allowed: true, remain: 0},
				{reason: ratelimit.ReasonRate},
				{advance: 100 * time.Millisecond, allowed: true, remain: 0},
				{reason: ratelimit.ReasonRate},
				{advance: time.Second, allowed: true, remain: 2},
			},
		},
		{
			name: "quota admits exactly its count and reports itself when tighter",
			lim:  policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 3, Per: time.Hour}},
			steps: []step{
				{allowed: true, limit: 3, remain: 2, reset: time.Hour},
				{advance: time.Minute, allowed: true, limit: 3, remain: 1, reset: 59 * time.Minute},
				{allowed: true, limit: 3, remain: 0},
				{reason: ratelimit.ReasonQuota, limit: 3, retry: 59 * time.Minute, reset: 59 * time.Minute},
				{advance: 58 * time.Minute, reason: ratelimit.ReasonQuota, retry: time.Minute},
				{advance: time.Minute, allowed: true, limit: 3, remain: 2, reset: time.Hour},
			},
		},
		{
			name: "a request refused by the bucket consumes no quota",
			lim:  policy.Limit{Rate: 1, Per: time.Second, Burst: 1, Quota: policy.Quota{Requests: 2, Per: time.Hour}},
			steps: []step{
				{allowed: true},
				{reason: ratelimit.ReasonRate}, {reason: ratelimit.ReasonRate}, {reason: ratelimit.ReasonRate},
				{advance: time.Second, allowed: true, remain: 0},
				{advance: time.Second, reason: ratelimit.ReasonQuota},
			},
		},
		{
			name: "a request refused by the quota consumes no token",
			lim:  policy.Limit{Rate: 1, Per: time.Hour, Burst: 2, Quota: policy.Quota{Requests: 1, Per: time.Minute}},
			steps: []step{
				{allowed: true},
				{reason: ratelimit.ReasonQuota}, {reason: ratelimit.ReasonQuota}, {reason: ratelimit.ReasonQuota},
				{advance: time.Minute, allowed: true},
			},
		},
		{
			name: "a changed limit replaces the bucket",
			lim:  policy.Limit{Rate: 1, Per: time.Hour, Burst: 1},
			steps: []step{
				{allowed: true},
				{reason: ratelimit.ReasonRate},
				{lim: &burst5, allowed: true, limit: 5, remain: 4},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			l := ratelimit.NewLocal(ratelimit.LocalConfig{Now: clk.Now})
			for i, s := range tc.steps {
				clk.Add(s.advance)
				lim := tc.lim
				if s.lim != nil {
					lim = *s.lim
				}
				d, err := l.Allow(context.Background(), "key_0123abcd", lim)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				checkStep(t, i, d, s)
			}
		})
	}
}

func checkStep(t *testing.T, i int, d ratelimit.Decision, s step) {
	t.Helper()
	if d.Allowed != s.allowed || d.Reason != s.reason {
		t.Fatalf("step %d: got allowed=%v reason=%q, want allowed=%v reason=%q (%+v)", i, d.Allowed, d.Reason, s.allowed, s.reason, d)
	}
	if s.limit != 0 && d.Limit != s.limit {
		t.Errorf("step %d: Limit = %d, want %d", i, d.Limit, s.limit)
	}
	if s.allowed && d.Remaining != s.remain {
		t.Errorf("step %d: Remaining = %d, want %d", i, d.Remaining, s.remain)
	}
	if !s.allowed && d.Remaining != 0 {
		t.Errorf("step %d: refused with Remaining = %d, want 0", i, d.Remaining)
	}
	if s.allowed && d.RetryAfter != 0 {
		t.Errorf("step %d: admitted with RetryAfter = %s", i, d.RetryAfter)
	}
	if !s.allowed && s.retry != 0 && d.RetryAfter != s.retry {
		t.Errorf("step %d: RetryAfter = %s, want %s", i, d.RetryAfter, s.retry)
	}
	if !s.allowed && d.RetryAfter <= 0 {
		t.Errorf("step %d: refused with RetryAfter = %s, want > 0", i, d.RetryAfter)
	}
	if s.reset != 0 && d.Reset != s.reset {
		t.Errorf("step %d: Reset = %s, want %s", i, d.Reset, s.reset)
	}
	if d.Reset < d.RetryAfter {
		t.Errorf("step %d: Reset %s before RetryAfter %s", i, d.Reset, d.RetryAfter)
	}
}

func TestLocalRejectsUnusableInput(t *testing.T) {
	t.Parallel()
	l := ratelimit.NewLocal(ratelimit.LocalConfig{})
	good := policy.Limit{Rate: 1, Per: time.Second, Burst: 1}
	for name, tc := range map[string]struct {
		id  string
		lim policy.Limit
	}{
		"empty id":   {"", good},
		"zero burst": {"key_a", policy.Limit{Rate: 1, Per: time.Second}},
		"zero rate":  {"key_a", policy.Limit{Per: time.Second, Burst: 1}},
		"zero per":   {"key_a", policy.Limit{Rate: 1, Burst: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := l.Allow(context.Background(), tc.id, tc.lim); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestLocalMemoryIsBounded(t *testing.T) {
	t.Parallel()
	l := ratelimit.NewLocal(ratelimit.LocalConfig{MaxKeys: 100})
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 1}
	for i := range 1000 {
		if d, err := l.Allow(context.Background(), "key_"+strconv.Itoa(i), lim); err != nil || !d.Allowed {
			t.Fatalf("id %d: %+v %v", i, d, err)
		}
	}
	if n := l.Len(); n != 100 {
		t.Fatalf("Len = %d after 1000 ids, want 100", n)
	}
	// The most recent id is still limited.
	if d, _ := l.Allow(context.Background(), "key_999", lim); d.Allowed {
		t.Fatal("key_999 was forgotten")
	}
}

// TestLocalConcurrentExactCounts: many callers on a few ids, with room
// for all of them, admit exactly the quota of each id, whether the Local
// has one shard (a small MaxKeys) or many (the default): no decision is
// lost or counted twice.
func TestLocalConcurrentExactCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		maxKeys int
	}{
		{"one shard", 16},
		{"sharded", 0}, // DefaultLocalMaxKeys
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := ratelimit.NewLocal(ratelimit.LocalConfig{MaxKeys: tc.maxKeys})
			lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 50, Quota: policy.Quota{Requests: 40, Per: time.Hour}}
			expectAdmitted(t, []allower{l}, 16, 50, 4, lim, 40)
		})
	}
}

// TestLocalChurnKeepsDecisionsWhole: while ids churn through a Local so
// small that the LRU forgets an id on almost every call, each decision
// is whole: an admitted one leaves from 0 to burst-1 tokens, a refused
// one is a rate refusal that says when to retry, and no more ids are
// kept than MaxKeys. A decision that ran on a bucket the LRU had just
// handed to another id would share its state with that id's decision,
// which the race detector reports (the package's tests run under -race).
func TestLocalChurnKeepsDecisionsWhole(t *testing.T) {
	t.Parallel()
	const maxKeys = 4
	l := ratelimit.NewLocal(ratelimit.LocalConfig{MaxKeys: maxKeys})
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 3}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				// Half the calls on four hot ids, half on ids seen once.
				id := "hot_" + strconv.Itoa(i%4)
				if i%2 == 1 {
					id = "churn_" + strconv.Itoa(g*100_000+i)
				}
				d, err := l.Allow(context.Background(), id, lim)
				switch {
				case err != nil:
					t.Error(err)
					return
				case d.Allowed && (d.Remaining < 0 || d.Remaining >= int64(lim.Burst)):
					t.Errorf("%s admitted with %d remaining, want 0 to %d", id, d.Remaining, lim.Burst-1)
					return
				case !d.Allowed && (d.Reason != ratelimit.ReasonRate || d.RetryAfter <= 0):
					t.Errorf("%s refused: %+v, want a rate refusal with a retry-after", id, d)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := l.Len(); n > maxKeys {
		t.Errorf("Len %d, above MaxKeys %d", n, maxKeys)
	}
}

type allower interface {
	Allow(context.Context, string, policy.Limit) (ratelimit.Decision, error)
}

// expectAdmitted has callers goroutines on each limiter make calls
// decisions each, spread over the ids key_0, key_1, …, and checks that
// every id admitted exactly want.
func expectAdmitted(t *testing.T, limiters []allower, callers, calls, ids int, lim policy.Limit, want int64) {
	t.Helper()
	admitted := make([]atomic.Int64, ids)
	var wg sync.WaitGroup
	for _, l := range limiters {
		for g := range callers {
			wg.Go(func() {
				for i := range calls {
					id := (g + i) % ids
					d, err := l.Allow(context.Background(), "key_"+strconv.Itoa(id), lim)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted[id].Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	for id := range admitted {
		if n := admitted[id].Load(); n != want {
			t.Errorf("key_%d: %d admitted, want exactly %d", id, n, want)
		}
	}
}

func ExampleLocal() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := ratelimit.NewLocal(ratelimit.LocalConfig{Now: func() time.Time { return now }})
	lim := policy.Limit{Rate: 1, Per: time.Second, Burst: 2}
	for range 3 {
		d, _ := l.Allow(context.Background(), "key_0123abcd", lim)
		fmt.Printf("allowed=%v limit=%d remaining=%d retry-after=%s reason=%q\n", d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.Reason)
	}
	// Output:
	// allowed=true limit=2 remaining=1 retry-after=0s reason=""
	// allowed=true limit=2 remaining=0 retry-after=0s reason=""
	// allowed=false limit=2 remaining=0 retry-after=1s reason="rate"
}

// TestLocalForgetsTheLeastRecentlyUsed: when a full Local meets a new
// id, the id it forgets is the one used longest ago (a refused request
// is a use too), and a forgotten id starts afresh: a full bucket and an
// unused quota.
func TestLocalForgetsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	l := ratelimit.NewLocal(ratelimit.LocalConfig{MaxKeys: 3})
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 1, Quota: policy.Quota{Requests: 1, Per: time.Hour}}
	steps := []struct {
		id      string
		allowed bool
	}{
		{"a", true}, {"b", true}, {"c", true}, // a is the least recent
		{"a", false}, // now b is
		{"d", true},  // forgets b
		{"a", false}, // a is remembered; c is now the least recent
		{"b", true},  // b was forgotten: afresh; forgets c
		{"c", true},  // c was forgotten: afresh; forgets d
		{"a", false},
		{"b", false},
	}
	for i, s := range steps {
		d, err := l.Allow(context.Background(), s.id, lim)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != s.allowed {
			t.Fatalf("step %d (%s): allowed %v, want %v", i, s.id, d.Allowed, s.allowed)
		}
	}
	if n := l.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
}
