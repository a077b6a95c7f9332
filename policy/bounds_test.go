package policy_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

// Every way an override or a quota comes in is held to the same bounds,
// and the error names the field.
func TestOverrideAndQuotaBounds(t *testing.T) {
	t.Parallel()
	q := func(n int64, d time.Duration) *policy.Quota { return &policy.Quota{Requests: n, Per: d} }
	cases := []struct {
		name string
		o    policy.Override
		want string // "" for valid
	}{
		{"nothing", policy.Override{}, ""},
		{"quota none", policy.Override{Quota: &policy.Quota{}}, ""},
		{"ordinary", policy.Override{Rate: 50, Per: time.Second, Burst: 100, Quota: q(1e5, 24*time.Hour)}, ""},
		{"the largest", policy.Override{Rate: 1e6, Per: time.Second, Burst: 1e9, Quota: q(1e12, 366*24*time.Hour)}, ""},
		{"rate 1e-300", policy.Override{Rate: 1e-300}, "rate: "},
		{"rate 1e308", policy.Override{Rate: 1e308}, "rate: "},
		{"rate +Inf", policy.Override{Rate: math.Inf(1)}, "rate: "},
		{"rate NaN", policy.Override{Rate: math.NaN()}, "rate: "},
		{"negative rate", policy.Override{Rate: -1}, "rate: "},
		{"rate 1e6 per 1ms", policy.Override{Rate: 1e6, Per: time.Millisecond}, "rate: "},
		{"per 1ns", policy.Override{Per: time.Nanosecond}, "per: "},
		{"negative per", policy.Override{Per: -time.Second}, "per: "},
		{"per 367 days", policy.Override{Per: 367 * 24 * time.Hour}, "per: "},
		{"burst MaxInt64", policy.Override{Burst: math.MaxInt64}, "burst: "},
		{"negative burst", policy.Override{Burst: -1}, "burst: "},
		{"quota MaxInt64/1ns", policy.Override{Quota: q(math.MaxInt64, time.Nanosecond)}, "quota.requests: "},
		{"quota 10/1ns", policy.Override{Quota: q(10, time.Nanosecond)}, "quota.per: "},
		{"quota 10/0", policy.Override{Quota: q(10, 0)}, "quota.per: "},
		{"quota 0/1h", policy.Override{Quota: q(0, time.Hour)}, "quota.requests: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.o.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, policy.ErrOutOfBounds) {
				t.Fatalf("Validate() = %v, want an ErrOutOfBounds starting %q", err, tc.want)
			}
		})
	}
}

func TestParseQuotaBounds(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"9223372036854775807/1ns", "0/24h", "10/0s", "10/1us", "10/8785h", "1000000000001/24h", "-5/1h"} {
		if q, err := policy.ParseQuota(s); err == nil {
			t.Errorf("ParseQuota(%q) = %v, want an error", s, q)
		}
	}
	for _, s := range []string{"none", "50000/24h", "1/1ms", "1000000000000/8784h"} {
		if _, err := policy.ParseQuota(s); err != nil {
			t.Errorf("ParseQuota(%q): %v", s, err)
		}
	}
}
