package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawUpstream is an HTTP/1.1 upstream on loopback that answers each
// request with scripted bytes and records, per request, the exact bytes
// it read.
type rawUpstream struct {
	ln     net.Listener
	mu     sync.Mutex
	raw    [][]byte // every request's bytes, in order
	conns  int
	gone   int // connections the gateway side closed or the answer ended
	answer func(req *http.Request, c net.Conn) (keep bool)
}

type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

func newRawUpstream(t *testing.T, answer func(req *http.Request, c net.Conn) bool) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, answer: answer}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			u.mu.Unlock()
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer func() {
		c.Close()
		u.mu.Lock()
		u.gone++
		u.mu.Unlock()
	}()
	rc := &recordingConn{Conn: c}
	br := bufio.NewReader(rc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("X-Read-Body") != "no" {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		u.mu.Lock()
		u.raw = append(u.raw, bytes.Clone(rc.buf.Bytes()[:rc.buf.Len()-br.Buffered()]))
		rest := rc.buf.Bytes()[rc.buf.Len()-br.Buffered():]
		rc.buf.Reset()
		rc.buf.Write(rest)
		u.mu.Unlock()
		if !u.answer(req, c) {
			return
		}
	}
}

func (u *rawUpstream) requests() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.raw
}

func (u *rawUpstream) connCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns
}

// openConns is how many accepted connections are still open.
func (u *rawUpstream) openConns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns - u.gone
}

// transports returns http.Transport as the gateway configures it and the
// direct transport in front of it.
func transports(headerTimeout time.Duration) (*http.Transport, *directTransport) {
	d := &net.Dialer{Timeout: time.Second}
	std := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4, ResponseHeaderTimeout: headerTimeout,
		DisableCompression: true, WriteBufferSize: transportWriteBufferSize, ReadBufferSize: transportBufferSize}
	return std, &directTransport{next: std, dial: d.DialContext, maxIdle: 4, idleTimeout: time.Minute,
		headerTimeout: headerTimeout, writeBufSize: transportWriteBufferSize, readBufSize: transportBufferSize}
}

func memRequest(t *testing.T, method, url string, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = nil, nil, 0
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

type outcome struct {
	err     bool
	timeout bool
	status  int
	header  http.Header
	body    string
	trailer http.Header
	got1xx  []int
}

func roundTrip(rt http.RoundTripper, req *http.Request) outcome {
	var o outcome
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		o.got1xx = append(o.got1xx, code)
		return nil
	}})
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		o.err, o.timeout = true, isTimeout(err)
		return o
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o.status, o.header, o.body, o.trailer = resp.StatusCode, resp.Header, string(b), resp.Trailer
	if err != nil {
		o.err = true
	}
	return o
}

