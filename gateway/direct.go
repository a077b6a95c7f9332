package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// directTransport sends a request whose body is already in memory (or
// absent) to a plain-HTTP upstream over a pooled HTTP/1.1 connection,
// writing the request and reading the response in the caller's
// goroutine. http.Transport hands every request to a connection's write
// goroutine and takes the response from its read goroutine, three
// goroutine handoffs per request that a bare proxy pays too; here the
// request path pays none. Everything else (streamed bodies, HTTPS
// upstreams, upgrades, trailers) goes to next, the http.Transport.
//
// What goes on the wire is written by net/http itself (Request.Write, the
// same writer http.Transport uses, with DisableCompression) and read by
// http.ReadResponse, so the framing rules are net/http's on both paths.
// What http.Transport does around them is kept: 1xx responses before the
// final one (each reported to an httptrace Got1xxResponse hook), the
// response header timeout, a 10 MiB bound on response headers (1xx ones
// included unless a hook took them), an idle connection the upstream closed is never reused
// (checked without blocking before each reuse), a response the upstream
// sent before it stopped reading the request is still delivered, and a
// request on a reused connection is retried on a new one only where
// http.Transport would retry it.
type directTransport struct {
	next          idleCloser
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle       int
	idleTimeout   time.Duration
	headerTimeout time.Duration
	writeBufSize  int
	readBufSize   int

	mu   sync.Mutex
	idle map[string][]*directConn
	// closed is set by Close: a connection whose request ends is closed
	// rather than pooled.
	closed bool
}

// idleCloser is a RoundTripper that keeps connections, such as
// http.Transport.
type idleCloser interface {
	http.RoundTripper
	CloseIdleConnections()
}

// maxResponseHeaderBytes is http.Transport's default bound on a
// response's headers.
const maxResponseHeaderBytes = 10 << 20

// takes reports whether req goes the direct way.
func (t *directTransport) takes(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Trailer != nil || req.Header["Upgrade"] != nil {
		return false
	}
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	return req.GetBody != nil && req.ContentLength >= 0 && req.ContentLength <= smallBodyMax
}

func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.takes(req) {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			closeReqBody(req)
			return nil, err
		}
		pc, err := t.get(ctx, host)
		if err != nil {
			closeReqBody(req)
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			// Ended (a client's stream reset, say) while the connection
			// was found or dialed: it has carried nothing of this request,
			// so it goes back to the pool rather than to waste.
			t.put(pc)
			closeReqBody(req)
			return nil, err
		}
		resp, retry, err := pc.roundTrip(ctx, req)
		if err == nil {
			if ctx.Err() != nil {
				// Ended while the upstream answered: nobody will read
				// the answer, which is drained so that the connection
				// is pooled.
				_ = resp.Body.Close()
				return nil, ctx.Err()
			}
			return resp, nil
		}
		if pc.unsent {
			pc.unsent = false
			t.put(pc)
		} else {
			pc.close()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retry || attempt > 0 {
			return nil, err
		}
		// A reused connection the upstream had closed: once more on a
		// new one, with a fresh reader of the in-memory body.
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r2 := *req
			r2.Body = body
			req = &r2
		}
	}
}

// CloseIdleConnections closes every pooled connection, of both paths.
// Connections in use are pooled again when their requests end.
func (t *directTransport) CloseIdleConnections() {
	t.closeIdle(false)
}

// Close closes every pooled connection, of both paths, and every
// connection in use once its request ends: nothing is pooled after
// Close. A request sent after Close is still served, on a connection of
// its own.
func (t *directTransport) Close() {
	t.closeIdle(true)
}

func (t *directTransport) closeIdle(final bool) {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	if final {
		t.closed = true
	}
	t.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.idleTimer.Stop()
			_ = pc.c.Close()
		}
	}
	// http.Transport's CloseIdleConnections also closes the connections
	// in use as they become idle, until it is next asked for one.
	t.next.CloseIdleConnections()
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// get returns an idle connection to host that is still open, or a new one.
func (t *directTransport) get(ctx context.Context, host string) (*directConn, error) {
	for {
		t.mu.Lock()
		list := t.idle[host]
		n := len(list)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		pc := list[n-1]
		list[n-1] = nil
		t.idle[host] = list[:n-1]
		// A timer that fires meanwhile finds pc no longer pooled.
		pc.idleTimer.Stop()
		t.mu.Unlock()
		if time.Since(pc.idleAt) < t.idleTimeout && pc.open() {
			pc.reused = true
			return pc, nil
		}
		_ = pc.c.Close()
	}
	// The dial outlives the request's end, which would otherwise cost
	// the upstream an accepted connection for nothing and the next
	// request a dial of its own: the connection goes to the pool (see
	// RoundTrip). The request waits for it, bounded by the dialer's
	// timeout, so that it keeps its place under max_concurrent and the
	// dials in progress stay bounded by the requests in flight.
	c, err := t.dial(context.WithoutCancel(ctx), "tcp", host)
	if err != nil {
		return nil, err
	}
	return t.newConn(host, c), nil
}

