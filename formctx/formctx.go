// Package formctx finds the context identifier in a multipart/form-data
// upload while keeping the body forwardable byte for byte.
//
// The gateway calls Read on POST /sync once the API key is accepted. Read
// parses the multipart stream only as far as the end of the first context
// part, holding what it read in a pooled memory buffer that spills to an
// unlinked temp file. It returns a *Body that replays those bytes and then
// streams the rest of the client body in large reads, still parsing it: a
// later context part with a different value, a part that breaks a rule
// below, a truncated stream or a body over the cap makes Body.Read fail
// with an *Error instead of io.EOF. Body never hands out the last byte it
// has read before it knows the whole body is good, so an upstream never
// receives a complete request that failed a check.
//
// # What is accepted
//
// The point is that every multipart parser an upstream may use (Go's
// ParseMultipartForm, werkzeug, busboy, PHP) reads the same context from
// the bytes keygate checked, or none. So formctx accepts one canonical
// grammar and refuses (400) anything outside it where parsers are known or
// suspected to differ:
//
//   - The request Content-Type is multipart/form-data (any letter case) with
//     exactly one parameter named "boundary", in lower case (PHP takes the
//     first "boundary" anywhere in the header), plain or quoted, and no
//     other parameter but a charset of utf-8 or us-ascii. The boundary is 1 to 70 RFC 2046 bchars
//     and does not end in a space. Otherwise ErrNotMultipart.
//   - Line ends are CRLF. The first delimiter is "--boundary" CRLF at the
//     start of the body or after a preamble that ends in CRLF and holds no
//     "--boundary" anywhere (werkzeug finds a delimiter mid-line there); the
//     preamble and each part's header block are at most 16 KiB.
//   - Every later "--boundary" in the body either follows CRLF and is
//     followed by CRLF (next part) or "--" (the end), or follows a byte that
//     is neither CR nor LF (then it is data to every parser). A boundary
//     after a bare LF or CR, one followed by anything else (transport
//     padding, a longer line: PHP matches prefixes), one directly after a
//     part's header block, or one in a header block or in the epilogue is
//     ErrDelimiter. After "--boundary--" comes CRLF and an epilogue, or the
//     end of the body.
//   - Part header lines are `token ":" value` ending in CRLF: no folded
//     lines, no space before the colon, no control characters but HTAB in
//     the value. Content-Disposition appears at most once (ErrDisposition),
//     Content-Type and Content-Transfer-Encoding at most once
//     (ErrPartHeader); a part's Content-Type (type/subtype) and
//     Content-Transfer-Encoding (a token) follow the parameter grammar
//     below, else ErrPartHeader.
//   - Every part has a Content-Disposition (RFC 7578, section 4.2): a part
//     without one, or with no header lines at all, is ErrDisposition.
//     werkzeug refuses the first and reads the body of the second as its
//     header block, so either could hide a context part from keygate.
//   - A Content-Disposition is `form-data` (any letter case) followed by
//     `;` OWS token "=" (token or quoted-string) parameters: no backslash in
//     quoted strings, no whitespace around "=" or before ";", no trailing
//     ";", no repeated parameter (ASCII case-insensitive), at most 8.
//     Anything else, or another disposition type, is ErrDisposition.
//   - Every part has a name parameter, printable ASCII without spaces,
//     backslashes, percent signs, quotes, ";", "=" or ","; RFC 8187 and
//     RFC 2231 names (name*=, name*0=...; Go and werkzeug decode them,
//     busboy ignores them) and names "contextid[..." (PHP reads them as
//     contextId) are refused: ErrFieldName.
//   - A part is a context part when its name is "contextid" ASCII
//     case-insensitively (contextId, contextID, ...). A context part has no
//     filename, a Content-Type that is absent or text/plain with at most a
//     charset of utf-8 or us-ascii, and a Content-Transfer-Encoding that is
//     absent, 7bit, 8bit or binary (ErrContextPart). Its value is 1 to
//     MaxFieldBytes bytes of printable ASCII without spaces
//     (ErrContextValue; empty is ErrMissingContext).
//   - The first context part decides; every later one must be byte-equal
//     to it (ErrConflictContext).
//   - A Content-Type of multipart/* on a part (nested multipart) is refused.
//
// Compare a context with a credential's using EqualContext, which folds
// ASCII letters only.
//
// Parts are not transfer-decoded: the body is forwarded as it came. After
// the context part, the rest is scanned for the boundary as it streams
// (bytes.IndexByte on a byte of the boundary that is rare in the data, or
// else a backward DAWG match on the boundary's last 64 bytes, which reads
// a byte or two of every boundary's length of file data) and handed out in
// reads as large as the caller's buffer.
//
// Body does its parsing in the goroutine that calls Read; the package starts
// no goroutines, so nothing can leak when a Body is abandoned half-read.
package formctx

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
)

