package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// A /sync body of known length up to smallBodyMax is read whole, through
// the same checking reader as a streamed one (formctx: every check, the
// closing boundary and the no-second-context rule included, runs before
// the last byte is released), and only then sent upstream. The transport
// is then given a plain in-memory reader, so that net/http writes the
// request line, headers and body in one or two large writes instead of
// flushing the headers alone and then writing one small piece per read of
// the body (transfer.go, isKnownInMemoryReader). Larger bodies, bodies of
// unknown length, and bodies that would take the gateway past
// smallBodyBudget bytes held at once are streamed.
//
// Each body read whole has a buffer of its own, owned by the garbage
// collector: the transport may still be writing it upstream after the
// handler has returned, so it is never handed back for reuse.
const (
	smallBodyMax    = 128 << 10
	smallBodyBudget = 16 << 20
)

// tinyBodyMax is the largest in-memory body the upstream transport writes
// together with its request's headers in one write: its write buffer is
// sized for both (upstream.go).
const tinyBodyMax = 16 << 10

// errBodyTooLong is a body that went on past its Content-Length, which the
// server's body reader never lets happen.
var errBodyTooLong = errors.New("gateway: body longer than its Content-Length")

// readSmall reads body whole when its length n allows. ok=false means the
// body is to be streamed; err is a failed read (a failed check among
// them), which the caller answers like a failure found while streaming.
// With ok, n bytes count against smallBodyBudget until the caller gives
// them back with g.smallHeld.Add(-n), err or not.
func (g *Gateway) readSmall(body io.Reader, n int64) (b []byte, ok bool, err error) {
	if n < 0 || n > smallBodyMax {
		return nil, false, nil
	}
	if g.smallHeld.Add(n) > smallBodyBudget {
		g.smallHeld.Add(-n)
		return nil, false, nil
	}
	b = make([]byte, n)
	if _, err = io.ReadFull(body, b); err != nil {
		return b, true, err
	}
	var one [1]byte
	m, err := body.Read(one[:])
	for m == 0 && err == nil {
		m, err = body.Read(one[:])
	}
	switch {
	case m > 0:
		return b, true, errBodyTooLong
	case err == io.EOF:
		return b, true, nil
	default:
		return b, true, err
	}
}

// memBody gives the transport an in-memory reader of b, a body read by
// readSmall, and a fresh one for each retry (GetBody).
func memBody(req *http.Request, b []byte) {
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}
