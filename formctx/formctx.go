// Package formctx finds the context identifier in a multipart/form-data
// upload while keeping the body forwardable byte for byte.
//
// The gateway calls Read on POST /sync once the API key is accepted. Read
// parses the multipart stream only as far as the first context part (form
// field contextId or contextID, matched case-insensitively), holding what it
// read in a pooled memory buffer that spills to an unlinked temp file. It
// returns a *Body that replays those bytes and then streams the rest of the
// client body through unbuffered, still parsing it: a later context part
// with a different value, a truncated or malformed multipart stream, or a
// body over the cap makes Body.Read fail with an *Error instead of io.EOF.
// Body never hands out the last byte it has read before it knows the body is
// good, so an upstream never receives a complete request that failed a check.
//
// Parsing uses mime/multipart's NextRawPart, so parts are not
// transfer-decoded. A preamble or a part's header block longer than about
// 16 KiB is treated as malformed, which bounds the memory the parser holds
// per request. A first context part with an empty value counts as missing.
//
// Body does its parsing in the goroutine that calls Read; the package starts
// no goroutines, so nothing can leak when a Body is abandoned half-read.
package formctx

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
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
	MaxBytes int64 `yaml:"max_bytes"`
	// MemoryBytes is how much of the prefix read before the context part is
	// held in memory; the rest spills into a temp file. Default 256 KiB.
	MemoryBytes int `yaml:"memory_bytes"`
	// TempDir is where spill files are created (and unlinked at once).
	// Default os.TempDir().
	TempDir string `yaml:"temp_dir"`
	// MaxFieldBytes caps the value of a context part; a longer value is a
	// malformed body. Default 1024.
	MaxFieldBytes int `yaml:"max_field_bytes"`
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
)

// errClosed is returned by Read after Close.
var errClosed = errors.New("formctx: read on closed Body")

// Sizes of the pooled buffers. stepLimit bounds the raw bytes one parser
// call may pull from the client (a part's headers, the preamble); it must
// leave room in pendSize for the one held-back byte.
const (
	pendSize    = 32 << 10
	scratchSize = 4 << 10
	stepLimit   = 16 << 10
)

// buffers is what a Body borrows from bufPool for its lifetime.
type buffers struct {
	pend    [pendSize]byte
	scratch [scratchSize]byte
	val     [128]byte
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

	ctx      string
	maxField int

	src      source
	mr       *multipart.Reader
	spool    spool
	spoolLen int64 // total bytes held in the spool (the prefix)
	replayed int64 // bytes of the spool handed out

	bufs     *buffers
	pend     pend
	part     *multipart.Part
	partCtx  bool
	val      []byte
	epilogue bool // the closing boundary has been parsed
	empty    int  // consecutive empty reads in the epilogue
	done     bool // the client body ended and everything checked out
	err      error
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
	b := &Body{maxField: cfg.MaxFieldBytes}
	b.bufs = bufPool.Get().(*buffers)
	b.val = b.bufs.val[:0]
	b.spool.init(cfg.MemoryBytes, cfg.TempDir)
	b.src = source{r: body, max: cfg.MaxBytes, sink: &b.spool}
	b.mr = multipart.NewReader(&b.src, boundary)
	if err := b.findContext(); err != nil {
		b.release()
		return nil, err
	}
	if err := b.spool.flush(); err != nil {
		b.release()
		return nil, fmt.Errorf("formctx: spooling body: %w", err)
	}
	b.spoolLen = b.spool.len()
	b.pend.buf = b.bufs.pend[:]
	b.src.sink = &b.pend
	return b, nil
}

// formBoundary returns the boundary of a multipart/form-data content type.
func formBoundary(contentType string) (string, bool) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" {
		return "", false
	}
	boundary := params["boundary"]
	if boundary == "" || len(boundary) > maxBoundaryLen {
		return "", false
	}
	return boundary, true
}

// isContextName reports whether a form field name is a context field.
func isContextName(name string) bool {
	return len(name) == len("contextid") && strings.EqualFold(name, "contextid")
}

