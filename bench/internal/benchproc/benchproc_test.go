package benchproc

import "testing"

// TestMachineTicks: the machine's CPU time grows while a loop spins, the
// stolen part is within it, and the share of a span is a fraction.
func TestMachineTicks(t *testing.T) {
	t0, s0 := MachineTicks()
	for {
		if t1, s1 := MachineTicks(); t1 > t0 {
			if s1 < s0 || s1-s0 > t1-t0 {
				t.Fatalf("steal %d → %d within total %d → %d", s0, s1, t0, t1)
			}
			if f := StealShare(t0, s0, t1, s1); f < 0 || f > 1 {
				t.Fatalf("share %v", f)
			}
			break
		}
	}
	if f := StealShare(10, 1, 10, 1); f != 0 {
		t.Fatalf("share of no time: %v", f)
	}
	if f := StealShare(100, 0, 300, 50); f != 0.25 {
		t.Fatalf("share: %v, want 0.25", f)
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in           string
		total, steal int64
	}{
		{"cpu  3830037 6604 904733 2142060 18928 0 185146 40785 0 0\ncpu0 1 2 3\n", 7128293, 40785},
		{"cpu 1 2 3 4 5 6 7 8", 36, 8},
		{"cpu 1 2 3 4 5 6 7", 0, 0},                     // no steal field
		{"cpu0 1 2 3 4 5 6 7 8", 0, 0},                  // not the total line
		{"cpu 1 2 3 4 5 6 7 -8", 0, 0},                  // negative
		{"cpu 1 2 3 4 5 6 7 x", 0, 0},                   // not a number
		{"cpu 9223372036854775807 1 0 0 0 0 0 0", 0, 0}, // overflow
		{"", 0, 0},
	} {
		if total, steal := parseStat([]byte(tc.in)); total != tc.total || steal != tc.steal {
			t.Errorf("%q: %d, %d; want %d, %d", tc.in, total, steal, tc.total, tc.steal)
		}
	}
}

// FuzzParseStat: whatever the line, steal is within total and neither
// is negative.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("cpu  3830037 6604 904733 2142060 18928 0 185146 40785 0 0\n"))
	f.Add([]byte("cpu 1 2 3 4 5 6 7 8"))
	f.Fuzz(func(t *testing.T, b []byte) {
		total, steal := parseStat(b)
		if total < 0 || steal < 0 || steal > total {
			t.Fatalf("%q: total %d, steal %d", b, total, steal)
		}
	})
}
