package framing

import (
	"crypto/tls"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 rapid reset (CVE-2023-44487): a client opens a stream and resets
// it at once, over and over. Each stream costs the server a request, a
// handler and whatever the handler started, while the client's
// concurrent streams stay near zero, so MaxConcurrentStreams never bites.
// Go's HTTP/2 server sends GOAWAY only when handlers pile up faster than
// they finish; a handler that notices the reset and returns at once keeps
// the connection under that bar however many streams it resets. So the
// listener counts the client's RST_STREAM frames on each HTTP/2
// connection itself, in a token bucket as nghttp2 does, and ends the
// connection with GOAWAY ENHANCE_YOUR_CALM once the bucket is empty.

// Defaults of H2ResetLimit: nghttp2's (nghttp2_option_set_stream_reset_rate_limit),
// which Envoy and Node inherit. A browser or SDK that cancels a request
// now and then never comes near them.
const (
	DefaultH2ResetBurst     = 1000
	DefaultH2ResetPerSecond = 33
)

// H2ResetLimit bounds the RST_STREAM frames a client may send on one
// HTTP/2 connection: a bucket of Burst resets, refilled at PerSecond.
// Zero fields take the defaults.
type H2ResetLimit struct {
	Burst     int
	PerSecond float64
}

func (l H2ResetLimit) withDefaults() H2ResetLimit {
	if l.Burst <= 0 {
		l.Burst = DefaultH2ResetBurst
	}
	if l.PerSecond <= 0 {
		l.PerSecond = DefaultH2ResetPerSecond
	}
	return l
}

// errTooManyResets ends a connection whose client reset too many streams.
// Returned from Read, it reaches the HTTP/2 server through its framer
// unchanged, and the server answers a ConnectionError with GOAWAY of its
// code, the last stream it processed and a graceful close: the server
// writes the frame itself, so it never lands inside another frame.
var errTooManyResets error = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)

// h2Conn is an HTTP/2 connection whose client's RST_STREAM frames are
// counted as the server reads them. Read and the bucket are used by the
// server's one reading goroutine only.
type h2Conn struct {
	net.Conn
	tc      *tls.Conn
	frames  h2Frames
	bucket  resetBucket
	err     error
	flooded func()
	now     func() time.Time
}

func newH2Conn(tc *tls.Conn, l H2ResetLimit, flooded func()) *h2Conn {
	l = l.withDefaults()
	return &h2Conn{
		Conn:    tc,
		tc:      tc,
		frames:  h2Frames{preface: len(http2.ClientPreface)},
		bucket:  resetBucket{tokens: float64(l.Burst), burst: float64(l.Burst), rate: l.PerSecond},
		flooded: flooded,
		now:     time.Now,
	}
}

// Read reads from the connection. Once the client has sent more resets
// than the bucket allows, it hands over the bytes up to that frame's
// header and then fails with errTooManyResets; nothing more of the
// client's is read, so the server opens no further stream.
func (c *h2Conn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if cut, over := c.frames.feed(p[:n], c.frame); over {
		c.err = errTooManyResets
		if c.flooded != nil {
			c.flooded()
		}
		if cut == 0 {
			return 0, c.err
		}
		return cut, nil
	}
	return n, err
}

// ConnectionState is the TLS connection's, for the requests' TLS field.
func (c *h2Conn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// frame is told each frame header; false stops the connection.
func (c *h2Conn) frame(typ http2.FrameType) bool {
	if typ != http2.FrameRSTStream {
		return true
	}
	return c.bucket.take(c.now())
}

// resetBucket is a token bucket of resets.
type resetBucket struct {
	tokens, burst, rate float64
	last                time.Time
}

func (b *resetBucket) take(now time.Time) bool {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// h2Frames follows the frame headers of a client's HTTP/2 byte stream
// (RFC 9113 §3.4 and §4.1) however it is split into reads: the
// 24-byte client preface, then 9-byte frame headers each followed by
// the payload length it declares. It does not check what it skips; the
// HTTP/2 server reading the same bytes does. The zero value expects a
// stream without the preface.
type h2Frames struct {
	preface int     // preface bytes still to skip
	hdr     [9]byte // the frame header being read
	hn      int     // bytes of hdr read
	skip    int     // payload bytes still to skip
}

// feed follows p, calling frame with the type of each frame header as it
// completes. When frame returns false, feed stops and returns the
// offset just past that header and true.
func (f *h2Frames) feed(p []byte, frame func(http2.FrameType) bool) (int, bool) {
	i := 0
	for i < len(p) {
		switch {
		case f.preface > 0:
			k := min(f.preface, len(p)-i)
			f.preface -= k
			i += k
		case f.skip > 0:
			k := min(f.skip, len(p)-i)
			f.skip -= k
			i += k
		default:
			k := copy(f.hdr[f.hn:], p[i:])
			f.hn += k
			i += k
			if f.hn < len(f.hdr) {
				continue
			}
			f.hn = 0
			f.skip = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			if !frame(http2.FrameType(f.hdr[3])) {
				return i, true
			}
		}
	}
	return len(p), false
}

// An h2Conn is what the HTTP/2 server takes: a net.Conn that reports its
// TLS state, so that requests carry it.
var (
	_ net.Conn                                           = (*h2Conn)(nil)
	_ interface{ ConnectionState() tls.ConnectionState } = (*h2Conn)(nil)
)
