package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// outageLimiter is a limiter with the production timeout and a short
// breaker back-off, and a record of breaker state changes.
func outageLimiter(t *testing.T, s *redistest.Server, mode ratelimit.FailureMode) (*ratelimit.Resilient, <-chan string, *observer.ObservedLogs) {
	t.Helper()
	changes := make(chan string, 100)
	core, logs := observer.New(zap.InfoLevel)
	r := newRedisTimeout(t, []string{s.Addr}, 100*time.Millisecond, ratelimit.ResilientConfig{
		Logger:         zap.New(core),
		FailureMode:    mode,
		Replicas:       2,
		BreakerBackoff: 300 * time.Millisecond,
		OnBreakerStateChange: func(from, to string) {
			select {
			case changes <- from + "->" + to:
			default:
			}
		},
	})
	return r, changes, logs
}

// waitOpen calls Allow until the breaker is open, checking each call with
// check.
func waitOpen(t *testing.T, r *ratelimit.Resilient, lim policy.Limit, check func(ratelimit.Decision, error)) {
	t.Helper()
	for i := 0; ; i++ {
		check(allow(t, r, "key_during", lim))
		if r.Stats().BreakerState == "open" {
			return
		}
		if i == 50 {
			t.Fatalf("breaker not open after 50 failing calls: %+v", r.Stats())
		}
	}
}

// waitRedis calls Allow until a decision comes from Redis again (a hang
// check bounds the wait).
func waitRedis(t *testing.T, r *ratelimit.Resilient, lim policy.Limit) {
	t.Helper()
	before := r.Stats().RedisDecisions
	testkit.Eventually(t, testkit.HangCheck, "Redis decisions to resume", func() error {
		if r.Stats().RedisDecisions != before && !r.Degraded() {
			return nil
		}
		_, _ = allow(t, r, "key_after", lim)
		return fmt.Errorf("stats %+v", r.Stats())
	})
}

func TestRedisKilledFailOpenDecidesLocallyAtLimitPerReplica(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r, changes, logs := outageLimiter(t, s, ratelimit.FailOpen)
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 10, Quota: policy.Quota{Requests: 6, Per: time.Hour}}
	if d, err := allow(t, r, "key_before", lim); err != nil || !d.Allowed || r.Degraded() {
		t.Fatalf("before the outage: %+v %v", d, err)
	}

	s.Kill()
	waitOpen(t, r, lim, func(d ratelimit.Decision, err error) {
		if err != nil {
			t.Fatalf("fail open returned an error: %v", err)
		}
	})
	if !r.Degraded() {
		t.Fatal("not Degraded with the breaker open")
	}
	// A fresh id gets limit/replicas locally: burst 10/2 but quota 6/2=3 is tighter.
	admitted := 0
	for range 10 {
		d, err := allow(t, r, "key_fresh", lim)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		} else if d.Reason != ratelimit.ReasonQuota {
			t.Fatalf("refusal %+v, want the quota", d)
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d during the outage, want quota/replicas = 3", admitted)
	}
	// Without a quota, the burst is burst/replicas = 5.
	noQuota := policy.Limit{Rate: 1, Per: time.Hour, Burst: 10}
	admitted = 0
	for range 10 {
		if d, err := allow(t, r, "key_fresh_burst", noQuota); err != nil {
			t.Fatal(err)
		} else if d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d during the outage, want burst/replicas = 5", admitted)
	}
	st := r.Stats()
	if st.FallbackDecisions < 10 || st.RedisErrors < 3 || st.UnavailableErrors != 0 {
		t.Fatalf("stats during the outage: %+v", st)
	}

	// Let a few probes fail (open → half-open → open each back-off), as
	// a Redis that stays down makes them, before it comes back.
	testkit.Eventually(t, testkit.HangCheck, "probes to fail", func() error {
		if n := r.Stats().BreakerStateChanges; n < 5 {
			_, _ = allow(t, r, "key_during", lim)
			return fmt.Errorf("%d breaker changes", n)
		}
		return nil
	})
	s.Restart()
	waitRedis(t, r, lim)
	if got := <-changes; got != "closed->open" {
		t.Errorf("first breaker change %q, want closed->open", got)
	}
	// The operator reads one line when Redis is lost and one when it is
	// back, however many probes failed in between.
	if n := logs.FilterMessage("ratelimit: Redis unavailable; circuit breaker open").Len(); n != 1 {
		t.Errorf("breaker opening logged %d times, want once: %v", n, logs.All())
	}
	if n := logs.FilterMessage("ratelimit: Redis is back, circuit breaker closed").Len(); n != 1 {
		t.Errorf("breaker closing logged %d times, want once: %v", n, logs.All())
	}
	if n := logs.Len(); n != 2 {
		t.Errorf("%d log lines for one outage with %d breaker changes, want 2: %v", n, r.Stats().BreakerStateChanges, logs.All())
	}
}

