package testkit_test

import (
	"testing"

	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestFreePortNeverTwice: the ports a process is handed are all
// different, so that two listeners of one test never get the same one.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p := testkit.FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
