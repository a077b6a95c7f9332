package ratelimit_test

import (
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// TestBucketAndQuotaWindows: every decision reports the bucket and the
// quota each on its own (for the RateLimit field), on the local limiter
// and in Redis alike. When a success leaves both at 0, Limit/Remaining/
// Reset name the quota, the part that refuses next and for longest, and
// the next request is refused by the quota with its window at 0.
func TestBucketAndQuotaWindows(t *testing.T) {
	t.Parallel()
	lim := policy.Limit{Rate: 1, Per: time.Hour, Burst: 3, Quota: policy.Quota{Requests: 3, Per: time.Hour}}
	for _, c := range []struct {
		name string
		l    func(t *testing.T) allower
	}{
		{"local", func(t *testing.T) allower { return ratelimit.NewLocal(ratelimit.LocalConfig{}) }},
		{"redis", func(t *testing.T) allower {
			return newRedis(t, []string{redistest.Start(t).Addr}, ratelimit.ResilientConfig{})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := c.l(t)
			for i := range 3 {
				d, err := allow(t, l, "key_windows", lim)
				if err != nil || !d.Allowed {
					t.Fatalf("request %d: %+v %v", i, d, err)
				}
				want := int64(2 - i)
				if !d.Bucket.Known || !d.Quota.Known || d.Bucket.Remaining != want || d.Quota.Remaining != want {
					t.Errorf("request %d: bucket %+v quota %+v, want %d left in each", i, d.Bucket, d.Quota, want)
				}
				if d.Quota.Reset <= 59*time.Minute || d.Quota.Reset > time.Hour || d.Bucket.Reset <= 0 {
					t.Errorf("request %d: resets bucket %s quota %s", i, d.Bucket.Reset, d.Quota.Reset)
				}
				if i == 2 && (d.Limit != 3 || d.Remaining != 0 || d.Reset != d.Quota.Reset) {
					t.Errorf("both used up: Limit %d Remaining %d Reset %s, want the quota's (reset %s)", d.Limit, d.Remaining, d.Reset, d.Quota.Reset)
				}
			}
			d, err := allow(t, l, "key_windows", lim)
			if err != nil || d.Allowed || d.Reason != ratelimit.ReasonQuota {
				t.Fatalf("4th: %+v %v, want refused by the quota", d, err)
			}
			if !d.Quota.Known || d.Quota.Remaining != 0 || d.Quota.Reset <= 59*time.Minute {
				t.Errorf("4th: quota %+v", d.Quota)
			}
		})
	}
}
