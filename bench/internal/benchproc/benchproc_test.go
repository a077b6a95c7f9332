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
