package main

import (
	"math"
	"strings"
	"testing"
	"time"
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

// TestPrintAlone: the churn's own CPU with no load is the median over the
// churn phases of each process's cores, summed over the replicas, Redis
// and the driver (not the bench's own process), and set against the
// machine's cores; a run without churn phases prints nothing of it.
func TestPrintAlone(t *testing.T) {
	alone := func(r1, r2, redis, driver, client int64) phaseResult {
		return phaseResult{churn: true, alone: aloneResult{
			cpu:  map[string]int64{"replica1": r1, "replica2": r2, "redis": redis, "driver": driver, "client": client},
			wall: 2 * time.Second,
		}}
	}
	for _, tc := range []struct {
		name string
		res  []phaseResult
		want string // "": no line at all
	}{
		{"one churn phase", []phaseResult{{}, alone(60_000, 40_000, 20_000, 80_000, 500_000)},
			"replica1 0.030, replica2 0.020, redis 0.010, driver 0.040 cores; 0.100 cores in all, 5.0% of this machine's 2 cores."},
		{"the median of three", []phaseResult{
			alone(60_000, 60_000, 0, 80_000, 0),
			alone(20_000, 20_000, 0, 40_000, 0),
			alone(200_000, 200_000, 0, 400_000, 0),
		}, "replica1 0.030, replica2 0.030, redis 0.000, driver 0.040 cores; 0.100 cores in all, 5.0% of"},
		{"no churn phase", []phaseResult{{}, {rep: 1}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printAlone(&b, Options{CPUs: 2}, tc.res)
			if tc.want == "" {
				if b.Len() != 0 {
					t.Errorf("printed %q, want nothing", b.String())
				}
				return
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("printed %q, want it to hold %q", b.String(), tc.want)
			}
		})
	}
}
