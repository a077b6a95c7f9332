package server

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// h2Conns serves the API listener's HTTP/2 connections. The framing
// listener hands them over wrapped, so that their stream resets are
// counted (framing.ListenerConfig.ServeH2); net/http serves HTTP/2 only
// on a bare *tls.Conn, so golang.org/x/net/http2 (the package net/http
// bundles) serves them here, with the API server as its base
// configuration: the same handler, timeouts and HTTP2 settings, and a
// GOAWAY to each connection when the API server shuts down.
type h2Conns struct {
	srv     *http2.Server
	base    *http.Server
	handler http.Handler

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// maxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS the API
// listener advertises.
const maxConcurrentStreams = 100

// newH2Conns configures base for HTTP/2 through srv. base must use TLS.
func newH2Conns(base *http.Server) (*h2Conns, error) {
	// A client's concurrent streams are what a connection may hold in
	// handlers at once, reset or not: nginx's (128) and h2o's (100)
	// bound rather than x/net's 250.
	h := &h2Conns{srv: &http2.Server{MaxConcurrentStreams: maxConcurrentStreams}, base: base, conns: map[net.Conn]struct{}{}}
	next := base.Handler
	// A stream the client reset before its handler began has nobody to
	// answer: it is dropped before authentication, the limiter or the
	// upstream spend anything on it. Rapid reset sends nothing else.
	h.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			return
		}
		next.ServeHTTP(w, r)
	})
	// Registers the graceful GOAWAY with base.Shutdown.
	if err := http2.ConfigureServer(base, h.srv); err != nil {
		return nil, err
	}
	return h, nil
}

// serve serves c until it ends.
func (h *h2Conns) serve(c net.Conn) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = c.Close()
		return
	}
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
		h.wg.Done()
	}()
	ctx := context.Background()
	if cc := h.base.ConnContext; cc != nil {
		ctx = cc(ctx, c)
	}
	h.srv.ServeConn(c, &http2.ServeConnOpts{Context: ctx, BaseConfig: h.base, Handler: h.handler})
	_ = c.Close()
}

// shutdown waits, until ctx ends, for the connections to finish (after
// base.Shutdown sent them GOAWAY), then closes those left. No connection
// is served after it.
func (h *h2Conns) shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	h.mu.Lock()
	for c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	<-done
	return ctx.Err()
}

// resetFloods counts the HTTP/2 connections ended for their resets and
// logs each.
func resetFloods(reg prometheus.Registerer, log *zap.Logger) func(net.Addr) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "keygate_http2_reset_floods_total",
		Help: "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM because their client reset streams faster than the reset limit allows (rapid reset).",
	})
	reg.MustRegister(c)
	return func(remote net.Addr) {
		c.Inc()
		log.Warn("HTTP/2 connection ended: too many stream resets (rapid reset)", zap.Stringer("remote", remote))
	}
}
