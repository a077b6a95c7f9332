// Package freeport picks loopback ports for the tests and benchmarks to
// listen on when a port must be known before the listener exists (a
// Pebble told where to find the gateway, a process started with -listen).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Loopback returns a loopback TCP port that was free a moment ago and
// that no earlier call in this process returned: a test that asks for two
// (an API and an admin listener) must not get the same one twice.
//
// The port is drawn at random from below the kernel's ephemeral range
// (ip_local_port_range), not taken from a listener on port 0. A port the
// kernel hands to a listener on port 0 comes from the range it also gives
// every outgoing connection its source port from, so between the check
// and the caller's own bind, any client in any process on the machine (a
// refused dial to a stopped redis-server, a load generator's connections)
// could take it: CI once failed on exactly that. Below the range, only
// another explicit bind can.
func Loopback() (int, error) {
	given.mu.Lock()
	defer given.mu.Unlock()
	lo, hi := poolRange()
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if given.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		given.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free loopback port in [%d, %d) that was not handed out before", lo, hi)
}

// given is the ports Loopback has returned in this process.
var given = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// poolRange is pool, worked out once a process.
var poolRange = sync.OnceValues(pool)

// pool is the range Loopback draws from: [10000, the first ephemeral
// port), or, when the ephemeral range starts too low to leave room, the
// ports above it.
func pool() (lo, hi int) {
	elo, ehi := EphemeralRange()
	switch {
	case elo-10000 >= 4096:
		return 10000, elo
	case 65536-(ehi+1) >= 1024:
		return ehi + 1, 65536
	default:
		return 1024, 65536 // no room outside the range: any unprivileged port
	}
}

// EphemeralRange is the kernel's range of source ports for outgoing
// connections, inclusive; Linux's default when it cannot be read.
func EphemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	a, errA := strconv.Atoi(f[0])
	z, errZ := strconv.Atoi(f[1])
	if errA != nil || errZ != nil || a <= 0 || a > z || z > 65535 {
		return lo, hi
	}
	return a, z
}