// Config says how much of a body Read may hold and where.
//
// The zero value is not valid: MaxBytes is required. Zero values of the
// other fields select their defaults (see DefaultConfig).
type Config struct {
	// MaxBytes caps the whole body, the part read before the context is
	// found and the part streamed after it together. A longer body fails
	// with a 413 *Error. Required (> 0).
	MaxBytes int64
	// MemoryBytes is how much of the prefix read before the context part is
	// held in memory; the rest spills into a temp file. Default 256 KiB.
	MemoryBytes int
	// TempDir is where spill files are created (and unlinked at once).
	// Default os.TempDir().
	TempDir string
	// MaxFieldBytes caps the value of a context part; a longer value is a
	// malformed body. Default 1024.
	MaxFieldBytes int
}

const (
	// DefaultMaxBytes is MaxBytes in DefaultConfig.
	DefaultMaxBytes = 100 << 20
	// DefaultMemoryBytes is the default for MemoryBytes.
	DefaultMemoryBytes = 256 << 10
	// DefaultMaxFieldBytes is the default for MaxFieldBytes.
	DefaultMaxFieldBytes = 1024

	maxFieldBytesLimit = 64 << 10
	maxBoundaryLen     = 70 // RFC 2046, section 5.1.1
	yamlPrefix         = "body."
)

// DefaultConfig returns a Config with every field at its default and
// MaxBytes at DefaultMaxBytes.
func DefaultConfig() Config {
	return Config{
		MaxBytes:      DefaultMaxBytes,
		MemoryBytes:   DefaultMemoryBytes,
		TempDir:       os.TempDir(),
		MaxFieldBytes: DefaultMaxFieldBytes,
	}
}

