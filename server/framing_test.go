package server_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

type framingListener struct {
	name string
	addr string
	tls  *tls.Config
	// pipelined is a request the listener serves (200) without forwarding
	// anything, or "" to use the harness's registry GET.
	ok     string
	status int
}

func framingListeners(t *testing.T) (*harness, *harness, []framingListener) {
	tlsH := newHarness(t, setup{mod: func(c *config.Config) { c.Server.HTTPListen = "127.0.0.1:0" }})
	offH := newHarness(t, setup{mod: func(c *config.Config) { c.TLS.Mode = "off" }})
	roots := poolFromFile(t, filepath.Join(tlsH.Cfg.TLS.SelfSignedDir, "cert.pem"))
	host := func(u string) string { return u[strings.Index(u, "//")+2:] }
	get := func(key string) string {
		return "GET /registry/schemas HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + key + "\r\n\r\n"
	}
	return tlsH, offH, []framingListener{
		{"api over TLS", host(tlsH.API), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}}, get(tlsH.RegistryKey), 200},
		{"api with tls.mode off", host(offH.API), nil, get(offH.RegistryKey), 200},
		{"plain-HTTP listener", host(tlsH.Plain), nil, "GET /registry/schemas HTTP/1.1\r\nHost: x\r\n\r\n", 308},
	}
}

func TestAmbiguousFramingIsRefused(t *testing.T) {
	t.Parallel()
	tlsH, offH, listeners := framingListeners(t)
	smuggled := func(key string) []string {
		// Each would reach the upstream if keygate framed by one header
		// and a later hop by the other.
		return []string{
			"POST /sync HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + key + "\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			"POST /sync HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + key + "\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n0\r\n\r\n",
			"GET /registry/schemas HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + key + "\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			"GET /registry/schemas HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + key + "\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n",
		}
	}
	for _, l := range listeners {
		h := tlsH
		if strings.Contains(l.name, "off") {
			h = offH
		}
		for i, req := range smuggled(h.RegistryKey) {
			before := h.Registry.hits.Load() + h.Extraction.hits.Load()
			resps := testkit.RawExchange(t, l.addr, l.tls, req+l.ok+l.ok)
			if len(resps) != 1 {
				t.Errorf("%s #%d: %d responses, want the 400 alone and the connection closed", l.name, i, len(resps))
				continue
			}
			r := resps[0]
			body, _ := io.ReadAll(r.Body)
			if i < 3 || !strings.Contains(l.name, "plain") || r.StatusCode == 400 {
				testkit.AssertSpecError(t, r.StatusCode, r.Header, body, 400, "")
			}
			if !r.Close {
				t.Errorf("%s #%d: response does not announce Connection: close", l.name, i)
			}
			if after := h.Registry.hits.Load() + h.Extraction.hits.Load(); after != before {
				t.Errorf("%s #%d: %d requests reached an upstream", l.name, i, after-before)
			}
		}
	}
	if got := tlsH.metric("keygate_framing_refused_total"); got < 8 {
		t.Errorf("keygate_framing_refused_total = %v, want at least 8", got)
	}
}

func TestPipelinedRequestsStillServed(t *testing.T) {
	t.Parallel()
	tlsH, offH, listeners := framingListeners(t)
	for _, l := range listeners {
		// A chunked POST, a Content-Length POST, then GETs, all on one
		// connection; the last asks to close.
		body := "--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--b--\r\n"
		post := "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
		chunked := "POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"
		last := strings.Replace(l.ok, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
		resps := testkit.RawExchange(t, l.addr, l.tls, l.ok+chunked+post+l.ok+last)
		if len(resps) != 5 {
			t.Errorf("%s: %d responses, want 5", l.name, len(resps))
			continue
		}
		for i, r := range resps {
			if i == 1 || i == 2 {
				if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), "framing") {
					t.Errorf("%s: response %d refused for its framing: %s", l.name, i, b)
				}
				continue
			}
			if r.StatusCode != l.status {
				t.Errorf("%s: response %d: status %d, want %d", l.name, i, r.StatusCode, l.status)
			}
		}
	}
	if n := tlsH.Registry.hits.Load(); n != 3 {
		t.Errorf("TLS registry upstream hits = %d, want 3", n)
	}
	if n := offH.Registry.hits.Load(); n != 3 {
		t.Errorf("tls.mode off registry upstream hits = %d, want 3", n)
	}
}

func TestFramingListenerKeepsTLSState(t *testing.T) {
	t.Parallel()
	tlsH, _, listeners := framingListeners(t)
	resps := testkit.RawExchange(t, listeners[0].addr, listeners[0].tls, strings.Replace(listeners[0].ok, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1))
	if len(resps) != 1 || resps[0].StatusCode != 200 {
		t.Fatalf("HTTP/1.1 over TLS: %d responses", len(resps))
	}
	if got := resps[0].Header.Get("Strict-Transport-Security"); got == "" {
		t.Error("no Strict-Transport-Security on HTTP/1.1 over TLS: the handler lost r.TLS")
	}
	r := tlsH.get(tlsH.API, "/registry/schemas", keyCred(tlsH.RegistryKey))
	if r.Status != 200 || r.Proto != 2 {
		t.Errorf("default client: status %d over HTTP/%d, want 200 over HTTP/2", r.Status, r.Proto)
	}
	// A plaintext request on the TLS port gets net/http's answer.
	c, err := net.Dial("tcp", listeners[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testkit.HangCheck))
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.0 400 Bad Request") {
		t.Errorf("plaintext on the TLS port: %q", b)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestFramingCountsEveryRequest: net/http answers "OPTIONS *" itself
// unless told not to; if it did, the guard would count one request less
// than the tracker and judge the next request by the wrong head.
func TestFramingCountsEveryRequest(t *testing.T) {
	t.Parallel()
	_, _, listeners := framingListeners(t)
	for _, l := range listeners {
		smuggle := "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
		resps := testkit.RawExchange(t, l.addr, l.tls, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"+smuggle+l.ok)
		if len(resps) != 2 || resps[1].StatusCode != 400 {
			t.Errorf("%s: %d responses, want 2 with the second 400", l.name, len(resps))
		}
	}
}

// TestStalledHandshakeDoesNotBlockAccept: the framing listener completes
// TLS handshakes itself, each in its own goroutine.
func TestStalledHandshakeDoesNotBlockAccept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	addr := strings.TrimPrefix(h.API, "https://")
	var stalled []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // silent: no ClientHello
		stalled = append(stalled, c)
	}
	start := time.Now()
	r := h.get(h.API, "/registry/schemas", keyCred(h.RegistryKey))
	if r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	t.Logf("answered after %s behind stalled handshakes", time.Since(start).Round(time.Millisecond))
	// Answered while the stalled handshakes still stand: a request that
	// waited behind them would be answered only once the server had given
	// up on them and closed them. Ordering, not a time bound.
	for _, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a stalled handshake had ended (%v) by the time the request was answered: the request waited behind it", err)
		}
	}
}