func (t *directTransport) newConn(host string, c net.Conn) *directConn {
	pc := &directConn{t: t, host: host, c: c}
	pc.cr = countingReader{c: c}
	pc.br = bufio.NewReaderSize(&pc.cr, t.readBufSize)
	pc.bw = &directWriter{c: c, buf: make([]byte, 0, t.writeBufSize)}
	return pc
}

// put pools pc, or closes it when the pool is full, the transport is
// closed, or pc holds bytes no request asked for. A pooled connection is
// closed once it has been idle for the idle timeout, as http.Transport's
// idle timer closes its own.
func (t *directTransport) put(pc *directConn) {
	if pc.br.Buffered() > 0 {
		_ = pc.c.Close()
		return
	}
	pc.idleAt = time.Now()
	t.mu.Lock()
	if t.closed || len(t.idle[pc.host]) >= t.maxIdle {
		t.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*directConn{}
	}
	t.idle[pc.host] = append(t.idle[pc.host], pc)
	if pc.idleTimer == nil {
		pc.idleTimer = time.AfterFunc(t.idleTimeout, pc.idleExpired)
	} else {
		pc.idleTimer.Reset(t.idleTimeout)
	}
	t.mu.Unlock()
}

// idleExpired is pc's idle timer: pc, still pooled and idle for the idle
// timeout, is taken from the pool and closed.
func (pc *directConn) idleExpired() {
	t := pc.t
	t.mu.Lock()
	list := t.idle[pc.host]
	// The pool is a stack: the connections idle longest are at its
	// bottom.
	i := 0
	for i < len(list) && list[i] != pc {
		i++
	}
	// pc is read only while pooled: a get took it, or it was pooled
	// again since this timer was armed (it is re-armed then).
	if i == len(list) || time.Since(pc.idleAt) < t.idleTimeout {
		t.mu.Unlock()
		return
	}
	n := copy(list[i:], list[i+1:])
	list[i+n] = nil
	t.idle[pc.host] = list[:i+n]
	t.mu.Unlock()
	_ = pc.c.Close()
}

// directConn is one upstream connection, used by one request at a time.
type directConn struct {
	t      *directTransport
	host   string
	c      net.Conn
	cr     countingReader
	br     *bufio.Reader
	bw     *directWriter
	idleAt time.Time
	// idleTimer closes the connection once pooled for the idle timeout
	// (idleExpired); armed by put, stopped by get, under the transport's
	// mutex.
	idleTimer *time.Timer
	reused    bool
	// For open's peek, made once per connection.
	raw     syscall.RawConn
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	quiet   bool
	// The request's end while the connection is in use (see watch):
	// reading says the request has been written whole, so its end gives
	// the upstream cancelGrace to answer; cut says it ended before that,
	// and the connection was cut off.
	reading, cut atomic.Bool
	watching     sync.WaitGroup
	// unsent says the request ended before any of it was written: the
	// connection goes back to the pool.
	unsent bool
}

// A request that ends (its client went away or reset its stream) after
// it was written whole gives the upstream cancelGrace to answer, and its
// answer is read (up to cancelDrainMax bytes of body) so that the connection
// goes back to the pool: cutting it off would cost the upstream a
// connection for each such request, and the next request a dial. The
// request keeps its place under max_concurrent meanwhile, so the
// connections held this way are bounded as the requests are.
const (
	cancelGrace    = time.Second
	cancelDrainMax = 256 << 10
)

// countingReader counts what was read from the connection and bounds the
// response headers.
type countingReader struct {
	c     net.Conn
	n     int64
	limit int64 // >0 while response headers are read
}

var errHeadersTooLong = errors.New("net/http: server response headers exceeded 10 MiB")