func TestRedisKilledFailClosedReturnsUnavailable(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r, _, _ := outageLimiter(t, s, ratelimit.FailClosed)
	lim := policy.Limit{Rate: 10, Per: time.Second, Burst: 10}
	if _, err := allow(t, r, "key_before", lim); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	waitOpen(t, r, lim, func(_ ratelimit.Decision, err error) {
		if !errors.Is(err, ratelimit.ErrUnavailable) {
			t.Fatalf("fail closed: error %v, want ErrUnavailable", err)
		}
	})
	if _, err := allow(t, r, "key_during", lim); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("with the breaker open: %v, want ErrUnavailable", err)
	}
	if st := r.Stats(); st.FallbackDecisions != 0 || st.UnavailableErrors == 0 {
		t.Fatalf("stats %+v", st)
	}
	s.Restart()
	waitRedis(t, r, lim)
	if _, err := allow(t, r, "key_after", lim); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}

func TestRedisFrozenNeverHangsAndRecovers(t *testing.T) {
	t.Parallel()
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t)
			r, _, _ := outageLimiter(t, s, mode)
			lim := policy.Limit{Rate: 10, Per: time.Second, Burst: 10}
			if _, err := allow(t, r, "key_before", lim); err != nil {
				t.Fatal(err)
			}
			s.Freeze()
			// Every call returns (allow fails the test after 2 s otherwise).
			waitOpen(t, r, lim, func(_ ratelimit.Decision, err error) {
				if mode == ratelimit.FailOpen && err != nil {
					t.Fatalf("fail open: %v", err)
				}
				if mode == ratelimit.FailClosed && !errors.Is(err, ratelimit.ErrUnavailable) {
					t.Fatalf("fail closed: %v, want ErrUnavailable", err)
				}
			})
			for range 20 { // and keep returning while the breaker probes
				_, _ = allow(t, r, "key_during", lim)
				time.Sleep(20 * time.Millisecond)
			}
			s.Thaw()
			waitRedis(t, r, lim)
		})
	}
}

// TestFrozenRedisHoldsNoDecisionPastTheTimeout: decisions that queue
// behind a pipeline to a frozen Redis each fail once their own timeout
// has passed, not after the pipeline ahead's timeout plus their own (the
// wait a request would add before its fallback answer).
//
// The test asserts this without wall time: a hook on the client records
// the deadline each call to the frozen Redis carries. Every decision's
// deadline is set when it arrives, so a call holding queued decisions
// carries a deadline less than one timeout after the first call's (they
// arrived while it was out). A call that gave them a fresh timeout once
// the first one had failed would carry one at least a whole timeout
// later. How long the decisions took is only logged, under a hang check.
func TestFrozenRedisHoldsNoDecisionPastTheTimeout(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	// Long enough that the queued decisions arrive while the first call is
	// out even on a loaded machine: the goroutines that make them start a
	// few milliseconds after it.
	const timeout = time.Second
	// The client's own read timeout is long: only the limiter's bounds
	// the wait.
	client := newClient(t, 30*time.Second, s.Addr)
	deadlines := &deadlineHook{}
	client.AddHook(deadlines)
	r, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: client, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	lim := policy.Limit{Rate: 10, Per: time.Second, Burst: 10}
	if _, err := r.Allow(context.Background(), "key_before", lim); err != nil {
		t.Fatal(err)
	}
	s.Freeze()
	defer s.Thaw()
	deadlines.arm()
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, 17)
	decide := func(id string) {
		start := time.Now()
		_, err := r.Allow(context.Background(), id, lim)
		results <- result{time.Since(start), err}
	}
	go decide("key_first") // in flight, unanswered
	time.Sleep(5 * time.Millisecond)
	for i := range 16 { // queued behind it
		go decide(fmt.Sprintf("key_queued_%d", i))
	}
	var slowest time.Duration
	for range 17 {
		select {
		case res := <-results:
			if res.err == nil {
				t.Error("a decision with Redis frozen, want a timeout")
			}
			slowest = max(slowest, res.took)
		case <-time.After(30 * time.Second):
			t.Fatal("a decision did not return within 30 s (hang check)")
		}
	}
	t.Logf("the slowest of 17 decisions took %v with a %v timeout", slowest, timeout)
	got := deadlines.seen()
	if len(got) == 0 {
		t.Fatal("no call reached Redis after the freeze")
	}
	for i, d := range got {
		if d.IsZero() {
			t.Errorf("call %d to the frozen Redis had no deadline", i)
			continue
		}
		if i > 0 {
			t.Logf("call %d's deadline is %v after the first's", i, d.Sub(got[0]))
			// Queued behind the first call and then sent with a fresh
			// timeout, a decision would wait about two timeouts.
			if d.Sub(got[0]) >= timeout {
				t.Errorf("call %d's deadline is %v after the first call's, with a %v timeout: the queued decisions were given a second timeout", i, d.Sub(got[0]), timeout)
			}
		}
	}
}

// deadlineHook records the context deadline of each call (a command or a
// pipeline) once armed; a zero time is a call without one. It is safe
// for concurrent use.
type deadlineHook struct {
	mu    sync.Mutex
	armed bool
	times []time.Time
}

func (h *deadlineHook) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

func (h *deadlineHook) record(ctx context.Context) {
	d, _ := ctx.Deadline()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed {
		h.times = append(h.times, d)
	}
}

func (h *deadlineHook) seen() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.times)
}

func (h *deadlineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *deadlineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(ctx)
		return next(ctx, cmd)
	}
}

func (h *deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(ctx)
		return next(ctx, cmds)
	}
}
