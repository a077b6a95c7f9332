package keystore

import (
	"fmt"
	"testing"
	"time"
)

// TestNegCache: an unknown hash is remembered for the TTL and no longer,
// a change (Remove) or a full pass (Purge) forgets it at once, adding it
// again starts a new TTL, and the cache holds no more than its size,
// dropping the oldest first.
func TestNegCache(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	h := func(i int) Hash { return HashKey(fmt.Sprintf("svc_live_%d", i)) }
	for _, tc := range []struct {
		name string
		run  func(n *negCache, now *time.Time) // leaves h(0) in the state want says
		want bool
	}{
		{"just added", func(n *negCache, _ *time.Time) { n.Add(h(0)) }, true},
		{"never added", func(*negCache, *time.Time) {}, false},
		{"inside the TTL", func(n *negCache, now *time.Time) { n.Add(h(0)); *now = now.Add(ttl - time.Nanosecond) }, true},
		{"at the TTL", func(n *negCache, now *time.Time) { n.Add(h(0)); *now = now.Add(ttl) }, false},
		{"removed", func(n *negCache, _ *time.Time) { n.Add(h(0)); n.Remove(h(0)) }, false},
		{"purged", func(n *negCache, _ *time.Time) { n.Add(h(0)); n.Add(h(1)); n.Purge() }, false},
		{"added again after the TTL", func(n *negCache, now *time.Time) {
			n.Add(h(0))
			*now = now.Add(2 * ttl)
			n.Add(h(0))
			*now = now.Add(ttl / 2)
		}, true},
		{"evicted by newer ones", func(n *negCache, _ *time.Time) {
			for i := range 4 { // size 3
				n.Add(h(i))
			}
		}, false},
		{"looked up often, still evicted by newer ones", func(n *negCache, _ *time.Time) {
			n.Add(h(0))
			for i := 1; i < 4; i++ {
				n.Contains(h(0))
				n.Add(h(i))
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
			n := newNegCache(3, ttl, func() time.Time { return now })
			tc.run(n, &now)
			if got := n.Contains(h(0)); got != tc.want {
				t.Errorf("Contains = %v, want %v", got, tc.want)
			}
			if l := n.c.Len(); l > 3 {
				t.Errorf("holds %d hashes, more than its size 3", l)
			}
		})
	}
}
