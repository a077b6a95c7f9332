package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/keygate/keygate/product"
)

// identityHeaders are what the upstream learns about the caller.
const (
	hdrKeyID   = "X-Keygate-Key-Id"
	hdrContext = "X-Keygate-Context"
	hdrEnv     = "X-Keygate-Env"
	hdrProduct = "X-Keygate-Product"
)

// Proxy sends an admitted request to its upstream with
// httputil.ReverseProxy. It owns the three things the request path
// decides about the upstream exchange: which upstream and target, the
// outbound headers (identity, forwarding, trace context, no credential),
// and what a failed round trip answers. Build it with newProxy; it is
// safe for concurrent use.
//
// Each upstream has a ReverseProxy of its own, whose Transport is that
// upstream's, so the transport needs nothing of the request's state. The
// state reaches Rewrite, the one hook that needs it, as one context value
// of the outgoing request; the response's timing is read off the
// recorder, and a failed round trip is handed back to serve through it,
// which answers it like any other refusal.
type Proxy struct {
	extraction, registry proxyTo
	metrics              *Metrics
	body                 *bodyLimits // for the refusal of a body cut while streaming
}

// proxyTo is one upstream and its ReverseProxy.
type proxyTo struct {
	up *upstream
	rp *httputil.ReverseProxy
}

// newProxy builds the two upstreams' proxies. Its errors name Config's
// fields.
func newProxy(c UpstreamsConfig, tracer oteltrace.Tracer, metrics *Metrics, body *bodyLimits, log *zap.Logger) (*Proxy, error) {
	p := &Proxy{metrics: metrics, body: body}
	for _, u := range []struct {
		name  string
		field string
		cfg   UpstreamConfig
		to    *proxyTo
	}{
		{product.Extraction, "Extraction", c.Extraction, &p.extraction},
		{product.Registry, "Registry", c.Registry, &p.registry},
	} {
		up, err := newUpstream(u.name, u.cfg)
		if err != nil {
			return nil, fmt.Errorf("gateway: Config.Upstreams.%s: %w", u.field, err)
		}
		var rt http.RoundTripper = up.transport
		if tracer != nil {
			rt = tracedTransport{tracer: tracer, name: up.name, next: up.transport}
		}
		u.to.up = up
		u.to.rp = &httputil.ReverseProxy{
			Rewrite:        p.rewrite,
			Transport:      rt,
			ModifyResponse: modifyResponse,
			ErrorHandler:   proxyError,
			BufferPool:     bufferPool{},
			ErrorLog:       zap.NewStdLog(log.Named("proxy")),
		}
	}
	return p, nil
}

type stateKey struct{}

// forward proxies r, admitted as st, to its route's upstream and returns
// the refusal of a failed round trip (none when the upstream answered).
func (p *Proxy) forward(w *recorder, r *http.Request, st *state) refusal {
	to := &p.extraction
	if st.route == routeRegistry {
		to = &p.registry
	}
	st.upstream = to.up
	to.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	if w.proxyErr == nil {
		if !w.headerAt.IsZero() {
			st.upLatency = w.headerAt.Sub(st.upStart)
			p.metrics.upstreamLatency(st.upstream).Observe(st.upLatency.Seconds())
		}
		return refusal{}
	}
	if st.upStart.IsZero() {
		st.upStart = time.Now()
	}
	st.upLatency = time.Since(st.upStart)
	return p.failed(r, st, w.proxyErr)
}

// failed maps a failed round trip to its refusal. A check that failed
// while the body streamed (conflicting context, truncated multipart, size
// cap) or a body that was cut is reported as that refusal; anything else
// is 502 or 504 (upstreamRefusal).
func (p *Proxy) failed(r *http.Request, st *state, err error) refusal {
	if be := st.bodyErr(); be != nil || st.body.fired.Load() != cutNone {
		if be != nil {
			err = be
		}
		return p.body.refusal(r, st, err)
	}
	return upstreamRefusal(r.Context(), err)
}

// rewrite builds the outbound request: target chosen round-robin, fresh
// X-Forwarded-* headers (Rewrite has already dropped the client's), no
// credential, and the gateway's identity headers in place of anything the
// client sent under X-Keygate-*.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(stateKey{}).(*state)
	if st.fwdPath != "" {
		// The normal form the operation was matched on (normalisePath);
		// SetURL joins the target's path with this escaped one.
		pr.Out.URL.Path, pr.Out.URL.RawPath = st.path, st.fwdPath
	}
	pr.SetURL(st.upstream.pick().url)
	h := pr.Out.Header
	scrubOutbound(h)
	pr.Out.Trailer = nil // client trailers never reach the upstream
	// httputil.ProxyRequest.SetXForwarded, with the client address the
	// trusted-proxy rules give (Rewrite has already dropped the client's
	// X-Forwarded-* headers).
	if st.client.IsValid() {
		client := st.client.String()
		h["X-Forwarded-For"] = []string{client}
		h["X-Real-Ip"] = []string{client}
	}
	h["X-Forwarded-Host"] = []string{pr.In.Host}
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	h["X-Forwarded-Proto"] = []string{proto}
	id := st.principal
	h[hdrKeyID] = []string{id.ID}
	h[hdrEnv] = []string{id.Env}
	h[hdrProduct] = []string{st.route.product()}
	if id.Context != "" {
		h[hdrContext] = []string{id.Context}
	}
	h["Traceparent"] = []string{st.trace.header()}
	if st.small != nil {
		// The body read whole by readSmall: a fresh in-memory reader for
		// each attempt (GetBody serves retries), so the transport writes
		// headers and a tiny body in one write.
		memBody(pr.Out, st.small)
	}
	st.upStart = time.Now()
}

// tracedTransport makes each round trip to the upstream name the
// upstream span, when the request's server span is recorded.
type tracedTransport struct {
	tracer oteltrace.Tracer
	name   string
	next   http.RoundTripper
}

// CloseIdleConnections passes through to the upstream's transport.
func (t tracedTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !oteltrace.SpanFromContext(req.Context()).IsRecording() {
		return t.next.RoundTrip(req)
	}
	return tracedRoundTrip(t.tracer, t.name, t.next, req)
}

// modifyResponse keeps the gateway's own headers authoritative over the
// upstream's.
func modifyResponse(resp *http.Response) error {
	for _, k := range gatewayHeaders {
		delete(resp.Header, k) // canonical, as net/http read them: Del would canonicalize each again
	}
	return nil
}

// gatewayHeaders are the response headers keygate sets itself, which an
// upstream's must not stand beside, in canonical form.
var gatewayHeaders = [...]string{"X-Trace-Id", "Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "Strict-Transport-Security"}

// proxyError hands a failed round trip back to forward, through the
// recorder forward gave the ReverseProxy; forward answers it.
func proxyError(w http.ResponseWriter, _ *http.Request, err error) {
	w.(*recorder).proxyErr = err
}

// bufferPool lends ReverseProxy its copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
