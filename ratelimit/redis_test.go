package ratelimit_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/redisconn"
	"github.com/redis/go-redis/v9"
)

// newClient returns a go-redis client for addrs built the way keygate
// builds it, with the given read/write timeout.
func newClient(t testing.TB, timeout time.Duration, addrs ...string) redis.UniversalClient {
	t.Helper()
	cfg := redisconn.DefaultConfig()
	cfg.Addrs = addrs
	cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout = timeout, timeout, timeout
	c, err := redisconn.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newRedis returns the Redis limiter with its own client, composed with
// its local fallback as cfg says. The timeout is generous so that a
// loaded test machine does not trip the breaker.
func newRedis(t testing.TB, addrs []string, cfg ratelimit.ResilientConfig) *ratelimit.Resilient {
	t.Helper()
	return newRedisTimeout(t, addrs, 2*time.Second, cfg)
}

func newRedisTimeout(t testing.TB, addrs []string, timeout time.Duration, cfg ratelimit.ResilientConfig) *ratelimit.Resilient {
	t.Helper()
	r, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: newClient(t, timeout, addrs...), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ratelimit.NewResilient(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// allow calls Allow and fails the test if it does not return within
// testkit.HangCheck (a hang check, not a speed assertion).
func allow(t *testing.T, l allower, id string, lim policy.Limit) (ratelimit.Decision, error) {
	t.Helper()
	type result struct {
		d   ratelimit.Decision
		err error
	}
	ch := make(chan result, 1)
	go func() {
		d, err := l.Allow(context.Background(), id, lim)
		ch <- result{d, err}
	}()
	select {
	case r := <-ch:
		return r.d, r.err
	case <-time.After(testkit.HangCheck):
		t.Fatalf("Allow(%s) did not return within %v (hang check)", id, testkit.HangCheck)
		return ratelimit.Decision{}, nil
	}
}

// commandCalls returns how many times Redis ran cmd (from INFO commandstats).
func commandCalls(t *testing.T, s *redistest.Server, cmd string) int {
	t.Helper()
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 0
}

func TestRedisBurstThenRefusal(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	lim := policy.Limit{Rate: 1, Per: 12 * time.Second, Burst: 5} // one token per 12 s
	for i := range 5 {
		d, err := allow(t, r, "key_burst", lim)
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
		if d.Limit != 5 || d.Remaining != int64(4-i) {
			t.Errorf("request %d: Limit=%d Remaining=%d, want 5 and %d", i, d.Limit, d.Remaining, 4-i)
		}
		if d.Reset <= time.Duration(i)*12*time.Second || d.Reset > time.Duration(i+1)*12*time.Second {
			t.Errorf("request %d: Reset %s, want about %ds", i, d.Reset, (i+1)*12)
		}
	}
	d, err := allow(t, r, "key_burst", lim)
	if err != nil || d.Allowed || d.Reason != ratelimit.ReasonRate {
		t.Fatalf("6th request: %+v %v, want a rate refusal", d, err)
	}
	if d.RetryAfter <= 10*time.Second || d.RetryAfter > 12*time.Second {
		t.Errorf("RetryAfter %s, want just under 12s", d.RetryAfter)
	}
	if d.Reset < d.RetryAfter || d.Reset > 60*time.Second || d.Remaining != 0 || d.Limit != 5 {
		t.Errorf("refusal %+v: want Remaining 0, Limit 5, RetryAfter <= Reset <= 60s", d)
	}
	if st := r.Stats(); st.RedisDecisions != 6 || st.FallbackDecisions != 0 || r.Degraded() {
		t.Errorf("stats %+v degraded=%v", st, r.Degraded())
	}
}

func TestRedisRefillsOverTime(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	lim := policy.Limit{Rate: 20, Per: time.Second, Burst: 2}
	for {
		d, err := allow(t, r, "key_refill", lim)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
	}
	testkit.Eventually(t, testkit.HangCheck, "a token back at 20/s", func() error {
		d, err := allow(t, r, "key_refill", lim)
		if err != nil {
			t.Fatal(err)
		}
		return testkit.True(d.Allowed, "still refused: %+v", d)
	})
}

func TestRedisQuotaIsExactAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	addrs := []string{s.Addr}
	replicas := []*ratelimit.Resilient{
		newRedis(t, addrs, ratelimit.ResilientConfig{Replicas: 3}),
		newRedis(t, addrs, ratelimit.ResilientConfig{Replicas: 3}),
		newRedis(t, addrs, ratelimit.ResilientConfig{Replicas: 3}),
	}
	lim := policy.Limit{Rate: 1e6, Per: time.Second, Burst: 1e6, Quota: policy.Quota{Requests: 50, Per: time.Hour}}
	var admitted, quotaRefusals atomic.Int64
	var wg sync.WaitGroup
	for _, r := range replicas {
		for range 4 {
			wg.Go(func() {
				for range 25 {
					d, err := r.Allow(context.Background(), "key_quota", lim)
					switch {
					case err != nil:
						t.Error(err)
						return
					case d.Allowed:
						admitted.Add(1)
					case d.Reason == ratelimit.ReasonQuota && d.RetryAfter > 0 && d.RetryAfter <= time.Hour:
						quotaRefusals.Add(1)
					default:
						t.Errorf("unexpected refusal %+v", d)
					}
				}
			})
		}
	}
	wg.Wait()
	if admitted.Load() != 50 || quotaRefusals.Load() != 250 {
		t.Fatalf("admitted %d, refused for quota %d; want exactly 50 and 250", admitted.Load(), quotaRefusals.Load())
	}
	for i, r := range replicas {
		if st := r.Stats(); st.FallbackDecisions != 0 || st.RedisErrors != 0 {
			t.Errorf("replica %d decided without Redis: %+v", i, st)
		}
	}
}

func TestRedisOneRoundTripPerAdmittedRequest(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 20, Quota: policy.Quota{Requests: 100, Per: time.Hour}}
	if _, err := allow(t, r, "key_warmup", lim); err != nil { // the script is loaded by now
		t.Fatal(err)
	}
	before, evalBefore := commandCalls(t, s, "evalsha"), commandCalls(t, s, "eval")
	for i := range 20 {
		if d, err := allow(t, r, "key_trips", lim); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
	}
	if got := commandCalls(t, s, "evalsha") - before; got != 20 {
		t.Fatalf("20 admitted requests made %d EVALSHA calls, want 20", got)
	}
	// The 21st is refused by Redis; the next ones from the local cache.
	if d, _ := allow(t, r, "key_trips", lim); d.Allowed {
		t.Fatal("21st request admitted")
	}
	for range 10 {
		d, err := allow(t, r, "key_trips", lim)
		if err != nil || d.Allowed || d.Reason != ratelimit.ReasonRate || d.RetryAfter <= 0 || d.Limit != 20 {
			t.Fatalf("cached refusal: %+v %v", d, err)
		}
	}
	if got := commandCalls(t, s, "evalsha") - before; got != 21 {
		t.Fatalf("21 decisions by Redis and 10 from the cache made %d EVALSHA calls, want 21", got)
	}
	if got := commandCalls(t, s, "eval") - evalBefore; got != 0 {
		t.Errorf("%d EVAL calls, want 0", got)
	}
	if st := r.Stats(); st.CachedRefusals != 10 {
		t.Errorf("CachedRefusals = %d, want 10", st.CachedRefusals)
	}
}

func TestRedisKeysAreTheIDOnlyAndExpire(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	withQuota := policy.Limit{Rate: 10, Per: time.Second, Burst: 10, Quota: policy.Quota{Requests: 1000, Per: 24 * time.Hour}}
	noQuota := policy.Limit{Rate: 10, Per: time.Second, Burst: 10}
	for range 3 {
		if _, err := allow(t, r, "key_0123abcd", withQuota); err != nil {
			t.Fatal(err)
		}
		if _, err := allow(t, r, "key_4567ef", noQuota); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := s.Do("DBSIZE"); n != "3" {
		t.Fatalf("DBSIZE = %s, want 3 keys", n)
	}
	for key, maxTTL := range map[string]time.Duration{
		"keygate:rl:{key_0123abcd}": time.Second,
		"keygate:q:{key_0123abcd}":  24 * time.Hour,
		"keygate:rl:{key_4567ef}":   time.Second,
	} {
		out, err := s.Do("PTTL", key)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.Atoi(out)
		if ms <= 0 || time.Duration(ms)*time.Millisecond > maxTTL+time.Millisecond {
			t.Errorf("PTTL %s = %s ms, want a TTL in (0, %s]", key, out, maxTTL)
		}
	}
}

func TestRedisRejectsUnusableInputWithoutRedis(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	if _, err := r.Allow(context.Background(), "", policy.Limit{Rate: 1, Per: time.Second, Burst: 1}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("empty id: %v, want ErrInvalid", err)
	}
	if n, _ := s.Do("DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE = %s after an invalid request", n)
	}
}

// The Redis limiter alone answers a decision or an error: with Redis
// gone it returns the error, with no fallback and no breaker (those are
// Resilient's).
func TestRedisAloneIsPure(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: newClient(t, 200*time.Millisecond, s.Addr), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lim := policy.Limit{Rate: 10, Per: time.Second, Burst: 2}
	if d, err := r.Allow(context.Background(), "key_pure", lim); err != nil || !d.Allowed {
		t.Fatalf("up: %+v %v", d, err)
	}
	s.Kill()
	for range 5 { // no breaker: every call tries Redis and fails
		if d, err := r.Allow(context.Background(), "key_pure", lim); err == nil || d.Allowed {
			t.Fatalf("down: %+v %v, want an error and no decision", d, err)
		}
	}
	if _, err := r.Allow(context.Background(), "", lim); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("empty id: %v", err)
	}
}

