package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"
)

// UpstreamConfig is one backend: where it is and how long to wait for it.
type UpstreamConfig struct {
	// Targets are base URLs (scheme://host:port, no path) of equivalent
	// instances, load-balanced round-robin. At least one.
	Targets []string
	// Timeout is how long to wait for the upstream's response headers once
	// the request is sent; past it the client gets 504. Default 60s.
	Timeout time.Duration
	// DialTimeout bounds connecting to a target. Default 2s.
	DialTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool per target. Default
	// DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// IdleTimeout is how long a kept connection may stay idle before
	// keygate closes it. Default 90s, http.DefaultTransport's.
	IdleTimeout time.Duration
}

// UpstreamsConfig names the two backends of the spec.
type UpstreamsConfig struct {
	Extraction UpstreamConfig
	Registry   UpstreamConfig
}

// withDefaults fills the zero fields.
func (c UpstreamConfig) withDefaults() UpstreamConfig {
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return c
}

// DefaultMaxIdleConnsPerHost is the default keep-alive pool per target:
// Kong's default upstream pool. A request that finds no idle connection
// dials a new one, and one that ends with the pool full closes its
// connection, so a pool smaller than the requests in flight dials and
// closes a connection for every request past it: HTTP/2 clients, with
// many streams per connection, reach that at once (h2load -c32 -m10, 320
// in flight, dialed on 8% of keygate's CPU with a pool of 64). An idle
// connection keeps its buffers (88 KiB on the direct path), so a pool
// that a burst filled holds up to 44 MiB per target until its
// connections have been idle for the idle timeout.
const DefaultMaxIdleConnsPerHost = 512

// DefaultIdleTimeout is how long a kept upstream connection may stay idle
// by default: http.DefaultTransport's IdleConnTimeout.
const DefaultIdleTimeout = 90 * time.Second

// Validate checks one upstream; path is its YAML path for messages.
func (c UpstreamConfig) Validate(path string) error {
	if len(c.Targets) == 0 {
		return fmt.Errorf("%s.targets: at least one target is required", path)
	}
	for i, t := range c.Targets {
		if _, err := parseTarget(t); err != nil {
			return fmt.Errorf("%s.targets[%d]: %w", path, i, err)
		}
	}
	if c.Timeout < 0 || c.DialTimeout < 0 || c.MaxIdleConnsPerHost < 0 || c.IdleTimeout < 0 {
		return fmt.Errorf("%s: timeouts and pool sizes must not be negative", path)
	}
	return nil
}

// Validate checks both upstreams.
func (c UpstreamsConfig) Validate() error {
	if err := c.Extraction.Validate("extraction"); err != nil {
		return err
	}
	return c.Registry.Validate("registry")
}

func parseTarget(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: host is missing", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("%q: must be scheme://host:port with no path, query or credentials", s)
	}
	u.Path = ""
	return u, nil
}

// upstream is a set of equivalent targets. Safe for concurrent use.
type upstream struct {
	name      string
	targets   []*target
	next      atomic.Uint64
	transport *retryTransport
	direct    *directTransport // transport's, for close
	latency   atomic.Pointer[upstreamObserver]
	// closed is set by close: requests sent after it leave no
	// connection behind.
	closed atomic.Bool
}

type target struct {
	url       *url.URL
	downUntil atomic.Int64 // unix nanos; a target that refused a connection is skipped until then
}

// markDownFor is how long a target that refused a connection is skipped.
const markDownFor = 2 * time.Second

