package server_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/gateway"
)

func dialListener(t *testing.T, l framingListener) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if l.tls != nil {
		c, err = tls.Dial("tcp", l.addr, l.tls)
	} else {
		c, err = net.Dial("tcp", l.addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRefusalBeforeTheBodyIsAnsweredAtOnce: on every listener of a
// running keygate (the framing listener over TLS, with tls.mode off, and
// the plain-HTTP one), a request refused before its body (an unknown key,
// a key in clear, ambiguous framing) is answered within a second whatever body size it
// declares, with no body byte sent, and its connection is then closed.
func TestRefusalBeforeTheBodyIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	_, _, listeners := framingListeners(t)
	unknown := "svc_live_" + strings.Repeat("Q", 40)
	const smuggling = "Content-Length: 4\r\nTransfer-Encoding: chunked"
	for _, l := range listeners {
		status := http.StatusUnauthorized
		if strings.Contains(l.name, "plain") {
			status = http.StatusBadRequest // HTTPS required
		}
		for _, framing := range []string{"Content-Length: 1000", "Content-Length: 100000", "Content-Length: 200000", "Transfer-Encoding: chunked", smuggling} {
			status := status
			if framing == smuggling {
				status = http.StatusBadRequest // ambiguous framing, refused by framing.Guard
			}
			c := dialListener(t, l)
			start := time.Now()
			_, _ = io.WriteString(c, "POST /sync HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+unknown+"\r\nContent-Type: multipart/form-data; boundary=b\r\n"+framing+"\r\n\r\n")
			// The body is never sent: an answer that waited for it would
			// not come before this deadline, the hang check.
			_ = c.SetReadDeadline(start.Add(testkit.HangCheck))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Errorf("%s, %s: no answer within %v without the body (hang check): %v", l.name, framing, testkit.HangCheck, err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			took := time.Since(start)
			t.Logf("%s, %s: %d after %s without the body", l.name, framing, resp.StatusCode, took.Round(time.Millisecond))
			if resp.StatusCode != status || !resp.Close {
				t.Errorf("%s, %s: %d (close %v), want %d and the connection closed", l.name, framing, resp.StatusCode, resp.Close, status)
			}
			_ = c.SetReadDeadline(time.Now().Add(testkit.HangCheck))
			if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s, %s: after the answer the connection gave %v, want it closed", l.name, framing, err)
			}
		}
	}
}

// TestMinBodyRateIsConfigured: server.min_body_rate reaches the request
// path: a body trickled at 1 B/s gets 408 soon after the grace.
func TestMinBodyRateIsConfigured(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) {
		c.Server.MinBodyRate = gateway.MinBodyRate{BytesPerSecond: 1 << 10, Grace: time.Second}
	}})
	roots := poolFromFile(t, h.Cfg.TLS.SelfSignedDir+"/cert.pem")
	c, err := tls.Dial("tcp", strings.TrimPrefix(h.API, "https://"), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, _ = io.WriteString(c, "POST /sync HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+h.LiveKey+"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
				if _, err := c.Write([]byte("-")); err != nil {
					return
				}
			}
		}
	}()
	_ = c.SetReadDeadline(start.Add(testkit.HangCheck))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	// The read deadline above is the hang check; the time is logged.
	took := time.Since(start)
	t.Logf("%d after %s", resp.StatusCode, took.Round(time.Millisecond))
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("%d %s after %s, want 408 after the 1 s grace", resp.StatusCode, b, took.Round(time.Millisecond))
	}
}
