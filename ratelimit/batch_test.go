package ratelimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/redis/go-redis/v9"
)

// TestRedisConcurrentDecisionsAreExact: decisions made at the same moment
// share script calls (many requests of one key among them), yet the limit
// and quota stay exact: of 400 concurrent requests over 8 keys with a
// burst of 20, exactly 20 per key are admitted, and Redis ran no more
// script calls than the decisions it made. A script lost by Redis
// (SCRIPT FLUSH) is loaded again within the batch.
func TestRedisConcurrentDecisionsAreExact(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 20, Quota: policy.Quota{Requests: 1000, Per: time.Hour}}
	for round, flush := range []bool{false, true} {
		if flush {
			if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		var admitted [8]atomic.Int64
		atOnce(400, func(i int) {
			id := "key_batch_" + string(rune('a'+round)) + string(rune('a'+i%8))
			d, err := r.Allow(context.Background(), id, lim)
			if err != nil {
				t.Errorf("Allow: %v", err)
				return
			}
			if d.Allowed {
				admitted[i%8].Add(1)
			}
		})
		for k := range admitted {
			if n := admitted[k].Load(); n != 20 {
				t.Errorf("round %d key %d: %d admitted, want exactly the burst of 20", round, k, n)
			}
		}
	}
	st := r.Stats()
	if st.FallbackDecisions != 0 || r.Degraded() {
		t.Errorf("stats %+v degraded=%v: Redis was bypassed", st, r.Degraded())
	}
	got := commandCalls(t, s, "evalsha") + commandCalls(t, s, "eval")
	t.Logf("Redis ran %d script calls for %d decisions", got, st.RedisDecisions)
	if got < 1 || got > int(st.RedisDecisions) {
		t.Errorf("Redis ran %d script calls for %d decisions, want between 1 and one each", got, st.RedisDecisions)
	}
}

// TestRedisCombinedDecisionFailsAlone: a key whose Redis entry Redis
// cannot use (here a hash written by hand where the bucket lives) fails
// its own decisions, and the decisions combined with it in the same
// script call still come out exact.
func TestRedisCombinedDecisionFailsAlone(t *testing.T) {
	t.Parallel()
	s, r := newPureRedis(t)
	if _, err := s.Do("HSET", ratelimit.DefaultKeyPrefix+"rl:{key_poisoned}", "x", "1"); err != nil {
		t.Fatal(err)
	}
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 10}
	var admitted, refused, poisonedErrs, otherErrs atomic.Int64
	atOnce(200, func(i int) {
		id := "key_healthy"
		if i%2 == 1 {
			id = "key_poisoned"
		}
		d, err := r.Allow(context.Background(), id, lim)
		switch {
		case err != nil && id == "key_poisoned":
			poisonedErrs.Add(1)
		case err != nil:
			otherErrs.Add(1)
			t.Errorf("healthy key: %v", err)
		case id == "key_poisoned":
			t.Errorf("poisoned key decided: %+v", d)
		case d.Allowed:
			admitted.Add(1)
		default:
			refused.Add(1)
		}
	})
	if poisonedErrs.Load() != 100 || admitted.Load() != 10 || refused.Load() != 90 {
		t.Errorf("poisoned key: %d errors (want 100); healthy key: %d admitted, %d refused, %d errors (want 10, 90, 0)",
			poisonedErrs.Load(), admitted.Load(), refused.Load(), otherErrs.Load())
	}
	calls := commandCalls(t, s, "evalsha") + commandCalls(t, s, "eval")
	t.Logf("%d script calls for 200 decisions", calls)
}

// TestRedisCombinedDecisionsCountDown: requests of one key decided
// together see each other in order, as requests decided one by one do:
// the admitted ones report every remaining count from limit-1 down to 0
// once, and the rest are refused for the tighter of bucket and quota.
func TestRedisCombinedDecisionsCountDown(t *testing.T) {
	t.Parallel()
	_, r := newPureRedis(t)
	cases := []struct {
		name   string
		lim    policy.Limit
		admit  int
		reason ratelimit.Reason
	}{
		{"bucket", policy.Limit{Rate: 1, Per: time.Hour, Burst: 20}, 20, ratelimit.ReasonRate},
		{"quota tighter than the bucket", policy.Limit{Rate: 1, Per: time.Hour, Burst: 20, Quota: policy.Quota{Requests: 12, Per: time.Hour}}, 12, ratelimit.ReasonQuota},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := "key_countdown_" + strings.ReplaceAll(c.name, " ", "_")
			ds := make([]ratelimit.Decision, 60)
			atOnce(len(ds), func(i int) {
				d, err := r.Allow(context.Background(), id, c.lim)
				if err != nil {
					t.Error(err)
				}
				ds[i] = d
			})
			seen := map[int64]int{}
			for _, d := range ds {
				switch {
				case d.Allowed:
					seen[d.Remaining]++
				case d.Reason != c.reason || d.RetryAfter <= 0:
					t.Errorf("refusal %+v, want reason %s with a retry-after", d, c.reason)
				}
			}
			for rem := int64(0); rem < int64(c.admit); rem++ {
				if seen[rem] != 1 {
					t.Errorf("remaining %d reported %d times, want once: %v", rem, seen[rem], seen)
				}
			}
			if len(seen) != c.admit {
				t.Errorf("admitted requests reported %d distinct remaining counts, want %d: %v", len(seen), c.admit, seen)
			}
		})
	}
}

