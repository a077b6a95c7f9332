package ratelimit_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/ratelimit"
)

func failLimit(rate float64, per time.Duration, burst int) ratelimit.FailureLimitConfig {
	return ratelimit.FailureLimitConfig{Enabled: true, Rate: rate, Per: per, Burst: burst, MaxAddresses: 1000}
}

func TestFailuresLocal(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Unix(1_700_000_000, 0))
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: failLimit(30, time.Minute, 5), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := netip.MustParseAddr("192.0.2.7")
	other := netip.MustParseAddr("192.0.2.8")
	for i := 0; i < 5; i++ {
		if _, blocked := f.Blocked(a); blocked {
			t.Fatalf("blocked before failure %d", i+1)
		}
		if _, blocked := f.Fail(ctx, a); blocked {
			t.Fatalf("failure %d of a burst of 5 blocked", i+1)
		}
	}
	retry, blocked := f.Fail(ctx, a)
	if !blocked || retry <= 0 || retry > 2*time.Second {
		t.Fatalf("sixth failure: blocked %v, retry %s; want blocked for about 2s (30/min)", blocked, retry)
	}
	if r, blocked := f.Blocked(a); !blocked || r != retry {
		t.Fatalf("Blocked after the limit = %s, %v; want %s, true", r, blocked, retry)
	}
	if _, blocked := f.Blocked(other); blocked {
		t.Fatal("another address is blocked too")
	}
	if _, blocked := f.Fail(ctx, other); blocked {
		t.Fatal("another address's first failure is blocked")
	}
	clock.Add(retry)
	if _, blocked := f.Blocked(a); blocked {
		t.Fatal("still blocked once the retry time passed")
	}
	if _, blocked := f.Fail(ctx, a); blocked {
		t.Fatal("one failure per 2s must be allowed again")
	}
	if _, blocked := f.Fail(ctx, a); !blocked {
		t.Fatal("the next failure right after must be blocked")
	}
	st := f.Stats()
	if st.Counted != 9 || st.Throttled != 3 {
		t.Errorf("stats = %+v, want 9 counted, 3 throttled", st)
	}
}

func TestFailuresIPv6CountsPer64AndMappedIPv4(t *testing.T) {
	t.Parallel()
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: failLimit(1, time.Hour, 2)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.Fail(ctx, netip.MustParseAddr("2001:db8:1:2::1"))
	f.Fail(ctx, netip.MustParseAddr("2001:db8:1:2:ffff::9"))
	if _, blocked := f.Fail(ctx, netip.MustParseAddr("2001:db8:1:2:abcd::1%eth0")); !blocked {
		t.Fatal("three failures from one /64 did not block it")
	}
	if _, blocked := f.Blocked(netip.MustParseAddr("2001:db8:1:2::77")); !blocked {
		t.Error("another address of the blocked /64 is not blocked")
	}
	if _, blocked := f.Blocked(netip.MustParseAddr("2001:db8:1:3::1")); blocked {
		t.Error("the next /64 is blocked")
	}
	f.Fail(ctx, netip.MustParseAddr("::ffff:192.0.2.1"))
	f.Fail(ctx, netip.MustParseAddr("192.0.2.1"))
	if _, blocked := f.Fail(ctx, netip.MustParseAddr("192.0.2.1")); !blocked {
		t.Error("an IPv4-mapped address is counted apart from its IPv4 address")
	}
	if _, blocked := f.Fail(ctx, netip.Addr{}); blocked {
		t.Error("an invalid address is counted")
	}
}

func TestFailuresMemoryIsBounded(t *testing.T) {
	t.Parallel()
	cfg := failLimit(1, time.Hour, 1)
	cfg.MaxAddresses = 50
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := netip.MustParseAddr("10.0.0.0")
	a := base
	for i := 0; i < 5000; i++ {
		a = a.Next()
		f.Fail(ctx, a)
		f.Fail(ctx, a) // blocks it
	}
	// The latest addresses are still blocked; the first were forgotten.
	if _, blocked := f.Blocked(a); !blocked {
		t.Error("the latest address is not blocked")
	}
	if _, blocked := f.Blocked(base.Next()); blocked {
		t.Error("the first of 5000 addresses is still remembered with max_addresses 50")
	}
}

