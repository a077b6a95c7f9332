package main

import (
	"math"
	"testing"
)

// TestPaired: each rep's churn figure is set against the baseline of the
// same rep, never another's, and a rep without both phases (a run cut
// short) or with a zero baseline adds nothing.
func TestPaired(t *testing.T) {
	rps := func(r phaseResult) float64 { return r.closed.rps }
	change := func(c, b float64) float64 { return c/b - 1 }
	ph := func(rep int, churn bool, rps float64) phaseResult {
		r := phaseResult{rep: rep, churn: churn}
		r.closed.rps = rps
		return r
	}
	for _, tc := range []struct {
		name string
		res  []phaseResult
		want float64 // the median of the per-rep changes
	}{
		{"one rep", []phaseResult{ph(0, false, 1000), ph(0, true, 900)}, -0.10},
		// The baselines drift (8000 → 12000); each pair loses 10%, which
		// the ratio of the medians (10500 / 10000 here) would not show.
		{"drift between reps", []phaseResult{
			ph(0, false, 8000), ph(0, true, 7200),
			ph(1, true, 10800), ph(1, false, 12000),
			ph(2, false, 10000), ph(2, true, 9000),
		}, -0.10},
		{"alternating order", []phaseResult{ph(0, true, 1100), ph(0, false, 1000), ph(1, false, 1000), ph(1, true, 1300)}, 0.20},
		{"a rep without its baseline", []phaseResult{ph(0, false, 1000), ph(0, true, 950), ph(1, true, 1)}, -0.05},
		{"a zero baseline", []phaseResult{ph(0, false, 0), ph(0, true, 950), ph(1, false, 1000), ph(1, true, 980)}, -0.02},
		{"nothing paired", []phaseResult{ph(0, false, 1000)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := median(paired(tc.res, rps, change)); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("median of paired changes = %.4f, want %.4f", got, tc.want)
			}
		})
	}
}
