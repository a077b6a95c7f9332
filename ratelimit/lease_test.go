package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// newLeased is a replica's Redis limiter behind leases of ttl, on its own
// client, composed with its fallback; now nil is the real clock.
func newLeased(t *testing.T, s *redistest.Server, ttl time.Duration, now func() time.Time) (*ratelimit.Resilient, *ratelimit.Leases) {
	t.Helper()
	r, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: newClient(t, 2*time.Second, s.Addr), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := ratelimit.NewLeases(r, ratelimit.LeaseConfig{TTL: ttl, Now: now})
	res, err := ratelimit.NewResilient(l, ratelimit.ResilientConfig{Replicas: 3, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return res, l
}

// leasedReplicas is n replicas' limiters with one-minute leases on s.
func leasedReplicas(t *testing.T, s *redistest.Server, n int) []*ratelimit.Resilient {
	t.Helper()
	var replicas []*ratelimit.Resilient
	for range n {
		r, _ := newLeased(t, s, time.Minute, nil)
		replicas = append(replicas, r)
	}
	return replicas
}

// scriptCalls is how many times Redis ran the limiter's script.
func scriptCalls(t *testing.T, s *redistest.Server) int {
	return commandCalls(t, s, "evalsha") + commandCalls(t, s, "eval")
}

// A client sending one request after another to one replica sees the
// same RateLimit-Remaining with leases as without (one less a request),
// the same refusal once the burst is spent, and far fewer Redis calls.
func TestLeasedDecisionsCountDownAsExactOnes(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r, l := newLeased(t, s, time.Minute, nil)
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 100} // no refill during the test
	calls0 := scriptCalls(t, s)
	for i := range 100 {
		d, err := allow(t, r, "key_seq", lim)
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
		if d.Limit != 100 || d.Remaining != int64(99-i) {
			t.Fatalf("request %d: Limit %d Remaining %d, want 100 and %d", i, d.Limit, d.Remaining, 99-i)
		}
		if d.Reset <= 0 || d.Reset > 100*time.Hour {
			t.Fatalf("request %d: Reset %s", i, d.Reset)
		}
	}
	d, err := allow(t, r, "key_seq", lim)
	if err != nil || d.Allowed || d.Reason != ratelimit.ReasonRate || d.RetryAfter <= 0 {
		t.Fatalf("101st request: %+v %v, want a rate refusal", d, err)
	}
	calls := scriptCalls(t, s) - calls0
	// Leases of 1, 2, 4, 8, 16, 25, 25 and the last 19 cells (a quarter
	// of the burst at most), then the refusal.
	if calls != 9 {
		t.Errorf("Redis ran the script %d times for 101 decisions, want 9", calls)
	}
	st := r.Stats()
	if st.LeasedDecisions != 92 || st.RedisDecisions != 9 || l.Leased() != 92 {
		t.Errorf("stats %+v, want 92 leased and 9 Redis decisions", st)
	}
}

// Three replicas with leases share one bucket: together they admit what
// the bucket holds, exactly, however the requests are spread, and
// nothing more once it is empty.
func TestLeasesAdmitExactlyTheBucketAcrossReplicas(t *testing.T) {
	t.Parallel()
	replicas := leasedReplicas(t, redistest.Start(t), 3)
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 300}
	var admitted, refused, leased atomic.Int64
	var wg sync.WaitGroup
	for _, r := range replicas {
		for range 8 {
			wg.Go(func() {
				for range 100 { // 2,400 requests for 300 cells
					d, err := r.Allow(context.Background(), "key_shared", lim)
					switch {
					case err != nil:
						t.Error(err)
						return
					case d.Allowed:
						admitted.Add(1)
					case d.Reason == ratelimit.ReasonRate:
						refused.Add(1)
					default:
						t.Errorf("unexpected refusal %+v", d)
					}
				}
			})
		}
	}
	wg.Wait()
	for _, r := range replicas {
		leased.Add(int64(r.Stats().LeasedDecisions))
		if st := r.Stats(); st.FallbackDecisions != 0 || st.RedisErrors != 0 {
			t.Errorf("a replica decided without Redis: %+v", st)
		}
	}
	// Every lease was used up: its replica's requests went on after the
	// bucket emptied, so no cell was left to expire unused.
	if admitted.Load() != 300 || refused.Load() != 2100 {
		t.Fatalf("admitted %d, refused %d; want exactly 300 and 2100", admitted.Load(), refused.Load())
	}
	if leased.Load() == 0 {
		t.Errorf("no decision came from a lease")
	}
}

