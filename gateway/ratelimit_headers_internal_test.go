package gateway

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/ratelimit"
)

// TestRateHeaders: the RateLimit-* values are the decision's numbers in
// decimal (remaining never below 0, reset in whole seconds rounded up).
func TestRateHeaders(t *testing.T) {
	for _, d := range []ratelimit.Decision{
		{},
		{Limit: 10, Remaining: 9, Reset: 1500 * time.Millisecond},
		{Limit: 99, Remaining: 99, Reset: 99 * time.Second},
		{Limit: 100, Remaining: 0, Reset: time.Nanosecond},
		{Limit: 1e9, Remaining: 1e9 - 1, Reset: 0},
		{Limit: 60, Remaining: -3, Reset: 3600 * time.Second},
		{Limit: 1<<63 - 1, Remaining: 1<<63 - 1, Reset: 1<<63 - 1},
	} {
		h := http.Header{}
		setLegacyRateHeaders(h, d)
		want := map[string]string{
			"Ratelimit-Limit":     strconv.FormatInt(d.Limit, 10),
			"Ratelimit-Remaining": strconv.FormatInt(max(d.Remaining, 0), 10),
			"Ratelimit-Reset":     strconv.FormatInt(ceilSeconds(d.Reset, 0), 10),
		}
		for k, v := range want {
			if got := h[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%+v: %s = %q, want %q", d, k, got, v)
			}
		}
	}
}