func TestFailuresDisabled(t *testing.T) {
	t.Parallel()
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{Limit: ratelimit.FailureLimitConfig{Enabled: false}})
	if err != nil || f != nil {
		t.Fatalf("disabled: %v, %v; want nil, nil", f, err)
	}
	if _, blocked := f.Fail(context.Background(), netip.MustParseAddr("192.0.2.1")); blocked {
		t.Fatal("a nil limit blocks")
	}
}

func TestFailureLimitConfigNamesTheField(t *testing.T) {
	t.Parallel()
	good := ratelimit.DefaultFailureLimitConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		mod   func(*ratelimit.FailureLimitConfig)
		field string
	}{
		{"rate", func(c *ratelimit.FailureLimitConfig) { c.Rate = 0 }, "rate"},
		{"per", func(c *ratelimit.FailureLimitConfig) { c.Per = -time.Second }, "per"},
		{"burst", func(c *ratelimit.FailureLimitConfig) { c.Burst = 0 }, "burst"},
		{"max addresses", func(c *ratelimit.FailureLimitConfig) { c.MaxAddresses = 0 }, "max_addresses"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.mod(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err = %v, want it to name %s", err, c.field)
			}
			cfg.Enabled = false
			if err := cfg.Validate(); err != nil {
				t.Errorf("a disabled limit is checked: %v", err)
			}
		})
	}
}

// TestFailuresSharedThroughRedis: two replicas' limits count one address's
// failures together, under the configured key prefix, and a replica that
// learned the address is blocked refuses it without asking Redis.
func TestFailuresSharedThroughRedis(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	newF := func() *ratelimit.Failures {
		f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{
			Limit:     failLimit(1, time.Hour, 4),
			Redis:     newClient(t, 2*time.Second, s.Addr),
			KeyPrefix: "tenant7:",
			Timeout:   2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := newF(), newF()
	ctx := context.Background()
	addr := netip.MustParseAddr("198.51.100.4")
	for i := 0; i < 2; i++ {
		if _, blocked := a.Fail(ctx, addr); blocked {
			t.Fatal("blocked within the burst")
		}
		if _, blocked := b.Fail(ctx, addr); blocked {
			t.Fatal("blocked within the burst")
		}
	}
	if _, blocked := b.Fail(ctx, addr); !blocked {
		t.Fatal("the fifth failure, spread over two replicas, is not blocked: the count is not shared")
	}
	if _, blocked := b.Blocked(addr); !blocked {
		t.Fatal("the replica that saw the refusal does not block the address")
	}
	if got, _ := s.Do("EXISTS", "tenant7:authfail:rl:{198.51.100.4}"); !strings.Contains(got, "1") {
		t.Errorf("EXISTS tenant7:authfail:rl:{198.51.100.4} = %q; the count is not under the key prefix", got)
	}
}

// TestFailuresFailOpenWhenRedisIsGone: with Redis down, failures are
// counted locally; the limit never errors.
func TestFailuresFailOpenWhenRedisIsGone(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	f, err := ratelimit.NewFailures(ratelimit.FailuresConfig{
		Limit:   failLimit(1, time.Hour, 3),
		Redis:   newClient(t, 100*time.Millisecond, s.Addr),
		Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Kill()
	ctx := context.Background()
	addr := netip.MustParseAddr("203.0.113.9")
	blockedAt := 0
	for i := 1; i <= 10 && blockedAt == 0; i++ {
		if _, blocked := f.Fail(ctx, addr); blocked {
			blockedAt = i
		}
	}
	if blockedAt != 4 {
		t.Fatalf("with Redis gone, blocked at failure %d; want 4 (local count, burst 3)", blockedAt)
	}
	if st := f.Stats(); st.Fallback == 0 || st.Errors != 0 {
		t.Errorf("stats = %+v; want fallback decisions and no errors", st)
	}
}