// TestDirectTransportMatchesHTTPTransport sends the same requests through
// http.Transport and the direct transport to an upstream answering in
// every way the framing allows (and some it does not): the upstream reads
// the same bytes from both, and the caller gets the same status, headers,
// body, trailers, informational responses and failures.
func TestDirectTransportMatchesHTTPTransport(t *testing.T) {
	small := bytes.Repeat([]byte("0123456789abcdef"), 16)
	medium := bytes.Repeat([]byte("x"), 100<<10)
	cases := []struct {
		name          string
		method        string
		body          []byte
		hdr           map[string]string
		answer        string // raw response; "" = never answer
		close         bool   // close after answering
		headerTimeout time.Duration
	}{
		{name: "length", method: "POST", body: small, answer: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"StateText\":\"OK\"}"},
		{name: "no body GET", method: "GET", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"},
		{name: "100 KiB body", method: "POST", body: medium, answer: "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"},
		{name: "chunked with trailer", method: "POST", body: small, answer: "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n"},
		{name: "103 then 200", method: "POST", body: small, answer: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{name: "100 continue then 200", method: "POST", body: small, answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{name: "many 1xx", method: "GET", answer: strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 8) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{name: "204", method: "DELETE", answer: "HTTP/1.1 204 No Content\r\n\r\n"},
		{name: "304", method: "GET", answer: "HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n"},
		{name: "HEAD", method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"},
		{name: "close-delimited body", method: "GET", answer: "HTTP/1.1 200 OK\r\n\r\nuntil the end", close: true},
		{name: "connection close", method: "POST", body: small, answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", close: true},
		{name: "413 unread body", method: "POST", body: small, hdr: map[string]string{"X-Read-Body": "no"}, answer: "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", close: true},
		{name: "short body then close", method: "GET", answer: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", close: true},
		{name: "garbage status line", method: "GET", answer: "HTTP/9 banana\r\n\r\n", close: true},
		{name: "bad content-length", method: "GET", answer: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", close: true},
		{name: "headers past 10 MiB", method: "GET", answer: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 11<<20) + "\r\nContent-Length: 0\r\n\r\n", close: true},
		{name: "closed at once", method: "POST", body: small, answer: "", close: true},
		{name: "header timeout", method: "GET", answer: "", headerTimeout: 200 * time.Millisecond},
		{name: "identity headers", method: "POST", body: small, hdr: map[string]string{"Accept-Encoding": "br", "X-Keygate-Key-Id": "k1", "Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, answer: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, func(req *http.Request, c net.Conn) bool {
				if tc.answer == "" && !tc.close {
					time.Sleep(2 * tc.headerTimeout)
					return false
				}
				_, _ = io.WriteString(c, tc.answer)
				return !tc.close
			})
			url := "http://" + up.ln.Addr().String() + "/sync?x=1"
			std, direct := transports(tc.headerTimeout)
			defer std.CloseIdleConnections()
			defer direct.CloseIdleConnections()
			a := roundTrip(std, memRequest(t, tc.method, url, tc.body, tc.hdr))
			b := roundTrip(direct, memRequest(t, tc.method, url, tc.body, tc.hdr))
			if a.err != b.err || a.timeout != b.timeout {
				t.Fatalf("http.Transport err=%v timeout=%v; direct err=%v timeout=%v", a.err, a.timeout, b.err, b.timeout)
			}
			if a.status != b.status || a.body != b.body || !equalHeader(a.header, b.header) || !equalHeader(a.trailer, b.trailer) || len(a.got1xx) != len(b.got1xx) {
				t.Fatalf("http.Transport: %+v\ndirect: %+v", a, b)
			}
			reqs := up.requests()
			if len(reqs) != 2 {
				if tc.answer == "" && tc.close {
					return // the upstream may close before reading all
				}
				t.Fatalf("upstream read %d requests, want 2", len(reqs))
			}
			if !bytes.Equal(reqs[0], reqs[1]) {
				t.Fatalf("the upstream read different bytes:\nhttp.Transport: %q\ndirect: %q", trunc(reqs[0]), trunc(reqs[1]))
			}
		})
	}
}

func trunc(b []byte) []byte {
	if len(b) > 400 {
		return b[:400]
	}
	return b
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if strings.Join(v, "\x00") != strings.Join(w, "\x00") {
			return false
		}
	}
	return true
}

// TestDirectTransportReusesAndRecovers: one connection serves request
// after request; a connection the upstream closed while idle, or that
// holds bytes no request asked for, is never handed a request, so no
// request fails for it.
func TestDirectTransportReusesAndRecovers(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 300)
	cases := []struct {
		name      string
		answer    string
		close     bool
		wantConns func(n int) bool
	}{
		{name: "keep-alive", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantConns: func(n int) bool { return n == 1 }},
		{name: "upstream closes idle connections silently", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", close: true, wantConns: func(n int) bool { return n == 20 }},
		{name: "unsolicited bytes after the response", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n", wantConns: func(n int) bool { return n == 20 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, func(req *http.Request, c net.Conn) bool {
				_, _ = io.WriteString(c, tc.answer)
				return !tc.close
			})
			_, direct := transports(0)
			defer direct.CloseIdleConnections()
			for i := range 20 {
				o := roundTrip(direct, memRequest(t, "POST", "http://"+up.ln.Addr().String()+"/sync", body, nil))
				if o.err || o.status != 200 || o.body != "ok" {
					t.Fatalf("request %d: %+v", i, o)
				}
				time.Sleep(5 * time.Millisecond) // the upstream's close arrives
			}
			if n := up.connCount(); !tc.wantConns(n) {
				t.Fatalf("%d upstream connections", n)
			}
		})
	}
}