// findContext parses parts until the first context part and records its
// value. Every byte it pulls from the client lands in the spool.
func (b *Body) findContext() error {
	for {
		b.src.step = 0
		part, err := b.mr.NextRawPart()
		if err == io.EOF {
			return ErrMissingContext
		}
		if err != nil {
			return b.classify()
		}
		isCtx := isContextName(part.FormName())
		b.val = b.val[:0]
		for {
			b.src.step = 0
			n, err := part.Read(b.bufs.scratch[:])
			if isCtx {
				if len(b.val)+n > b.maxField {
					return ErrMalformed
				}
				b.val = append(b.val, b.bufs.scratch[:n]...)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return b.classify()
			}
		}
		if isCtx {
			if len(b.val) == 0 {
				return ErrMissingContext
			}
			b.ctx = string(b.val)
			return nil
		}
	}
}

// classify turns a parser error into what Read reports.
func (b *Body) classify() error {
	switch e := b.src.err; {
	case e == nil, errors.Is(e, io.EOF), errors.Is(e, errStep):
	case errors.Is(e, errTooLarge):
		return ErrTooLarge
	case b.src.sinkFailed:
		return fmt.Errorf("formctx: spooling body: %w", e)
	default:
		var mbe *http.MaxBytesError
		if errors.As(e, &mbe) {
			return ErrTooLarge
		}
		return fmt.Errorf("formctx: reading body: %w", e)
	}
	return ErrMalformed
}

// Context returns the value of the first context part.
func (b *Body) Context() string { return b.ctx }

// Spilled reports whether the prefix read before the context part went
// (partly) to a temp file.
func (b *Body) Spilled() bool { return b.spool.spilled }

// PrefixBytes returns how many bytes Read consumed before it found the
// context part (they include read-ahead past it).
func (b *Body) PrefixBytes() int64 { return b.spoolLen }

// Read reads the body: first the bytes Read consumed, then the rest of the
// client body. It returns io.EOF only once the client body has ended with a
// complete multipart stream whose context parts all agree; otherwise it
// returns an *Error (or the client's read error) and holds back at least
// the last byte read, so the forwarded request is never complete.
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
	b.mr, b.part, b.src.r, b.src.sink = nil, nil, nil, nil
	b.pend = pend{}
	b.val = nil
	if b.bufs != nil {
		bufPool.Put(b.bufs)
		b.bufs = nil
	}
}

func (b *Body) fail(err error) {
	b.err = err
	b.releaseStream()
}

func (b *Body) read(p []byte) (int, error) {
	for {
		if b.err != nil {
			return 0, b.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		spoolLeft := b.spoolLen - b.replayed
		avail := spoolLeft + int64(b.pend.end-b.pend.start)
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
					return n, b.err
				}
				if b.replayed == b.spoolLen {
					b.spool.release()
				}
				return n, nil
			}
			n := copy(p, b.pend.buf[b.pend.start:b.pend.end])
			b.pend.start += n
			return n, nil
		}
		if b.done {
			b.releaseStream()
			return 0, io.EOF
		}
		b.step()
	}
}

// step advances the parser by one call, which pulls at most stepLimit bytes
// from the client into pend.
func (b *Body) step() {
	b.pend.compact()
	b.src.step = 0
	switch {
	case b.epilogue:
		n, err := b.src.readRaw(b.pend.buf[b.pend.end:])
		b.pend.end += n
		switch {
		case errors.Is(err, io.EOF):
			b.done = true
		case err != nil:
			b.fail(b.classify())
		case n == 0:
			if b.empty++; b.empty >= 100 {
				b.fail(fmt.Errorf("formctx: reading body: %w", io.ErrNoProgress))
			}
		default:
			b.empty = 0
		}
	case b.part == nil:
		part, err := b.mr.NextRawPart()
		if err == io.EOF {
			b.epilogue = true
			b.mr = nil
			return
		}
		if err != nil {
			b.fail(b.classify())
			return
		}
		b.part = part
		b.partCtx = isContextName(part.FormName())
		b.val = b.val[:0]
	default:
		n, err := b.part.Read(b.bufs.scratch[:])
		if b.partCtx {
			if len(b.val)+n > b.maxField {
				b.fail(ErrMalformed)
				return
			}
			b.val = append(b.val, b.bufs.scratch[:n]...)
		}
		if errors.Is(err, io.EOF) {
			if b.partCtx && string(b.val) != b.ctx {
				b.fail(ErrConflictContext)
				return
			}
			b.part = nil
			return
		}
		if err != nil {
			b.fail(b.classify())
		}
	}
}