func newUpstream(name string, c UpstreamConfig) (*upstream, error) {
	c = c.withDefaults()
	u := &upstream{name: name}
	for _, s := range c.Targets {
		tu, err := parseTarget(s)
		if err != nil {
			return nil, err
		}
		u.targets = append(u.targets, &target{url: tu})
	}
	if len(u.targets) == 0 {
		return nil, errors.New("no targets")
	}
	dialer := &net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second}
	std := &http.Transport{
		Proxy:       nil, // never route upstream traffic through an environment proxy
		DialContext: dialer.DialContext,
		// HTTP/2 is only ever negotiated over TLS; to plain-HTTP targets
		// it would only set up machinery that is never used.
		ForceAttemptHTTP2:     anyTLS(u.targets),
		MaxIdleConns:          c.MaxIdleConnsPerHost * len(u.targets),
		MaxIdleConnsPerHost:   c.MaxIdleConnsPerHost,
		IdleConnTimeout:       c.IdleTimeout,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: c.Timeout,
		// The client's own Accept-Encoding goes upstream as it came; the
		// gateway never asks for gzip itself, nor unpacks a response.
		DisableCompression: true,
		// The write buffer holds a request's headers and a tiny body (up
		// to tinyBodyMax, handed over as an in-memory reader), which then
		// leave in one write. With any other body net/http flushes the
		// headers alone and copies the body past this buffer. The read
		// buffer takes the response headers in one read.
		WriteBufferSize: transportWriteBufferSize,
		ReadBufferSize:  transportBufferSize,
	}
	u.direct = &directTransport{
		next:          std,
		dial:          dialer.DialContext,
		maxIdle:       c.MaxIdleConnsPerHost,
		idleTimeout:   c.IdleTimeout,
		headerTimeout: c.Timeout,
		writeBufSize:  transportWriteBufferSize,
		readBufSize:   transportBufferSize,
	}
	u.transport = &retryTransport{up: u, next: u.direct}
	return u, nil
}

// close closes the upstream's kept connections, and those in use once
// their requests end (see directTransport.Close).
func (u *upstream) close() {
	u.closed.Store(true)
	u.direct.Close()
}

// transportBufferSize is the upstream connections' read buffer;
// transportWriteBufferSize their write buffer, which takes a request's
// headers and a tiny body whole.
const (
	transportBufferSize      = 64 << 10
	transportWriteBufferSize = tinyBodyMax + 8<<10
)

func anyTLS(ts []*target) bool {
	for _, t := range ts {
		if t.url.Scheme == "https" {
			return true
		}
	}
	return false
}

// pick returns the next target round-robin, skipping targets marked down
// unless all of them are.
func (u *upstream) pick() *target {
	n := uint64(len(u.targets))
	start := u.next.Add(1) - 1
	now := time.Now().UnixNano()
	for i := uint64(0); i < n; i++ {
		t := u.targets[(start+i)%n]
		if t.downUntil.Load() <= now {
			return t
		}
	}
	return u.targets[start%n]
}

// retryTransport sends a request to the target Rewrite chose and, when that
// target refuses the connection before any body byte was read, to the next
// ones. Any other failure is final: the body may be partly sent.
type retryTransport struct {
	up   *upstream
	next idleCloser
}

// CloseIdleConnections closes the kept connections of every target.
func (rt *retryTransport) CloseIdleConnections() { rt.next.CloseIdleConnections() }

func (rt *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.up.closed.Load() && !req.Close {
		// After close: a connection of its own, closed after it.
		closing := *req
		closing.Close = true
		req = &closing
	}
	orig := req.Body
	tried := 0
	for {
		var body *guardedBody
		if req.GetBody == nil && orig != nil && orig != http.NoBody {
			// A shallow copy: a RoundTripper must not modify the request
			// it is given.
			body = &guardedBody{r: orig}
			sent := *req
			sent.Body = body
			req = &sent
		}
		resp, err := rt.next.RoundTrip(req)
		if err == nil || !isConnRefused(err) || (body != nil && body.n > 0) {
			return resp, err
		}
		rt.up.markDown(req.URL.Host)
		tried++
		if tried >= len(rt.up.targets) {
			return nil, err
		}
		t := rt.up.pick()
		if t.url.Host == req.URL.Host {
			t = rt.up.targets[(rt.up.indexOf(req.URL.Host)+1)%len(rt.up.targets)]
		}
		req = req.Clone(req.Context())
		req.URL.Scheme, req.URL.Host = t.url.Scheme, t.url.Host
		req.Body = orig
		if req.GetBody != nil { // an in-memory body: a fresh reader
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

func (u *upstream) indexOf(host string) int {
	for i, t := range u.targets {
		if t.url.Host == host {
			return i
		}
	}
	return 0
}

func (u *upstream) markDown(host string) {
	for _, t := range u.targets {
		if t.url.Host == host {
			t.downUntil.Store(time.Now().Add(markDownFor).UnixNano())
		}
	}
}

func isConnRefused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial" && !op.Timeout())
}

// guardedBody counts what the transport read and ignores the transport's
// Close, so a body can be offered to another target after a refused
// connection. The gateway closes the real body when the request ends.
type guardedBody struct {
	r io.Reader
	n int64
}

func (g *guardedBody) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.n += int64(n)
	return n, err
}

func (g *guardedBody) Close() error { return nil }
