package framing

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// TLS, when set, makes the listener terminate TLS itself: it completes
	// each handshake (in a goroutine per connection, so a slow client
	// never delays Accept), returns HTTP/2 connections as the *tls.Conn
	// net/http needs to serve h2, closes acme-tls/1 connections (their
	// only purpose, the tls-alpn-01 challenge, is answered during the
	// handshake) and returns every other connection as a Conn over the
	// plaintext. Nil means plain TCP: every connection is a Conn.
	TLS *tls.Config
	// HandshakeTimeout bounds each TLS handshake; default 10 s.
	HandshakeTimeout time.Duration
	// Logf, if set, receives TLS handshake failures, worded as net/http
	// words them ("http: TLS handshake error from …").
	Logf func(format string, args ...any)
	// ServeH2, when set with TLS, serves each HTTP/2 connection (in the
	// goroutine that completed its handshake) instead of Accept returning
	// it: the connection is handed over wrapped so that its client's
	// stream resets are counted against H2Resets, which net/http would
	// not serve as HTTP/2 since it is no *tls.Conn. It must close the
	// connection when done. An HTTP/2 server reading it gets an
	// http2.ConnectionError ENHANCE_YOUR_CALM from Read once the client
	// has reset too many streams, and answers it with GOAWAY.
	ServeH2 func(net.Conn)
	// H2Resets bounds each HTTP/2 client's stream resets (ServeH2 only).
	H2Resets H2ResetLimit
	// OnResetFlood, if set, is told the remote address of each HTTP/2
	// connection ended for its resets.
	OnResetFlood func(remote net.Addr)
}

// Listener wraps accepted connections for framing checks. Build it with
// NewListener; it is safe for concurrent use.
type Listener struct {
	ln     net.Listener
	cfg    ListenerConfig
	start  sync.Once
	conns  chan net.Conn
	errs   chan error
	ctx    context.Context
	cancel context.CancelFunc
	close  sync.Once
}

// NewListener wraps ln.
func NewListener(ln net.Listener, cfg ListenerConfig) *Listener {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Listener{ln: ln, cfg: cfg, conns: make(chan net.Conn), errs: make(chan error), ctx: ctx, cancel: cancel}
}

// Accept returns the next connection: a *Conn, or over TLS a Conn with a
// ConnectionState method or an HTTP/2 *tls.Conn.
func (l *Listener) Accept() (net.Conn, error) {
	if l.cfg.TLS == nil {
		c, err := l.ln.Accept()
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: c}, nil
	}
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close closes the listener and abandons handshakes in progress.
func (l *Listener) Close() error {
	l.close.Do(l.cancel)
	return l.ln.Close()
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case l.errs <- err:
			case <-l.ctx.Done():
				return
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				continue
			}
			return
		}
		go l.handshake(c)
	}
}

func (l *Listener) handshake(raw net.Conn) {
	tc := tls.Server(raw, l.cfg.TLS)
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	defer cancel()
	_ = raw.SetDeadline(time.Now().Add(l.cfg.HandshakeTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		reason := err.Error()
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			reason = "client sent an HTTP request to an HTTPS server"
		}
		_ = raw.Close()
		if l.cfg.Logf != nil {
			l.cfg.Logf("http: TLS handshake error from %s: %v", raw.RemoteAddr(), reason)
		}
		return
	}
	_ = raw.SetDeadline(time.Time{})
	var c net.Conn
	switch tc.ConnectionState().NegotiatedProtocol {
	case "h2":
		if serve := l.cfg.ServeH2; serve != nil {
			var flooded func()
			if on := l.cfg.OnResetFlood; on != nil {
				flooded = func() { on(raw.RemoteAddr()) }
			}
			serve(newH2Conn(tc, l.cfg.H2Resets, flooded))
			return
		}
		c = tc
	case "acme-tls/1":
		_ = tc.Close()
		return
	default:
		c = tlsConn{Conn: &Conn{Conn: tc}, tc: tc}
	}
	select {
	case l.conns <- c:
	case <-l.ctx.Done():
		_ = c.Close()
	}
}

// looksLikeHTTP is net/http's test for a plaintext request sent to a TLS
// port.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}