// TestDirectTransportClientGone: a caller that leaves while the upstream
// has not answered gets its context's error at once, and the connection
// is not pooled.
func TestDirectTransportClientGone(t *testing.T) {
	release := make(chan struct{})
	up := newRawUpstream(t, func(req *http.Request, c net.Conn) bool {
		<-release
		return false
	})
	defer close(release)
	_, direct := transports(0)
	defer direct.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req := memRequest(t, "POST", "http://"+up.ln.Addr().String()+"/sync", []byte("abc"), nil).WithContext(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := direct.RoundTrip(req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// A round trip that ignored the cancel would wait for an answer
	// that never comes; the bound is a hang check, the figure logged.
	d := time.Since(start)
	t.Logf("returned %s after the start, the cancel at 100ms", d.Round(time.Millisecond))
	if d > testkit.HangCheck {
		t.Fatalf("returned after %s", d)
	}
	if n := len(direct.idle); n != 0 {
		t.Fatalf("%d hosts with pooled connections", n)
	}
}

// TestDirectTransportTakesOnlyInMemoryBodies: streamed bodies, HTTPS
// upstreams, upgrades and trailers go to http.Transport.
func TestDirectTransportTakesOnlyInMemoryBodies(t *testing.T) {
	_, d := transports(0)
	mem := func() *http.Request { return memRequest(t, "POST", "http://127.0.0.1:1/sync", []byte("abc"), nil) }
	streamed := mem()
	streamed.GetBody = nil
	tls := memRequest(t, "POST", "https://127.0.0.1:1/sync", []byte("abc"), nil)
	up := mem()
	up.Header.Set("Upgrade", "websocket")
	tr := mem()
	tr.Trailer = http.Header{"X-T": nil}
	big := memRequest(t, "POST", "http://127.0.0.1:1/sync", make([]byte, smallBodyMax+1), nil)
	for name, c := range map[string]struct {
		req  *http.Request
		want bool
	}{
		"in memory": {mem(), true}, "no body": {memRequest(t, "GET", "http://127.0.0.1:1/", nil, nil), true},
		"streamed": {streamed, false}, "https": {tls, false}, "upgrade": {up, false}, "trailer": {tr, false}, "past smallBodyMax": {big, false},
	} {
		if got := d.takes(c.req); got != c.want {
			t.Errorf("%s: takes = %v, want %v", name, got, c.want)
		}
	}
}

// BenchmarkUpstreamTransport: one in-memory /sync body to a real loopback
// upstream through http.Transport (as the gateway configures it) and
// through the direct transport.
func BenchmarkUpstreamTransport(b *testing.B) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"StateText":"OK"}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/sync"
	for _, size := range []int{256, 100 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		std, direct := transports(time.Minute)
		for _, rt := range []struct {
			name string
			rt   http.RoundTripper
		}{{"http.Transport", std}, {"direct", direct}} {
			b.Run(fmt.Sprintf("%s/%d", rt.name, size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					sb := &smallBuf{b: body}
					req, _ := http.NewRequest(http.MethodPost, url, nil)
					req.ContentLength = int64(size)
					memBody(req, sb)
					resp, err := rt.rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		std.CloseIdleConnections()
	}
}

// TestDirectTransportEarlyAnswerToAStalledUpload: an upstream that answers
// before reading a 128 KiB body, and then neither reads nor closes, still
// has its answer delivered, after the response header timeout at most.
func TestDirectTransportEarlyAnswerToAStalledUpload(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 0\r\n\r\n")
		<-hold
	}()
	_, direct := transports(time.Second)
	defer direct.CloseIdleConnections()
	direct.writeBufSize = 4 << 10
	dial := direct.dial
	direct.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4 << 10)
		}
		return c, err
	}
	start := time.Now()
	// Small socket buffers on both sides, so that the body cannot all
	// be written while the upstream does not read.
	o := roundTrip(direct, memRequest(t, "POST", "http://"+ln.Addr().String()+"/sync", bytes.Repeat([]byte("z"), smallBodyMax), nil))
	if o.err || o.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("%+v after %s", o, time.Since(start))
	}
	t.Logf("answered after %s", time.Since(start))
}

// TestDirectTransportClosesConnectionsIdleTooLong: pooled connections
// idle past the idle timeout are closed by their idle timers, with no
// later request touching the pool; a connection taken from the pool
// before its timer fires stays open, and the next request dials anew.
func TestDirectTransportClosesConnectionsIdleTooLong(t *testing.T) {
	up := newRawUpstream(t, func(req *http.Request, c net.Conn) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	_, direct := transports(0)
	defer direct.CloseIdleConnections()
	direct.idleTimeout = 200 * time.Millisecond
	host := up.ln.Addr().String()
	url := "http://" + host + "/sync"
	// Two connections at once, so that two are pooled.
	c1, err1 := direct.get(context.Background(), host)
	c2, err2 := direct.get(context.Background(), host)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	direct.put(c1)
	direct.put(c2)
	start := time.Now()
	waitFor(t, "both idle connections closed at the upstream", func() bool { return up.openConns() == 0 })
	t.Logf("closed %s after they were pooled (idle timeout 200ms)", time.Since(start).Round(time.Millisecond))
	direct.mu.Lock()
	n := len(direct.idle[host])
	direct.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d pooled connections, want 0", n)
	}
	if o := roundTrip(direct, memRequest(t, "GET", url, nil, nil)); o.err || o.status != 200 {
		t.Fatalf("%+v", o)
	}
	if got := up.connCount(); got != 3 {
		t.Fatalf("upstream accepted %d connections, want 3", got)
	}
}