// Replicas of two builds share the buckets during a rolling upgrade: a
// bucket's state written by an earlier build (its time with three
// decimals, "%.3f") decides this build's next request, and what this
// build writes is a plain decimal that any build reads back as the same
// time (Redis formats a Lua number with %.17g: no exponent at these
// magnitudes, every digit the number holds).
func TestRedisBucketStateIsReadAcrossBuilds(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := newRedis(t, []string{s.Addr}, ratelimit.ResilientConfig{})
	c := newClient(t, time.Second, s.Addr)
	ctx := context.Background()
	hourly := policy.Limit{Rate: 1, Per: time.Hour, Burst: 1}

	// The script's clock: µs since 2017-01-01, from Redis's TIME.
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	scriptNow := float64(now.Unix()-1483228800)*1e6 + float64(now.Nanosecond()/1000)
	for _, tc := range []struct {
		name  string
		state string // the bucket's value, as an earlier build wrote it
		want  bool
	}{
		{"used 30 minutes ago by the earlier build", strconv.FormatFloat(scriptNow+30*60*1e6+0.125, 'f', 3, 64), false},
		{"its hour over", strconv.FormatFloat(scriptNow-1e6, 'f', 3, 64), true},
	} {
		id := "key_" + strings.ReplaceAll(tc.name, " ", "_")
		if err := c.Set(ctx, "keygate:rl:{"+id+"}", tc.state, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := allow(t, r, id, hourly)
		if err != nil || d.Allowed != tc.want {
			t.Errorf("%s: %+v %v, want allowed=%v", tc.name, d, err, tc.want)
		}
		if !d.Allowed && (d.RetryAfter < 29*time.Minute || d.RetryAfter > 31*time.Minute) {
			t.Errorf("%s: retry after %s, want about 30m", tc.name, d.RetryAfter)
		}
	}

	// What this build writes: a decimal number without an exponent, one
	// interval (an hour) after the server's time, to the microsecond.
	if _, err := allow(t, r, "key_fresh", hourly); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, "keygate:rl:{key_fresh}").Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, err := strconv.ParseFloat(v, 64)
	if err != nil || strings.ContainsAny(v, "eE") {
		t.Fatalf("bucket state %q: %v, want a plain decimal", v, err)
	}
	if d := tat - scriptNow - float64(time.Hour/time.Microsecond); d < 0 || d > 5e6 {
		t.Errorf("bucket state %q is %.0f µs from an hour after the server's time, want within 5 s", v, d)
	}
}
