package gateway

import (
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
)

// identityHeaders are what the upstream learns about the caller.
const (
	hdrKeyID   = "X-Keygate-Key-Id"
	hdrContext = "X-Keygate-Context"
	hdrEnv     = "X-Keygate-Env"
	hdrProduct = "X-Keygate-Product"
)

// rewrite builds the outbound request: target chosen round-robin, fresh
// X-Forwarded-* headers (Rewrite has already dropped the client's), no
// credential, and the gateway's identity headers in place of anything the
// client sent under X-Keygate-*.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(stateKey{}).(*state)
	up := g.extraction
	if st.route == routeRegistry {
		up = g.registry
	}
	st.upstream = up
	if st.fwdPath != "" {
		// The normal form the operation was matched on (normalisePath);
		// SetURL joins the target's path with this escaped one.
		pr.Out.URL.Path, pr.Out.URL.RawPath = st.path, st.fwdPath
	}
	pr.SetURL(up.pick().url)
	h := pr.Out.Header
	scrubOutbound(h)
	pr.Out.Trailer = nil // client trailers never reach the upstream
	// httputil.ProxyRequest.SetXForwarded, with the client address the
	// trusted-proxy rules give (Rewrite has already dropped the client's
	// X-Forwarded-* headers).
	if st.client.IsValid() {
		st.value(h, "X-Forwarded-For", hvForwardedFor, st.client.String())
		h["X-Real-Ip"] = h["X-Forwarded-For"]
	}
	st.value(h, "X-Forwarded-Host", hvForwardedHost, pr.In.Host)
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	st.value(h, "X-Forwarded-Proto", hvForwardedProto, proto)
	p := st.principal
	st.value(h, hdrKeyID, hvKeyID, p.ID)
	st.value(h, hdrEnv, hvEnv, p.Env)
	st.value(h, hdrProduct, hvProduct, st.route.product())
	if p.Context != "" {
		st.value(h, hdrContext, hvContext, p.Context)
	}
	st.value(h, "Traceparent", hvTraceparent, st.trace.header())
	if st.small != nil {
		// The body read whole by readSmall: a fresh in-memory reader for
		// each attempt (GetBody serves retries), so the transport writes
		// headers and a tiny body in one write.
		memBody(pr.Out, st.small)
	}
	st.upStart = time.Now()
}

// upstreamTransport sends each request with the transport of the upstream
// rewrite chose.
// With a tracer, the round trip is the upstream span.
type upstreamTransport struct {
	tracer    oteltrace.Tracer
	upstreams []*upstream // every upstream, for CloseIdleConnections
}

// CloseIdleConnections closes the kept connections of every upstream.
func (t upstreamTransport) CloseIdleConnections() {
	for _, u := range t.upstreams {
		u.transport.CloseIdleConnections()
	}
}

func (t upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st := req.Context().Value(stateKey{}).(*state)
	if t.tracer != nil && oteltrace.SpanFromContext(req.Context()).IsRecording() {
		return tracedRoundTrip(t.tracer, st, st.upstream.transport, req)
	}
	return st.upstream.transport.RoundTrip(req)
}

// modifyResponse records upstream latency and keeps the gateway's own
// headers authoritative over the upstream's.
func (g *Gateway) modifyResponse(resp *http.Response) error {
	st := resp.Request.Context().Value(stateKey{}).(*state)
	st.upLatency = time.Since(st.upStart)
	g.metrics.upstreamLatency(st.upstream).Observe(st.upLatency.Seconds())
	for _, k := range gatewayHeaders {
		delete(resp.Header, k) // canonical, as net/http read them: Del would canonicalize each again
	}
	return nil
}

// gatewayHeaders are the response headers keygate sets itself, which an
// upstream's must not stand beside, in canonical form.
var gatewayHeaders = [...]string{"X-Trace-Id", "Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "Strict-Transport-Security"}

// proxyError answers a failed upstream round trip. A check that failed
// while the body streamed (conflicting context, truncated multipart, size
// cap) or a body that was cut is reported as that refusal; anything else
// is 502 or 504.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	st := r.Context().Value(stateKey{}).(*state)
	if st.upStart.IsZero() {
		st.upStart = time.Now()
	}
	st.upLatency = time.Since(st.upStart)
	rec := w.(*recorder) // ServeHTTP hands the proxy its recorder
	if be := st.bodyErr.Load(); be != nil || st.idle.fired.Load() != cutNone {
		if be != nil {
			err = *be
		}
		g.refuse(rec, r, st, g.bodyRefusal(r, st, err))
		return
	}
	g.refuse(rec, r, st, upstreamRefusal(r.Context(), err))
}

// bufferPool lends ReverseProxy its copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