// waitFor is a hang check: it polls cond until it holds, failing the test
// after a deadline far past any expected wait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUpstreamPoolKeepsAWaveOfRequests: with the default pool, a wave of
// 200 requests in flight at once (what HTTP/2 clients bring: 32
// connections of 10 streams make 320) leaves its connections open for the
// next wave, which dials none; with the old pool of 64, 136 of them were
// closed and dialed again on every wave. Every answer of both waves is
// whole.
func TestUpstreamPoolKeepsAWaveOfRequests(t *testing.T) {
	const inFlight = 200
	if inFlight > DefaultMaxIdleConnsPerHost {
		t.Fatal("the wave must fit the default pool")
	}
	// Each wave's handlers wait until the whole wave has arrived.
	type barrier struct {
		n  atomic.Int64
		ch chan struct{}
	}
	var cur atomic.Pointer[barrier]
	var dials atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bar := cur.Load()
		if bar.n.Add(1) == inFlight {
			close(bar.ch)
		}
		<-bar.ch
		_, _ = w.Write(b)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	u, err := newUpstream("extraction", UpstreamConfig{Targets: []string{srv.URL}}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	direct := u.direct
	defer direct.CloseIdleConnections()
	wave := func() {
		t.Helper()
		cur.Store(&barrier{ch: make(chan struct{})})
		var wg sync.WaitGroup
		for i := range inFlight {
			wg.Go(func() {
				body := fmt.Sprintf("request %d", i)
				o := roundTrip(u.transport, memRequest(t, "POST", srv.URL+"/sync", []byte(body), nil))
				if o.err || o.status != 200 || o.body != body {
					t.Errorf("request %d: %+v", i, o)
				}
			})
		}
		wg.Wait()
	}
	wave()
	first := dials.Load()
	wave()
	if first != inFlight {
		t.Errorf("first wave: %d connections dialed, want %d (one per request in flight)", first, inFlight)
	}
	if again := dials.Load() - first; again != 0 {
		t.Errorf("second wave: %d connections dialed, want 0 (the pool kept the first wave's)", again)
	}
	direct.mu.Lock()
	defer direct.mu.Unlock()
	for host, list := range direct.idle {
		if len(list) != inFlight {
			t.Errorf("%s: %d idle connections, want %d", host, len(list), inFlight)
		}
	}
}

// TestDirectTransportRequestEndedEarly: a request whose context ends (its
// client reset the stream) costs the upstream no connection when it ended
// before it was sent, nor when the upstream answers within cancelGrace:
// the next request reuses the connection. Only an upstream slower than
// that has its connection closed.
func TestDirectTransportRequestEndedEarly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		endBefore bool          // the context ended before RoundTrip
		answerIn  time.Duration // when the upstream answers the first request
		wantConns int           // upstream connections after both requests
		wantSent  int           // requests the upstream read
	}{
		{"ended before it was sent", true, 0, 1, 1},
		{"ended while the upstream answers", false, 300 * time.Millisecond, 1, 2},
		{"ended and the upstream takes longer than the grace", false, cancelGrace + time.Second, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			first := true
			var mu sync.Mutex
			up := newRawUpstream(t, func(req *http.Request, c net.Conn) bool {
				mu.Lock()
				wait := first
				first = false
				mu.Unlock()
				if wait {
					time.Sleep(tt.answerIn)
				}
				_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
				return err == nil
			})
			_, direct := transports(0)
			defer direct.CloseIdleConnections()
			url := "http://" + up.ln.Addr().String() + "/registry/x"

			ctx, cancel := context.WithCancel(context.Background())
			if tt.endBefore {
				cancel()
			} else {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			if _, err := direct.RoundTrip(memRequest(t, "GET", url, nil, nil).WithContext(ctx)); !errors.Is(err, context.Canceled) {
				t.Fatalf("ended request: err = %v, want context.Canceled", err)
			}
			cancel()
			if o := roundTrip(direct, memRequest(t, "GET", url, nil, nil)); o.err || o.status != 200 || o.body != "hello" {
				t.Fatalf("next request: %+v", o)
			}
			if got := up.connCount(); got != tt.wantConns {
				t.Errorf("upstream accepted %d connections, want %d", got, tt.wantConns)
			}
			if got := len(up.requests()); got != tt.wantSent {
				t.Errorf("upstream read %d requests, want %d", got, tt.wantSent)
			}
		})
	}
}