// atOnce runs f(0) to f(n-1) in n goroutines released at the same moment,
// so that their decisions reach the limiter together, and waits for all.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// newPureRedis is a Redis limiter on a fresh redis-server, with no
// fallback in front of it: its errors reach the test. Its decisions may
// take 2 s, not the product's 100 ms: these tests count what is decided,
// and a loaded machine that stalls a loopback call must not fail them
// (newRedisTimeout's tests are the ones about timeouts).
func newPureRedis(t *testing.T) (*redistest.Server, *ratelimit.Redis) {
	t.Helper()
	s := redistest.Start(t)
	r, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: s.Client(t), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// TestRedisDropsDecisionsOfCallersThatLeft: a decision that waits behind
// a call in flight and whose caller gives up before it is sent is never
// sent, so it spends neither a token nor quota of a request that is never
// served. Redis is frozen (SIGSTOP) so that one call stays in flight
// while the other queues behind it.
func TestRedisDropsDecisionsOfCallersThatLeft(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	client := s.Client(t)
	sent := &sentHook{id: "key_inflight", sent: make(chan struct{})}
	client.AddHook(sent)
	r, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: client, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 1, Quota: policy.Quota{Requests: 1, Per: time.Hour}}
	if _, err := r.Allow(context.Background(), "key_warm", lim); err != nil {
		t.Fatal(err)
	}
	s.Freeze()
	defer s.Thaw()
	inflight := make(chan error, 1)
	go func() {
		_, err := r.Allow(context.Background(), "key_inflight", lim)
		inflight <- err
	}()
	// key_inflight's call is out (its command reached the client), so
	// that key_gave_up queues behind it: an order, not a sleep.
	select {
	case <-sent.sent:
	case <-time.After(testkit.HangCheck):
		t.Fatal("key_inflight's call was not sent (hang check)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.Allow(ctx, "key_gave_up", lim); err == nil {
		t.Fatal("a caller whose context ended got a decision from a frozen Redis")
	}
	s.Thaw()
	if err := <-inflight; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	// Queued after key_gave_up's decision: once it is decided, that one
	// was sent or dropped.
	if _, err := r.Allow(context.Background(), "key_after", lim); err != nil {
		t.Fatal(err)
	}
	d, err := r.Allow(context.Background(), "key_gave_up", lim)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed {
		t.Errorf("the first served request of key_gave_up was refused (%s): the abandoned decision spent its only token", d.Reason)
	}
}

// TestRedisCombinedDecisionsOfOneIDUnderTwoLimits: requests of one key
// decided in the same calls under two limits (an override that changed
// while requests were in flight) are each decided, and answered, under
// their own: the key's bucket is one, so the roomy limit admits all of
// its requests, the tight one never more than its burst, and every
// answer reports its own limit.
func TestRedisCombinedDecisionsOfOneIDUnderTwoLimits(t *testing.T) {
	t.Parallel()
	s, r := newPureRedis(t)
	tight := policy.Limit{Rate: 1, Per: time.Hour, Burst: 10}
	roomy := policy.Limit{Rate: 1, Per: time.Hour, Burst: 1000}
	var tightIn, roomyIn, roomyOut atomic.Int64
	atOnce(200, func(i int) {
		lim := tight
		if i%2 == 1 {
			lim = roomy
		}
		d, err := r.Allow(context.Background(), "key_two_limits", lim)
		if err != nil {
			t.Error(err)
			return
		}
		if d.Limit != int64(lim.Burst) {
			t.Errorf("a request under burst %d answered with limit %d", lim.Burst, d.Limit)
		}
		switch {
		case lim == roomy && d.Allowed:
			roomyIn.Add(1)
		case lim == roomy:
			roomyOut.Add(1)
		case d.Allowed:
			tightIn.Add(1)
		}
	})
	if roomyIn.Load() != 100 || roomyOut.Load() != 0 || tightIn.Load() > 10 {
		t.Errorf("roomy limit: %d admitted, %d refused (want 100, 0); tight limit: %d admitted (want at most 10)",
			roomyIn.Load(), roomyOut.Load(), tightIn.Load())
	}
	t.Logf("tight limit admitted %d; %d script calls for 200 decisions", tightIn.Load(), commandCalls(t, s, "evalsha")+commandCalls(t, s, "eval"))
}

// sentHook closes sent when the first command or pipeline naming id (in
// a key) goes out through the client.
type sentHook struct {
	id   string
	once sync.Once
	sent chan struct{}
}

func (h *sentHook) see(cmds []redis.Cmder) {
	for _, c := range cmds {
		if strings.Contains(fmt.Sprint(c.Args()...), h.id) {
			h.once.Do(func() { close(h.sent) })
		}
	}
}

func (h *sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.see(cmds)
		return next(ctx, cmds)
	}
}
