package main

import (
	"slices"
	"testing"
	"time"
)

// TestLargeSizes checks that the default runs include uploads of the size
// this service receives (1 MiB and 20 MiB), and that at those sizes the
// open loop asks for no more bytes a second than at 100 KiB and wrk waits
// long enough for an answer that a slow upload is not counted as an error.
func TestLargeSizes(t *testing.T) {
	got := sizes(Options{})
	for _, want := range []int{256, 100 << 10, 1 << 20, 20 << 20} {
		if !slices.Contains(got, want) {
			t.Errorf("default sizes %v lack %d", got, want)
		}
	}
	for _, tc := range []struct {
		size        int
		rate        int
		wrkTimeout  time.Duration
		description string
	}{
		{256, 4000, 2 * time.Second, "small: wrk's default timeout"},
		{100 << 10, 1000, 2 * time.Second, "100 KiB: as before"},
		{1 << 20, 97, 3 * time.Second, "1 MiB: 100 KiB's bytes a second"},
		{20 << 20, 4, 22 * time.Second, "20 MiB: 100 KiB's bytes a second"},
	} {
		if r := rate(Options{}, tc.size); r != tc.rate {
			t.Errorf("%s: rate(%d) = %d, want %d", tc.description, tc.size, r, tc.rate)
		}
		if r := rate(Options{Smoke: true}, tc.size); r != min(tc.rate, 200) {
			t.Errorf("%s: in a smoke run rate(%d) = %d, want %d", tc.description, tc.size, r, min(tc.rate, 200))
		}
		if d := wrkTimeout(tc.size); d != tc.wrkTimeout {
			t.Errorf("%s: wrkTimeout(%d) = %s, want %s", tc.description, tc.size, d, tc.wrkTimeout)
		}
	}
}
