package gateway_test

import (
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/usage"
)

// TestUsageOutcomes: each finished request of a known key is counted once
// under its outcome; unknown keys and requests refused before the
// limiter for another reason are not.
func TestUsageOutcomes(t *testing.T) {
	t.Parallel()
	c := usage.NewCounters(0)
	e := newEnv(t, envOpts{usage: c, limits: map[string]policy.Limit{
		"live": {Rate: 1, Per: time.Hour, Burst: 2},
		"test": {Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 1, Per: time.Hour}},
	}})
	before := time.Now()
	if r := e.sync(e.LiveKey, ctxA); r.Status != 200 {
		t.Fatalf("admitted: %d", r.Status)
	}
	assertError(t, e.sync(e.LiveKey, ctxB), 403, "Invalid Context")
	assertError(t, e.sync(e.LiveKey, ctxA), 429, "")
	if r := e.sync(e.TestKey, ctxA); r.Status != 200 {
		t.Fatalf("test key: %d", r.Status)
	}
	assertError(t, e.sync(e.TestKey, ctxA), 429, "quota")
	assertError(t, e.sync(e.RegistryKey, ctxA), 403, "extraction product")
	assertError(t, e.sync("ek_live_unknown", ctxA), 401, "")
	e.do(e.request("GET", "/nowhere", e.LiveKey, "", nil))

	got := map[string]usage.Delta{}
	for _, d := range c.Drain() {
		got[d.ID] = d
	}
	if len(got) != 3 {
		t.Fatalf("%d keys counted, want 3: %+v", len(got), got)
	}
	var live, test, reg usage.Delta
	for id, d := range got {
		switch {
		case id == e.LiveID:
			live = d
		case d.Quota > 0:
			test = d
		default:
			reg = d
		}
	}
	if want := (usage.Counts{Admitted: 1, Context: 1, Rate: 1, BytesIn: live.BytesIn}); live.Counts != want || live.BytesIn <= 0 {
		t.Errorf("live key: %+v, want %+v and some bytes", live.Counts, want)
	}
	if test.Admitted != 1 || test.Quota != 1 {
		t.Errorf("test key: %+v", test.Counts)
	}
	if reg.Product != 1 || reg.Admitted != 0 {
		t.Errorf("registry key on /sync: %+v", reg.Counts)
	}
	if live.LastUsed.Before(before.Truncate(time.Millisecond)) || live.LastUsed.After(time.Now()) {
		t.Errorf("last used %v, not within the test", live.LastUsed)
	}
}