func (r *countingReader) Read(p []byte) (int, error) {
	if r.limit > 0 {
		if r.n >= r.limit {
			return 0, errHeadersTooLong
		}
		if rest := r.limit - r.n; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	n, err := r.c.Read(p)
	r.n += int64(n)
	return n, err
}

func (pc *directConn) close() { _ = pc.c.Close() }

// abort makes any read or write on the connection fail at once.
func (pc *directConn) abort() { _ = pc.c.SetDeadline(time.Unix(1, 0)) }

// ended is the request's end: a grace for the answer once the request is
// written, the connection cut off before.
func (pc *directConn) ended() {
	if pc.reading.Load() {
		_ = pc.c.SetReadDeadline(time.Now().Add(cancelGrace))
		return
	}
	pc.cut.Store(true)
	pc.abort()
}

// watch arms ctx's end to call ended. The returned stop disarms it,
// waits for an ended that has begun, and reports whether ctx had not
// ended; calling it again returns the same.
func (pc *directConn) watch(ctx context.Context) func() bool {
	pc.reading.Store(false)
	pc.cut.Store(false)
	pc.watching.Add(1)
	stop := context.AfterFunc(ctx, func() { defer pc.watching.Done(); pc.ended() })
	var stopped, live bool
	return func() bool {
		if !stopped {
			stopped = true
			if live = stop(); live {
				pc.watching.Done()
			} else {
				pc.watching.Wait()
			}
		}
		return live
	}
}

// afterRead re-applies the grace after a read deadline was set or
// cleared, in case the request ended in between.
func (pc *directConn) afterRead(ctx context.Context) {
	if ctx.Err() != nil {
		_ = pc.c.SetReadDeadline(time.Now().Add(cancelGrace))
	}
}

// roundTrip writes req and reads its response. retry says the request may
// be sent again on a new connection: the connection was reused and the
// upstream took nothing of it.
func (pc *directConn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, bool, error) {
	stop := pc.watch(ctx)
	// A body past the socket buffers can block the write. An upstream
	// that answers early and stops reading without closing must not hold
	// it for ever: the write gives up after the response header timeout,
	// and the early answer is read below.
	slowWrite := req.ContentLength > tinyBodyMax && pc.t.headerTimeout > 0
	if slowWrite {
		_ = pc.c.SetWriteDeadline(time.Now().Add(pc.t.headerTimeout))
	}
	sentBefore := pc.bw.sent
	werr := req.Write(pc.bw)
	if werr == nil {
		werr = pc.bw.Flush()
	}
	if slowWrite && werr == nil {
		_ = pc.c.SetWriteDeadline(time.Time{})
	}
	if werr != nil {
		stop()
		if ctx.Err() != nil {
			if pc.bw.sent == sentBefore {
				// Ended before a byte of the request left: the
				// connection is as it was, and can be pooled.
				pc.bw.err, pc.bw.buf = nil, pc.bw.buf[:0]
				_ = pc.c.SetDeadline(time.Time{})
				pc.unsent = true
			}
			return nil, false, werr
		}
		if pc.reused && pc.bw.sent == sentBefore {
			// The upstream had closed the idle connection and took not
			// one byte of this request: http.Transport's
			// nothingWrittenError, which it retries.
			return nil, true, werr
		}
		// It may have answered before it stopped reading (a 413, say):
		// that answer is the one to give.
		_ = pc.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if resp, err := http.ReadResponse(pc.br, req); err == nil {
			_ = pc.c.SetReadDeadline(time.Time{})
			resp.Body = &directBody{pc: pc, body: resp.Body, stop: func() bool { return true }, reuse: false}
			return resp, false, nil
		}
		return nil, false, werr
	}
	before := pc.cr.n
	if pc.t.headerTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(pc.t.headerTimeout))
	}
	pc.reading.Store(true)
	pc.afterRead(ctx)
	pc.cr.limit = pc.cr.n + int64(pc.br.Buffered()) + maxResponseHeaderBytes
	var resp *http.Response
	var err error
	for {
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			break
		}
		code := resp.StatusCode
		if code < 100 || code > 199 {
			break
		}
		if code == http.StatusSwitchingProtocols {
			// No request of this path asked to switch.
			_ = resp.Body.Close()
			err = errors.New("net/http: unexpected 101 response from the upstream")
			break
		}
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err = trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				break
			}
			// Delivered: the header bound starts again, as
			// http.Transport's does.
			pc.cr.limit = pc.cr.n + maxResponseHeaderBytes
		}
	}
	pc.cr.limit = 0
	if err != nil {
		stop()
		if isTimeout(err) && ctx.Err() == nil {
			err = fmt.Errorf("net/http: timeout awaiting response headers: %w", err)
		}
		// Nothing at all came back on a reused connection: http.Transport
		// retries such a request only when it is replayable.
		return nil, pc.reused && pc.cr.n == before && replayable(req), err
	}
	if pc.t.headerTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Time{})
		pc.afterRead(ctx)
	}
	b := &directBody{pc: pc, body: resp.Body, stop: stop, reuse: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.release(true)
		return resp, false, nil
	}
	resp.Body = b
	return resp, false, nil
}

