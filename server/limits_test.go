package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/server"
)

// TestSlowHeadersAreCut: a client that starts a request and never finishes
// its headers loses the connection after server.read_header_timeout, so it
// cannot hold connections open.
func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Server.ReadHeaderTimeout = 300 * time.Millisecond }})
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.API, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: localhost\r\nx-api-key: %s\r\n", h.LiveKey) // no blank line: headers never end
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn)
	if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		t.Fatal("the server kept a slow-header connection open for 10s")
	}
}

// TestOversizedHeadersAreRefused: headers over server.max_header_bytes get
// 431 and never reach an upstream.
func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Server.MaxHeaderBytes = 8 << 10 }})
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.API, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /registry/x HTTP/1.1\r\nHost: localhost\r\nx-api-key: %s\r\nX-Big: %s\r\n\r\n", h.RegistryKey, strings.Repeat("a", 64<<10))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
	if n := h.Registry.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// TestStartFailureIsAnErrorNotAPanic: a listener that cannot be opened
// (the port is taken) is an error naming the field, and everything opened
// before it is closed again.
func TestStartFailureIsAnErrorNotAPanic(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := config.Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminListen = taken.Addr().String()
	cfg.Keystore.File = filepath.Join(t.TempDir(), "keys.yaml")
	cfg.TLS.SelfSignedDir = filepath.Join(t.TempDir(), "tls")
	_, err = server.New(context.Background(), cfg, server.Deps{})
	if err == nil || !strings.Contains(err.Error(), "server.admin_listen") {
		t.Fatalf("err = %v, want one naming server.admin_listen", err)
	}
}