// Validate reports the first invalid field, named by its YAML path under
// "body" (for example "body.max_bytes: must be > 0, got 0"). A set TempDir
// must be an existing directory.
func (c Config) Validate() error {
	if c.MaxBytes <= 0 {
		return fmt.Errorf("%smax_bytes: must be > 0, got %d", yamlPrefix, c.MaxBytes)
	}
	if c.MemoryBytes < 0 {
		return fmt.Errorf("%smemory_bytes: must be >= 0 (0 selects %d), got %d", yamlPrefix, DefaultMemoryBytes, c.MemoryBytes)
	}
	if c.MaxFieldBytes < 0 || c.MaxFieldBytes > maxFieldBytesLimit {
		return fmt.Errorf("%smax_field_bytes: must be between 0 (selects %d) and %d, got %d", yamlPrefix, DefaultMaxFieldBytes, maxFieldBytesLimit, c.MaxFieldBytes)
	}
	if c.TempDir != "" {
		fi, err := os.Stat(c.TempDir)
		if err != nil {
			return fmt.Errorf("%stemp_dir: %w", yamlPrefix, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%stemp_dir: %q is not a directory", yamlPrefix, c.TempDir)
		}
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxBytes <= 0 {
		return c, fmt.Errorf("formctx: %smax_bytes: must be > 0, got %d", yamlPrefix, c.MaxBytes)
	}
	if c.MemoryBytes <= 0 {
		c.MemoryBytes = DefaultMemoryBytes
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.MaxFieldBytes <= 0 {
		c.MaxFieldBytes = DefaultMaxFieldBytes
	}
	if c.MaxFieldBytes > maxFieldBytesLimit {
		c.MaxFieldBytes = maxFieldBytesLimit
	}
	return c, nil
}

// Error is a refusal of the request body, to be answered with Status and
// Message. Message is written for API clients and never quotes the body.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// The refusals Read and Body.Read return. They are returned as is, so
// errors.Is and == both work; do not modify them.
var (
	ErrNotMultipart    = &Error{Status: http.StatusBadRequest, Message: "request body must be multipart/form-data"}
	ErrMissingContext  = &Error{Status: http.StatusBadRequest, Message: "missing contextId form field"}
	ErrConflictContext = &Error{Status: http.StatusBadRequest, Message: "conflicting contextId and contextID form fields"}
	ErrMalformed       = &Error{Status: http.StatusBadRequest, Message: "malformed multipart body"}
	ErrTooLarge        = &Error{Status: http.StatusRequestEntityTooLarge, Message: "request body too large"}

	// ErrDelimiter: a boundary line that is not exactly "--boundary" CRLF
	// (or "--boundary--"), a boundary after a bare LF or CR, the boundary
	// inside the preamble, the part headers or the epilogue, or bytes other
	// than CRLF after the closing boundary.
	ErrDelimiter = &Error{Status: http.StatusBadRequest, Message: "malformed multipart body: boundary lines must be exactly --boundary with CRLF line ends, and the boundary must not occur elsewhere"}
	// ErrPartHeader: a part header that is not `token ":" value` on one
	// CRLF-terminated line, a repeated Content-Type or
	// Content-Transfer-Encoding, an unparsable or multipart Content-Type.
	ErrPartHeader = &Error{Status: http.StatusBadRequest, Message: "malformed multipart body: part headers must be well-formed and not repeated"}
	// ErrDisposition: a Content-Disposition that does not parse, appears
	// twice in a part, or is not form-data.
	ErrDisposition = &Error{Status: http.StatusBadRequest, Message: "malformed multipart body: each part may have one Content-Disposition, and it must be a well-formed form-data"}
	// ErrFieldName: a field name parsers may read differently.
	ErrFieldName = &Error{Status: http.StatusBadRequest, Message: "ambiguous multipart field name: every part needs a name of printable ASCII without spaces, backslashes or percent signs, and name* is not accepted"}
	// ErrContextPart: a context part with a filename, a Content-Type other
	// than text/plain (charset utf-8 or us-ascii), or a transfer encoding.
	ErrContextPart = &Error{Status: http.StatusBadRequest, Message: "the contextId part must be a plain field: no filename, Content-Type text/plain with charset utf-8 or us-ascii at most, no Content-Transfer-Encoding but 7bit, 8bit or binary"}
	// ErrContextValue: a context value that is not printable ASCII.
	ErrContextValue = &Error{Status: http.StatusBadRequest, Message: "contextId must be printable ASCII without spaces"}
)

// errClosed is returned by Read after Close.
var errClosed = errors.New("formctx: read on closed Body")

// Sizes. The window holds what is read from the client until it is parsed
// and handed out; a part's header block and the preamble must fit in
// maxHeadBytes, which leaves room in the window for large reads.
const (
	winSize      = 64 << 10
	minRead      = 32 << 10
	maxHeadBytes = 16 << 10
)

// buffers is what a Body borrows from bufPool for its lifetime.
type buffers struct {
	win   [winSize]byte
	val   [128]byte
	masks [256]uint64
}

var bufPool = sync.Pool{New: func() any { return new(buffers) }}

// Body is a request body whose context part has been found. It replays the
// bytes Read consumed and then streams the rest of the client body, failing
// with an *Error where the rest turns out to be bad.
//
// The zero value is not usable; get a Body from Read. Read must not be
// called from several goroutines at once, but Close may be called
// concurrently with Read (as http.Transport does).
type Body struct {
	mu       sync.Mutex
	closed   atomic.Bool
	released bool

	src       source
	eof       bool // src has returned io.EOF
	empty     int  // consecutive empty reads from src
	spool     spool
	streamed  bool  // Read has returned: new bytes no longer go to the spool
	spoolLen  int64 // total bytes held in the spool (the prefix but what the window still held)
	prefixLen int64 // bytes read before Read returned
	replayed  int64 // bytes of the spool handed out
	start     int   // p.win[start:p.end] is read but not handed out

	bufs        *buffers
	p           parser
	done        bool                  // the client body ended and everything checked out
	directReads int32                 // reads that went straight into the caller's buffer (for tests)
	err         atomic.Pointer[error] // what ended the body (fail), for Read and Err
}

// Read reads body up to and including the first context part and returns a
// Body that yields all of body. contentType is the request's Content-Type.
//
// On success the Body must be closed. On error nothing needs closing; the
// error is an *Error for a bad request body, and otherwise a failure to read
// the client body or to spool it. Read does not close body.
func Read(body io.Reader, contentType string, cfg Config) (*Body, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	boundary, ok := formBoundary(contentType)
	if !ok {
		return nil, ErrNotMultipart
	}
	if body == nil {
		body = http.NoBody
	}
	b := &Body{}
	b.bufs = bufPool.Get().(*buffers)
	b.p.init(boundary, b.bufs.win[:], b.bufs.val[:0], cfg.MaxFieldBytes, &b.bufs.masks)
	b.spool.init(cfg.MemoryBytes, cfg.TempDir)
	b.src = source{r: body, max: cfg.MaxBytes}
	if err := b.findContext(); err != nil {
		b.release()
		return nil, err
	}
	if err := b.spool.flush(); err != nil {
		b.release()
		return nil, fmt.Errorf("formctx: spooling body: %w", err)
	}
	b.spoolLen = b.spool.len()
	b.prefixLen = b.spoolLen + int64(b.p.end)
	b.streamed = true
	b.start = 0 // the window holds the rest of the prefix, not spooled
	return b, nil
}

// findContext reads and parses until the first context part has ended.
// Every byte it reads is kept: in the window, or in the spool once the
// window has to make room (see makeRoom). A body whose context part comes
// within the first window's worth, as most do, is never copied to the
// spool: Body.Read hands the window out as it is.
func (b *Body) findContext() error {
	for {
		if err := b.p.parse(b.eof); err != nil {
			return err
		}
		if b.p.ctx != "" {
			return nil
		}
		if b.eof {
			return ErrMalformed // parse with eof set ends in an error or done
		}
		if err := b.fill(); err != nil {
			return err
		}
	}
}

// fill reads once from the client into the window, after making room.
func (b *Body) fill() error {
	p := &b.p
	if err := b.makeRoom(); err != nil {
		return err
	}
	if p.end == len(p.win) {
		return ErrMalformed // cannot happen: maxHeadBytes leaves room
	}
	n, err := b.src.read(p.win[p.end:])
	p.end += n
	return b.readResult(n, err)
}

// makeRoom compacts the window when less than minRead is free, keeping
// what is not handed out yet and the two bytes before pos, which tell what
// precedes a boundary. Before Read returns (the prefix), the bytes it
// drops go to the spool first: the window's first byte is always the
// first one not spooled.
func (b *Body) makeRoom() error {
	p := &b.p
	keep := p.pos - 2
	if b.streamed {
		keep = min(keep, b.start)
	}
	if keep > 0 && len(p.win)-p.end < minRead {
		if !b.streamed {
			if _, err := b.spool.Write(p.win[:keep]); err != nil {
				return fmt.Errorf("formctx: spooling body: %w", err)
			}
		}
		p.compact(keep)
		if b.streamed {
			b.start -= keep
		}
	}
	return nil
}

// readResult records the outcome of a read of n bytes from the client.
func (b *Body) readResult(n int, err error) error {
	switch {
	case err == nil && n == 0:
		if b.empty++; b.empty >= 100 {
			return fmt.Errorf("formctx: reading body: %w", io.ErrNoProgress)
		}
	case err == nil:
		b.empty = 0
	case errors.Is(err, io.EOF):
		b.eof = true
	default:
		return classify(err)
	}
	return nil
}

// classify turns a client read error into what Read reports.
func classify(err error) error {
	var mbe *http.MaxBytesError
	if errors.Is(err, errTooLarge) || errors.As(err, &mbe) {
		return ErrTooLarge
	}
	return fmt.Errorf("formctx: reading body: %w", err)
}

// Context returns the value of the first context part.
func (b *Body) Context() string { return b.p.ctx }

// Spilled reports whether the prefix read before the context part went
// (partly) to a temp file.
func (b *Body) Spilled() bool { return b.spool.spilled }

// PrefixBytes returns how many bytes Read consumed before it found the
// context part (they include read-ahead past it).
func (b *Body) PrefixBytes() int64 { return b.prefixLen }

// Read reads the body: first the bytes Read consumed, then the rest of the
// client body. It returns io.EOF only once the client body has ended with a
// complete multipart stream that passed every check; otherwise it returns
// an *Error (or the client's read error) and holds back at least the last
// byte read, so the forwarded request is never complete.
func (b *Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer func() {
		b.mu.Unlock()
		if b.closed.Load() && b.mu.TryLock() {
			b.release()
			b.mu.Unlock()
		}
	}()
	if b.closed.Load() {
		return 0, errClosed
	}
	return b.read(p)
}

// Close releases the spool (memory buffers back to the pool, temp file
// closed, which deletes it as it is already unlinked) and the streaming
// buffers. It does not close the client body: that is the caller's job, as
// is ending a Read blocked on a stalled client (closing the client body or
// letting the HTTP server do so). If a Read is in progress, Close returns at
// once and the buffers are released when that Read returns. Reads after
// Close fail. Close always returns nil and may be called more than once.
func (b *Body) Close() error {
	b.closed.Store(true)
	if b.mu.TryLock() {
		b.release()
		b.mu.Unlock()
	}
	return nil
}

// release returns everything borrowed. b.mu must be held, or b not shared.
func (b *Body) release() {
	if b.released {
		return
	}
	b.released = true
	b.spool.release()
	b.releaseStream()
}

// releaseStream drops the parser and returns the streaming buffers.
func (b *Body) releaseStream() {
	b.src.r = nil
	b.p.win, b.p.val, b.p.masks = nil, nil, nil
	b.p.pos, b.p.end, b.start = 0, 0, 0
	if b.bufs != nil {
		bufPool.Put(b.bufs)
		b.bufs = nil
	}
}

func (b *Body) fail(err error) {
	b.err.Store(&err)
	b.releaseStream()
}

// Err returns the error that ended the body: what Read returned in place
// of io.EOF (an *Error, or the client's read error), or nil while the body
// streams and once it ended well. Unlike Read it may be called from any
// goroutine at any time, so a proxy whose transport gave up on the body
// can tell a failed check from a failed upstream.
func (b *Body) Err() error {
	if err := b.err.Load(); err != nil {
		return *err
	}
	return nil
}

func (b *Body) read(p []byte) (int, error) {
	for {
		if err := b.Err(); err != nil {
			return 0, err
		}
		if len(p) == 0 {
			return 0, nil
		}
		spoolLeft := b.spoolLen - b.replayed
		avail := spoolLeft + int64(b.p.end-b.start)
		if !b.done {
			avail-- // the last byte read waits for the verdict
		}
		if avail > 0 {
			if int64(len(p)) > avail {
				p = p[:avail]
			}
			if spoolLeft > 0 {
				if int64(len(p)) > spoolLeft {
					p = p[:spoolLeft]
				}
				n, err := b.spool.readAt(p, b.replayed)
				b.replayed += int64(n)
				if err != nil {
					b.fail(fmt.Errorf("formctx: replaying spooled body: %w", err))
					return n, b.Err()
				}
				if b.replayed == b.spoolLen {
					b.spool.release()
				}
				return n, nil
			}
			n := copy(p, b.p.win[b.start:b.p.end])
			b.start += n
			return n, nil
		}
		if b.done {
			b.releaseStream()
			return 0, io.EOF
		}
		if n, ok := b.direct(p); ok {
			if n > 0 {
				return n, nil
			}
			continue
		}
		b.step()
	}
}

// directMin is the smallest Read buffer that direct reads the client into.
const directMin = 4 << 10

// direct is step for the common case of a large file streaming through:
// the parser is in the data of a part that is not a context part, and
// everything read is handed out but the held-back byte. It reads the
// client straight into p, after that byte, instead of into the window. If
// the bytes read hold no whole "--boundary" (with what the parser has not
// looked at yet before them), they are handed out from p as they are,
// less the last, which becomes the held-back byte: only the parser's tail
// is copied into the window, not the data. Otherwise, and on any read
// error or end, they are appended to the window and parsed, as step would
// have read and parsed them, and direct returns 0, true. It returns 0,
// false when it does not apply.
func (b *Body) direct(p []byte) (int, bool) {
	pp := &b.p
	m := len(pp.dash)
	if len(p) < directMin || b.eof || pp.st != stData || pp.isCtx || b.spoolLen != b.replayed ||
		b.start != pp.end-1 || pp.end-pp.pos > m-1 || pp.pos < 2 {
		return 0, false
	}
	if err := b.makeRoom(); err != nil { // streaming: it spools nothing, cannot fail
		b.fail(err)
		return 0, true
	}
	k := min(len(p)-1, len(pp.win)-pp.end) // what does not fit the window is not read
	if k < 2*m+2 {
		return 0, false
	}
	held := pp.win[b.start]
	n, err := b.src.read(p[1 : 1+k])
	got := p[1 : 1+n]
	if err == nil && n >= m+1 && !pp.dashBefore(got) {
		p[0] = held
		pp.partData += int64(pp.end - pp.pos + n - (m - 1)) // all but the last m-1 bytes are parsed
		pp.base += int64(pp.end + n - (m + 1))
		pp.end = copy(pp.win, got[n-(m+1):]) // two bytes before pos, then the m-1 unparsed
		pp.pos = 2
		b.start = pp.end - 1
		b.empty = 0
		b.directReads++
		return n, true
	}
	pp.end += copy(pp.win[pp.end:], got)
	if err := b.readResult(n, err); err != nil {
		b.fail(err)
		return 0, true
	}
	b.parse()
	return 0, true
}

// step reads once from the client (unless it has ended) and parses what
// it can.
func (b *Body) step() {
	if !b.eof {
		if err := b.fill(); err != nil {
			b.fail(err)
			return
		}
	}
	b.parse()
}

// parse parses what the window holds, after a read.
func (b *Body) parse() {
	if err := b.p.parse(b.eof); err != nil {
		b.fail(err)
		return
	}
	if b.p.st == stDone {
		b.done = true
	} else if b.eof {
		b.fail(ErrMalformed) // cannot happen: parse with eof ends in an error or done
	}
}
