package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// A /sync body of known length up to smallBodyMax is read whole, through
// the same checking reader as a streamed one (formctx: every check, the
// closing boundary and the no-second-context rule included, runs before
// the last byte is released), and only then sent upstream. The transport
// then writes the request line, headers and body in one or two large
// writes instead of flushing the headers alone and then writing one small
// piece per read of the body. Larger bodies, bodies of unknown length, and
// bodies that would take the gateway past smallBodyBudget bytes held at
// once are streamed as before.
//
// A body of up to tinyBodyMax is read into memory of its own rather than a
// pooled buffer, so that the transport can be given a plain in-memory
// reader (io.NopCloser of a *bytes.Reader). net/http writes the headers
// and such a body in one write; for any other body it flushes the headers
// alone first (transfer.go, isKnownInMemoryReader), which costs one more
// write here and one more read at the upstream for every small request.
// The garbage collector owns that memory, so a transport write that
// outlives the handler can never see it reused.
const (
	smallBodyMax    = 128 << 10
	smallBodyBudget = 16 << 20
	tinyBodyMax     = 16 << 10
)

// errBodyTooLong is a body that went on past its Content-Length, which the
// server's body reader never lets happen.
var errBodyTooLong = errors.New("gateway: body longer than its Content-Length")

// smallBuf holds one whole /sync body: in memory of its own (a tiny body)
// or in a pooled buffer. A pooled one is reference-counted: the request
// that read it holds one reference, and so does every reader of it handed
// to the transport (which may still be writing the body upstream after
// the handler returned, and closes the reader when it is done). The
// buffer goes back to the pool only when all are released, so no reader
// ever sees it reused.
//
// The pool earns its place by measurement: a buffer of its own for each
// body read whole costs keygate more CPU per request at 100 KiB (the
// garbage collector's work) than the project's 3% rule allows; see the
// side-by-side bench (bench/peers -keygate-base-rev) and the instruction
// counts in docs/performance.md.
//
// A tiny body's smallBuf lives in the request's state (state.tiny), and
// its first reader is the bytes.Reader inside it, so neither is allocated
// on its own.
type smallBuf struct {
	b      []byte // len: the body's length; cap: smallBodyMax when pooled
	pooled bool
	refs   atomic.Int32
	first  bytes.Reader // a tiny body's first reader (see firstReader)
}

var smallBufs = sync.Pool{New: func() any { return &smallBuf{b: make([]byte, 0, smallBodyMax), pooled: true} }}

func (s *smallBuf) release() {
	if s.pooled && s.refs.Add(-1) == 0 {
		s.b = s.b[:0]
		smallBufs.Put(s)
	}
}

// firstReader is reader for the body's first attempt upstream; call it
// once per body. A tiny body's is the bytes.Reader inside s, so that no
// reader is allocated for it.
func (s *smallBuf) firstReader() io.ReadCloser {
	if s.pooled {
		return s.reader()
	}
	s.first.Reset(s.b)
	return io.NopCloser(&s.first)
}

// reader returns a new reader of the body; a pooled buffer's holds a
// reference until it is closed.
func (s *smallBuf) reader() io.ReadCloser {
	if !s.pooled {
		return io.NopCloser(bytes.NewReader(s.b))
	}
	s.refs.Add(1)
	r := &smallReader{buf: s}
	r.Reset(s.b)
	return r
}

// smallReader is a *bytes.Reader (so io.Copy writes the body with one
// WriteTo) that releases its buffer reference on the first Close.
type smallReader struct {
	bytes.Reader
	buf    *smallBuf
	closed atomic.Bool
}

func (r *smallReader) Close() error {
	if r.closed.CompareAndSwap(false, true) {
		r.buf.release()
	}
	return nil
}

// readSmall reads body whole when its length n allows, a tiny body into
// tiny. ok=false means the body is to be streamed; err is a failed read (a
// failed check among them), which the caller answers like a failure found
// while streaming. With ok, the caller gives buf back with releaseSmall
// once the request is over, err or not.
func (g *Gateway) readSmall(body io.Reader, n int64, tiny *smallBuf) (buf *smallBuf, ok bool, err error) {
	if n < 0 || n > smallBodyMax {
		return nil, false, nil
	}
	if g.smallHeld.Add(n) > smallBodyBudget {
		g.smallHeld.Add(-n)
		return nil, false, nil
	}
	sb := tiny
	if n <= tinyBodyMax {
		sb.b = make([]byte, n)
	} else {
		sb = smallBufs.Get().(*smallBuf)
		sb.refs.Store(1)
		sb.b = sb.b[:n]
	}
	if _, err = io.ReadFull(body, sb.b); err != nil {
		return sb, true, err
	}
	var one [1]byte
	m, err := body.Read(one[:])
	for m == 0 && err == nil {
		m, err = body.Read(one[:])
	}
	switch {
	case m > 0:
		return sb, true, errBodyTooLong
	case err == io.EOF:
		return sb, true, nil
	default:
		return sb, true, err
	}
}

// releaseSmall gives back what readSmall took: the reservation of the
// body's bytes and the request's reference to a pooled buffer.
func (g *Gateway) releaseSmall(sb *smallBuf) {
	g.smallHeld.Add(-int64(len(sb.b))) // before release: it may reset b
	sb.release()
}

// memBody gives the transport a fresh in-memory reader of a body read by
// readSmall, for each attempt (GetBody serves retries). It is called once
// per body (rewrite, once per request).
func memBody(req *http.Request, b *smallBuf) {
	req.Body = b.firstReader()
	req.GetBody = func() (io.ReadCloser, error) { return b.reader(), nil }
}
