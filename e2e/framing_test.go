package e2e

import (
	"bytes"
	"crypto/tls"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/standin"
)

// syncBody is a /sync form bound to contextID.
func syncBody(contextID string) (contentType string, body string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("id", "2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a")
	_ = mw.WriteField("contextId", contextID)
	w, _ := mw.CreateFormFile("files", "doc.pdf")
	_, _ = w.Write([]byte("%PDF-1.4 framing"))
	_ = mw.Close()
	return mw.FormDataContentType(), buf.String()
}

// waitForKey waits until the gateway has reloaded its keystore with key.
func waitForKey(t *testing.T, g *gateway, key string) {
	t.Helper()
	eventually(t, testkit.HangCheck, func() string {
		if status, b, _ := g.post(key, ctxA, []byte("%PDF-1.4")); status != 200 {
			return "key not accepted yet: " + strconv.Itoa(status) + " " + string(b)
		}
		return ""
	})
}

// TestFramingContentLengthWithTransferEncoding: finding 9. A request with
// both Content-Length and Transfer-Encoding gets 400 with the spec's body
// and the connection closed; the request pipelined after it is never
// served and nothing reaches the upstream. Sound pipelined requests and
// HTTP/2 keep working.
func TestFramingContentLengthWithTransferEncoding(t *testing.T) {
	var hits atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
	})
	plain := testkit.FreeAddr(t)
	g := startGateway(t, gwOpts{upstream: up, serverYAML: "  http_listen: " + strconv.Quote(plain) + "\n"})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	waitForKey(t, g, key)
	hits.Store(0)
	ct, body := syncBody(ctxA)
	chunked := strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	sound := "POST /sync HTTP/1.1\r\nHost: k\r\nX-Api-Key: " + key + "\r\nContent-Type: " + ct + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	tlsCfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}

	smuggles := map[string]string{
		"CL then TE": "POST /sync HTTP/1.1\r\nHost: k\r\nX-Api-Key: " + key + "\r\nContent-Type: " + ct + "\r\nContent-Length: " + strconv.Itoa(len(chunked)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
		"te then cl": "POST /sync HTTP/1.1\r\nHost: k\r\nX-Api-Key: " + key + "\r\nContent-Type: " + ct + "\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n" + chunked,
	}
	for name, req := range smuggles {
		for _, l := range []struct {
			name string
			addr string
			tc   *tls.Config
		}{{"api", g.apiAddr(), tlsCfg}, {"plain-HTTP listener", plain, nil}} {
			resps := testkit.RawExchange(t, l.addr, l.tc, req+sound)
			if len(resps) != 1 {
				t.Errorf("%s on %s: %d responses, want one (400) and the connection closed", name, l.name, len(resps))
				continue
			}
			b, _ := io.ReadAll(resps[0].Body)
			specError(t, resps[0].StatusCode, resps[0].Header, b, 400, "framing")
			if !resps[0].Close {
				t.Errorf("%s on %s: no Connection: close", name, l.name)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	if got := g.metric("keygate_framing_refused_total"); got != 4 {
		t.Errorf("keygate_framing_refused_total = %v, want 4", got)
	}

	// Sound requests, pipelined (one chunked), are all served.
	soundChunked := "POST /sync HTTP/1.1\r\nHost: k\r\nX-Api-Key: " + key + "\r\nContent-Type: " + ct + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
	resps := testkit.RawExchange(t, g.apiAddr(), tlsCfg, sound+soundChunked+strings.Replace(sound, "Host: k\r\n", "Host: k\r\nConnection: close\r\n", 1))
	if len(resps) != 3 {
		t.Fatalf("pipelined sound requests: %d responses, want 3", len(resps))
	}
	for i, r := range resps {
		if r.StatusCode != 200 {
			b, _ := io.ReadAll(r.Body)
			t.Errorf("pipelined request %d: %d %s", i, r.StatusCode, b)
		}
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("upstream hits = %d, want 3", n)
	}

	// HTTP/2 is still negotiated.
	status, _, _ := g.post(key, ctxA, []byte("%PDF-1.4"))
	if status != 200 {
		t.Errorf("POST over the default client: %d", status)
	}
	resp, err := g.Client.Get(g.API + "/sync")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("HTTP/%d, want HTTP/2", resp.ProtoMajor)
	}
	assertNoKeyInLogs(t, g)
}
