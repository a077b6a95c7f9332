// Package framing follows HTTP/1.x message framing on a connection as its
// bytes are read, so that a server can refuse a request whose framing is
// ambiguous before net/http normalises it away: net/http drops
// Content-Length when a request is chunked, so a request carrying both (a
// request-smuggling attempt, RFC 9112 §6.1) cannot be recognised by a
// handler.
//
// A Listener wraps each HTTP/1 connection in a Conn whose Tracker parses
// every request head and skips every body (by Content-Length or chunk
// sizes); ConnContext and Guard tell the handler whether the head of the
// request it serves was sound, and Guard refuses it, closing the
// connection, when it was not.
package framing

import (
	"bytes"
	"sync/atomic"
)

// Reasons a head is refused.
const (
	ReasonCLAndTE      = "Content-Length and Transfer-Encoding in one request"
	ReasonManyTE       = "more than one Transfer-Encoding"
	ReasonTE           = "Transfer-Encoding other than chunked"
	ReasonTE10         = "Transfer-Encoding in an HTTP/1.0 request"
	ReasonManyCL       = "more than one Content-Length"
	ReasonCL           = "invalid Content-Length"
	ReasonFold         = "folded header line"
	ReasonHeaderSyntax = "malformed header line"
	ReasonVersion      = "unsupported HTTP version"
	// ReasonLost is given for a request the tracker did not see a head
	// for: its framing could not be followed (the connection is refused
	// rather than trusted).
	ReasonLost = "request framing could not be followed"
)

type phase uint8

const (
	phHead      phase = iota // request line and header lines
	phBody                   // Content-Length body: remain bytes left
	phChunkSize              // a chunk-size line
	phChunkData              // remain bytes of chunk data
	phChunkEnd               // the CRLF after chunk data; remain is 2 or 1
	phTrailer                // trailer lines after the last chunk
	phStopped                // a bad head, or bytes that do not parse
)

const (
	keep         = 4096 // bytes of a line kept for inspection
	maxChunkLine = 4096 // net/http's limit for a chunk-size line
)

// Tracker follows the framing of the requests in one HTTP/1.x byte stream.
// Feed it every byte read, in order, with Write; Check may be called from
// another goroutine. The zero value is ready to use. Write must not be
// called concurrently with itself.
//
// It stops at the first head it refuses (the connection is closed after
// that request) and at bytes it cannot parse: a request past that point
// is refused too, since its framing is unknown.
type Tracker struct {
	heads atomic.Int64 // heads parsed and found sound
	// whole counts the requests (from 0) whose message, head and body,
	// has been fed whole: the reader of a body it counts has every byte
	// of it, and reading it never waits for the client.
	whole  atomic.Int64
	bad    atomic.Pointer[string]
	phase  phase
	remain int64

	// the line being read
	line    []byte // its first keep bytes
	lineLen int
	tail    [16]byte // its last bytes (all of them when lineLen <= 16)

	// the head being read
	inHead   bool // past the request line
	http10   bool
	nCL, nTE int
	cl       int64
	reason   string
}

// Write feeds the next bytes of the stream. It never fails.
func (t *Tracker) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		switch t.phase {
		case phStopped:
			return n, nil
		case phBody, phChunkData:
			k := int64(len(p))
			if k > t.remain {
				k = t.remain
			}
			p = p[k:]
			t.remain -= k
			if t.remain == 0 {
				if t.phase == phBody {
					t.phase = phHead
					t.whole.Add(1)
				} else {
					t.phase, t.remain = phChunkEnd, 2
				}
			}
		case phChunkEnd:
			want := byte('\r')
			if t.remain == 1 {
				want = '\n'
			}
			if p[0] != want {
				t.stop("")
				return n, nil
			}
			p = p[1:]
			if t.remain--; t.remain == 0 {
				t.phase = phChunkSize
			}
		default: // line-oriented phases
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				t.appendLine(p)
				if t.phase == phChunkSize && t.lineLen >= maxChunkLine {
					t.stop("")
				}
				return n, nil
			}
			t.appendLine(p[:i])
			p = p[i+1:]
			t.endLine()
			t.line, t.lineLen = t.line[:0], 0
		}
	}
	return n, nil
}

// Check reports whether the head of the i-th request (from 0) on the
// connection was sound, and if not, why.
func (t *Tracker) Check(i int64) (ok bool, reason string) {
	if i < t.heads.Load() {
		return true, ""
	}
	if r := t.bad.Load(); r != nil {
		return false, *r
	}
	return false, ReasonLost
}

func (t *Tracker) appendLine(b []byte) {
	if room := keep - len(t.line); room > 0 {
		t.line = append(t.line, b[:min(room, len(b))]...)
	}
	t.lineLen += len(b)
	if len(b) >= len(t.tail) {
		copy(t.tail[:], b[len(b)-len(t.tail):])
	} else {
		copy(t.tail[:], t.tail[len(b):])
		copy(t.tail[len(t.tail)-len(b):], b)
	}
}

// end is the line's last bytes (up to 16), without a final CR.
func (t *Tracker) end() []byte {
	e := t.tail[len(t.tail)-min(t.lineLen, len(t.tail)):]
	if len(e) > 0 && e[len(e)-1] == '\r' {
		e = e[:len(e)-1]
	}
	return e
}

