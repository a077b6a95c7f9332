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
// then writes the request line, headers and body in one or two large
// writes instead of flushing the headers alone and then writing one small
// piece per read of the body. Larger bodies, bodies of unknown length, and
// bodies that would take the gateway past smallBodyBudget bytes held at
// once are streamed as before.
const (
	smallBodyMax    = 128 << 10
	smallBodyBudget = 16 << 20
)

// errBodyTooLong is a body that went on past its Content-Length, which the
// server's body reader never lets happen.
var errBodyTooLong = errors.New("gateway: body longer than its Content-Length")

// readSmall reads body whole when its length n allows. ok=false means the
// body is to be streamed; err is a failed read (a failed check among
// them), which the caller answers like a failure found while streaming.
// release gives back the reservation once the request is over.
func (g *Gateway) readSmall(body io.Reader, n int64) (buf []byte, release func(), ok bool, err error) {
	if n < 0 || n > smallBodyMax {
		return nil, nil, false, nil
	}
	if g.smallHeld.Add(n) > smallBodyBudget {
		g.smallHeld.Add(-n)
		return nil, nil, false, nil
	}
	release = func() { g.smallHeld.Add(-n) }
	// Not pooled: the transport may still write it after the handler
	// returns (an upstream that answers before reading the whole body).
	buf = make([]byte, n)
	if _, err = io.ReadFull(body, buf); err != nil {
		return nil, release, true, err
	}
	var one [1]byte
	m, err := body.Read(one[:])
	for m == 0 && err == nil {
		m, err = body.Read(one[:])
	}
	switch {
	case m > 0:
		return nil, release, true, errBodyTooLong
	case err == io.EOF:
		return buf, release, true, nil
	default:
		return nil, release, true, err
	}
}

// memBody gives the transport a fresh in-memory reader of a body read by
// readSmall, for each attempt. net/http recognises the type and sends the
// headers and the body together.
func memBody(req *http.Request, b []byte) {
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}
