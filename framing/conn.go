package framing

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
)

// Conn is an HTTP/1.x connection whose requests' framing is tracked as
// net/http reads it. Its zero value is not usable; a Listener makes them.
type Conn struct {
	net.Conn
	t Tracker
	// served counts the requests Guard saw. HTTP/1 serves a connection's
	// requests one after another on one goroutine, so it needs no lock.
	served int64
}

// Read reads from the connection and feeds the tracker.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		_, _ = c.t.Write(p[:n])
	}
	return n, err
}

// CloseWrite half-closes the connection when the underlying one can, so
// that net/http can let the client read a final error response before the
// connection is reset.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Tracker is the connection's framing tracker.
func (c *Conn) Tracker() *Tracker { return &c.t }

// tlsConn is a Conn over TLS. net/http fills Request.TLS from its
// ConnectionState.
type tlsConn struct {
	*Conn
	tc *tls.Conn
}

func (c tlsConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

type connKey struct{}

// ConnContext is an http.Server ConnContext hook: it keeps the Conn in the
// connection's context, for Guard.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	switch fc := c.(type) {
	case *Conn:
		return context.WithValue(ctx, connKey{}, fc)
	case tlsConn:
		return context.WithValue(ctx, connKey{}, fc.Conn)
	}
	return ctx
}

// BodyBuffered reports whether r's whole body, as its framing (Content-Length
// or chunked) delimits it, has already been read from r's HTTP/1.x
// connection into net/http's buffer: reading r.Body then never waits for
// the client, so a watch for a stalled body has nothing to watch. It is
// false for a request Guard did not see (HTTP/2, another server), and
// must be called from r's handler, on the connection's goroutine.
func BodyBuffered(r *http.Request) bool {
	c, _ := r.Context().Value(connKey{}).(*Conn)
	if c == nil || r.ProtoMajor != 1 || c.served == 0 {
		return false
	}
	return c.t.Whole(c.served - 1)
}

// Refuse answers a request whose framing is refused. Guard has already set
// "Connection: close", so net/http closes the connection after it.
type Refuse func(w http.ResponseWriter, r *http.Request, reason string)

// Guard passes each request on a tracked connection (see ConnContext) to
// next if its head was sound, and to refuse otherwise. Requests on other
// connections (HTTP/2 among them) go to next. It must be the server's
// outermost handler, and the server must set DisableGeneralOptionsHandler,
// so that it sees every request on the connection.
func Guard(next http.Handler, refuse Refuse) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*Conn)
		if c == nil || r.ProtoMajor != 1 {
			next.ServeHTTP(w, r)
			return
		}
		i := c.served
		c.served++
		if ok, reason := c.t.Check(i); !ok {
			w.Header().Set("Connection", "close")
			refuse(w, r, reason)
			return
		}
		next.ServeHTTP(w, r)
	})
}