// stop ends tracking; a non-empty reason marks the current head bad.
func (t *Tracker) stop(reason string) {
	t.phase = phStopped
	if reason != "" {
		t.bad.Store(&reason)
	}
	t.line = nil
}

// endLine handles a complete line (its LF removed).
func (t *Tracker) endLine() {
	line := t.line
	crlf := len(line) > 0 && line[len(line)-1] == '\r' && t.lineLen <= keep
	if crlf {
		line = line[:len(line)-1]
	}
	empty := t.lineLen == 0 || (t.lineLen == 1 && crlf)
	switch t.phase {
	case phHead:
		switch {
		case !t.inHead && empty:
			// Leading empty lines: net/http skips a few after a POST
			// and refuses the request otherwise.
		case !t.inHead:
			t.requestLine()
		case empty:
			t.endHead()
		default:
			t.headerLine(line)
		}
	case phChunkSize:
		t.chunkSize(line, crlf)
	case phTrailer:
		switch {
		case empty:
			t.phase = phHead
			t.whole.Add(1)
		case line[0] == ' ' || line[0] == '\t':
			t.stop("")
		}
	}
}

func (t *Tracker) requestLine() {
	t.inHead, t.nCL, t.nTE, t.cl, t.reason = true, 0, 0, 0, ""
	e := t.end()
	switch {
	case bytes.HasSuffix(e, []byte(" HTTP/1.1")):
		t.http10 = false
	case bytes.HasSuffix(e, []byte(" HTTP/1.0")):
		t.http10 = true
	default:
		t.reason = ReasonVersion
	}
	if bytes.IndexByte(t.line[:min(len(t.line), t.lineLen-1)], '\r') >= 0 && t.lineLen > 1 {
		t.reason = ReasonHeaderSyntax
	}
}

func (t *Tracker) headerLine(line []byte) {
	if t.reason != "" {
		return
	}
	if line[0] == ' ' || line[0] == '\t' {
		t.reason = ReasonFold
		return
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		t.reason = ReasonHeaderSyntax
		return
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		if t.lineLen <= keep {
			t.reason = ReasonHeaderSyntax
			return
		}
		colon = len(line) // a long name: not one of ours
	}
	name := line[:colon]
	if colon == 0 {
		t.reason = ReasonHeaderSyntax
		return
	}
	for _, c := range name {
		if !isToken(c) {
			t.reason = ReasonHeaderSyntax
			return
		}
	}
	isCL := len(name) == 14 && equalFold(name, "content-length")
	isTE := len(name) == 17 && equalFold(name, "transfer-encoding")
	if !isCL && !isTE {
		return
	}
	if t.lineLen > keep {
		t.reason = ReasonHeaderSyntax
		return
	}
	v := trimOWS(line[colon+1:])
	if isTE {
		if t.nTE++; t.nTE > 1 {
			t.reason = ReasonManyTE
		} else if !equalFold(v, "chunked") {
			t.reason = ReasonTE
		}
		return
	}
	if t.nCL++; t.nCL > 1 {
		t.reason = ReasonManyCL
		return
	}
	n, ok := parseDecimal(v)
	if !ok {
		t.reason = ReasonCL
	}
	t.cl = n
}

func (t *Tracker) endHead() {
	t.inHead = false
	switch {
	case t.reason != "":
	case t.nCL > 0 && t.nTE > 0:
		t.reason = ReasonCLAndTE
	case t.nTE > 0 && t.http10:
		t.reason = ReasonTE10
	}
	if t.reason != "" {
		t.stop(t.reason)
		return
	}
	t.heads.Add(1)
	switch {
	case t.nTE > 0:
		t.phase = phChunkSize
	case t.cl > 0:
		t.phase, t.remain = phBody, t.cl
	default:
		t.whole.Add(1) // no body
	}
}

// Whole reports whether the i-th request's message (from 0), its body
// included, has been fed whole. It may be called from another goroutine.
func (t *Tracker) Whole(i int64) bool { return i < t.whole.Load() }

// chunkSize parses a chunk-size line as net/http does: CRLF only, trailing
// whitespace trimmed, extensions ignored, 1 to 16 hex digits.
func (t *Tracker) chunkSize(line []byte, crlf bool) {
	if !crlf || bytes.IndexByte(line, '\r') >= 0 {
		t.stop("")
		return
	}
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	if len(line) == 0 || len(line) > 16 {
		t.stop("")
		return
	}
	var n uint64
	for _, c := range line {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			t.stop("")
			return
		}
		n = n<<4 | uint64(c)
	}
	if n == 0 {
		t.phase = phTrailer
		return
	}
	if n > 1<<62 {
		t.stop("")
		return
	}
	t.phase, t.remain = phChunkData, int64(n)
}

func parseDecimal(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold compares b with the lower-case ASCII string s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// isToken reports whether c may appear in a header name (RFC 9110 tchar).
func isToken(c byte) bool {
	if c >= 0x80 || c <= ' ' || c == 0x7f {
		return false
	}
	return bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) < 0
}
