package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
)

// TestShutdownForceClosesEveryListenerAfterTheDrainTimeout: a client that
// holds a connection open past the drain timeout (here one that sends half
// a request header and stalls) is cut off on the API, plain-HTTP and admin
// listeners alike, rather than left to its read timeout.
func TestShutdownForceClosesEveryListenerAfterTheDrainTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) {
		c.Server.HTTPListen = "127.0.0.1:0"
		c.Server.ReadHeaderTimeout = time.Minute // longer than the test
	}})
	conns := map[string]net.Conn{}
	dial := func(name, addr string, tc *tls.Config) {
		var c net.Conn
		var err error
		if tc != nil {
			c, err = tls.Dial("tcp", addr, tc)
		} else {
			c, err = net.Dial("tcp", addr)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		conns[name] = c
	}
	dial("api", strings.TrimPrefix(h.API, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	dial("plain", strings.TrimPrefix(h.Plain, "http://"), nil)
	dial("admin", strings.TrimPrefix(h.Admin, "http://"), nil)
	time.Sleep(100 * time.Millisecond) // let each server take its connection

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := h.Server.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the drain deadline exceeded", err)
	}
	for name, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(testkit.HangCheck))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection is still open after Shutdown gave up draining", name)
		}
	}
}
