package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/freeport"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestLoopback: every port handed out is different, lies outside the
// range the kernel takes outgoing connections' source ports from, and can
// be listened on.
func TestLoopback(t *testing.T) {
	lo, hi := freeport.EphemeralRange()
	seen := map[int]bool{}
	for range 2000 {
		p := testkit.FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if lo <= p && p <= hi {
			t.Fatalf("port %d is in the ephemeral range [%d, %d]", p, lo, hi)
		}
	}
	for p := range seen {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d handed out, but: %v", p, err)
		}
		_ = l.Close()
		break
	}
}

// TestLoopbackSkipsTaken: a port something listens on is never handed
// out, however often it is drawn.
func TestLoopbackSkipsTaken(t *testing.T) {
	var held []net.Listener
	t.Cleanup(func() {
		for _, l := range held {
			_ = l.Close()
		}
	})
	taken := map[int]bool{}
	for range 200 {
		p := testkit.FreePort(t)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		held, taken[p] = append(held, l), true
	}
	for range 2000 {
		if p := testkit.FreePort(t); taken[p] {
			t.Fatalf("port %d handed out while a listener held it", p)
		}
	}
}