// A limit with a quota is decided in Redis request by request: a lease's
// unused cells would spend quota that no request used.
func TestLeasesNeverLeaseAQuota(t *testing.T) {
	t.Parallel()
	replicas := leasedReplicas(t, redistest.Start(t), 3)
	lim := policy.Limit{Rate: 1e6, Per: time.Second, Burst: 1e6, Quota: policy.Quota{Requests: 50, Per: time.Hour}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, r := range replicas {
		for range 4 {
			wg.Go(func() {
				for range 25 {
					d, err := r.Allow(context.Background(), "key_quota", lim)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					} else if d.Reason != ratelimit.ReasonQuota {
						t.Errorf("unexpected refusal %+v", d)
					}
				}
			})
		}
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d, want exactly the quota, 50", admitted.Load())
	}
	for _, r := range replicas {
		if st := r.Stats(); st.LeasedDecisions != 0 {
			t.Errorf("stats %+v: want none leased", st)
		}
	}
}

// A lease's cells are not used after it ends: the next request goes to
// Redis, asking for fewer cells (its demand was lower than the lease),
// and the cells that ended unused are gone from the bucket, never given
// back twice.
func TestLeaseEndsAfterItsTTL(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	var mu sync.Mutex
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	r, _ := newLeased(t, s, 20*time.Millisecond, now)
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 100}
	for i := range 4 { // leases of 1, 2 (used up) and 4 (one cell used)
		if d, err := allow(t, r, "key_ttl", lim); err != nil || !d.Allowed || d.Remaining != int64(99-i) {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
	}
	calls := scriptCalls(t, s)
	mu.Lock()
	clock = clock.Add(20 * time.Millisecond) // the lease of 4 ends with 3 cells unused
	mu.Unlock()
	d, err := allow(t, r, "key_ttl", lim)
	if err != nil || !d.Allowed {
		t.Fatalf("request after the lease: %+v %v", d, err)
	}
	if got := scriptCalls(t, s) - calls; got != 1 {
		t.Errorf("the request after the lease ended made %d script calls, want 1", got)
	}
	// 7 cells charged before, 3 of them unused; this request's lease is
	// 2 cells (half of 4), one of them its own.
	if d.Remaining != 100-7-2+1 {
		t.Errorf("Remaining %d after the lease ended, want %d", d.Remaining, 100-7-2+1)
	}
	// Another replica without leases sees what Redis holds.
	other := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	if d, err := allow(t, other, "key_ttl", lim); err != nil || d.Remaining != 100-9-1 {
		t.Errorf("the other replica: %+v %v, want Remaining %d", d, err, 100-9-1)
	}
}

// A change of the key's limit (a new plan) ends its lease: the next
// request is decided in Redis under the new limit.
func TestLeaseEndsWhenTheLimitChanges(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r, _ := newLeased(t, s, time.Minute, nil)
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 100}
	for i := range 4 {
		if d, err := allow(t, r, "key_plan", lim); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
	}
	calls := scriptCalls(t, s)
	// 7 cells are spent (leases of 1, 2 and 4), 3 of them unused.
	lower := policy.Limit{Rate: 1, Per: time.Hour, Burst: 7}
	d, err := allow(t, r, "key_plan", lower)
	if err != nil || d.Allowed || d.Limit != 7 {
		t.Fatalf("under the lower limit: %+v %v, want a refusal of limit 7", d, err)
	}
	if got := scriptCalls(t, s) - calls; got != 1 {
		t.Errorf("%d script calls after the change, want 1", got)
	}
}