// replayable is http.Request.isReplayable: an idempotent request whose
// body can be had again.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// directBody is a response body that gives its connection back to the
// pool once read to the end, and closes it when closed before.
type directBody struct {
	pc       *directConn
	body     io.ReadCloser
	stop     func() bool
	reuse    bool
	released bool
	eof      bool
}

var errBodyClosed = errors.New("http: read on closed response body")

func (b *directBody) Read(p []byte) (int, error) {
	if b.released {
		if b.eof {
			return 0, io.EOF
		}
		return 0, errBodyClosed
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
		b.release(true)
		return n, io.EOF
	}
	return n, err
}

func (b *directBody) Close() error {
	if !b.released {
		b.release(b.drain())
	}
	return nil
}

// drain reads what is left of a body closed early, when its request has
// ended, so that the connection can be pooled: up to cancelDrainMax bytes
// within cancelGrace. It reports whether the body was read whole.
func (b *directBody) drain() bool {
	if b.pc.reading.Load() && !b.pc.cut.Load() && !b.stop() {
		_ = b.pc.c.SetReadDeadline(time.Now().Add(cancelGrace))
		n, err := io.CopyN(io.Discard, b.body, cancelDrainMax+1)
		return err == io.EOF && n <= cancelDrainMax
	}
	return false
}

// release ends the body's hold on the connection: back to the pool when
// the response was read whole and the connection stays open, closed
// otherwise.
func (b *directBody) release(whole bool) {
	b.released = true
	// stop is false when the request's context ended and aborted the
	// connection.
	if live := b.stop(); whole && b.reuse && !b.pc.cut.Load() {
		if !live {
			// The request ended: its grace deadline goes.
			_ = b.pc.c.SetDeadline(time.Time{})
		}
		b.pc.reused = false
		b.pc.t.put(b.pc)
		return
	}
	b.pc.close()
}

// directWriter buffers what Request.Write writes, and sends it with the
// body in one system call: an in-memory body (a *bytes.Reader, or the
// gateway's pooled reader, which is one) is handed over whole by its
// WriteTo and leaves with the buffered request line and headers in one
// writev, never copied. http.Transport's bufio.Writer instead fills its
// buffer, flushes, and copies the rest in 32 KiB pieces through a buffer
// it allocates per request.
type directWriter struct {
	c    net.Conn
	buf  []byte
	err  error
	sent int64 // bytes the connection took
}

func (w *directWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if len(w.buf)+len(p) <= cap(w.buf) {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	bufs := net.Buffers{w.buf, p}
	n, err := bufs.WriteTo(w.c)
	w.sent += n
	w.err = err
	w.buf = w.buf[:0]
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

func (w *directWriter) WriteString(s string) (int, error) {
	if len(w.buf)+len(s) <= cap(w.buf) && w.err == nil {
		w.buf = append(w.buf, s...)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// WriteByte makes directWriter an io.ByteWriter, so that Request.Write
// writes into it rather than through a bufio.Writer of its own.
func (w *directWriter) WriteByte(c byte) error {
	_, err := w.Write([]byte{c})
	return err
}

// inMemory is a body reader whose remaining bytes are all in memory.
type inMemory interface {
	io.WriterTo
	Len() int
}

// ReadFrom takes the body Request.Write copies, limited to its
// Content-Length: whole, through WriteTo, when it is in memory.
func (w *directWriter) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if m, ok := lr.R.(inMemory); ok && int64(m.Len()) == lr.N {
			n, err := m.WriteTo(w)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(struct{ io.Writer }{w}, r)
}

// Flush sends what is buffered.
func (w *directWriter) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 {
		n, err := w.c.Write(w.buf)
		w.sent += int64(n)
		w.err = err
		w.buf = w.buf[:0]
	}
	return w.err
}
