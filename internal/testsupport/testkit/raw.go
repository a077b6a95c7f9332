package testkit

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// RawExchange sends payload on one new connection to addr (over TLS with
// HTTP/1.1 when roots is set) and reads responses until the server closes
// the connection. It fails if the connection is still open after 10 s.
func RawExchange(t testing.TB, addr string, roots *tls.Config, payload string) []*http.Response {
	t.Helper()
	var c net.Conn
	var err error
	if roots != nil {
		c, err = tls.Dial("tcp", addr, roots)
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	var out []*http.Response
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %d responses", len(out))
			}
			return out // closed (EOF or reset)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
}
