// Package gateway is keygate's request path: it authenticates each request,
// routes it to the extraction or registry upstream, applies the key's rate
// limit and quota, binds /sync uploads to the key's context, and proxies
// with httputil.ReverseProxy. Every error it produces has the spec's JSON
// shape and a trace id.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/product"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/formctx"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/logline"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/redact"
)

// Authenticator checks a request's credentials. A Verdict that is not OK is
// a refusal (401, or its Status); an error means the store behind the
// authenticator failed, which the gateway answers with 503.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Verdict, error)
}

// Limiter decides whether the principal id may make a request now under
// lim. An error means it cannot decide (503).
type Limiter interface {
	Allow(ctx context.Context, id string, lim policy.Limit) (ratelimit.Decision, error)
}

// Deprecation announces the end of API keys on key-authenticated responses
// (RFC 9745 Deprecation, RFC 8594 Sunset, and a Link to the migration
// guide). The zero value announces nothing.
type Deprecation struct {
	// Date is when API keys were deprecated.
	Date time.Time `yaml:"date"`
	// Sunset is when API keys stop working.
	Sunset time.Time `yaml:"sunset"`
	// Link points to the migration guide.
	Link string `yaml:"link"`
}

// Config is what the request path needs to know. See config.example.yaml
// for the YAML it comes from.
type Config struct {
	Upstreams UpstreamsConfig
	// MaxBodyBytes caps request bodies (413 over it).
	MaxBodyBytes int64
	// SpoolMemoryBytes is how much of a /sync body read before its context
	// field is held in memory before spilling to a temp file in SpoolDir.
	SpoolMemoryBytes int
	SpoolDir         string
	// Limits by env ("live", "test").
	Limits map[string]policy.Limit
	// RateLimitStatus is sent when a limit refuses a request: 429 or 403.
	RateLimitStatus int
	// HSTS is the Strict-Transport-Security value for requests that came
	// over TLS; empty for none.
	HSTS string
	// Deprecation, when set, is announced on key-authenticated responses.
	Deprecation Deprecation
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// (server.trusted_proxies); the zero value trusts none.
	TrustedProxies clientip.TrustedProxies
	// BodyIdleTimeout answers 408 and abandons the request (upstream
	// included) when no body byte arrives for this long; 0 means never.
	BodyIdleTimeout time.Duration
	// MinBodyRate answers 408 and abandons the request (upstream
	// included) when, past its grace period, a body arrives slower than
	// this on average; the zero value means never.
	MinBodyRate MinBodyRate
	// MaxConcurrent caps one credential's requests in flight (per
	// replica); past it the answer is RateLimitStatus. 0 means no cap.
	MaxConcurrent int
	// Operations matches a request to its operation for the permission
	// check (see policy.Access); nil means the built-in operations.
	Operations *policy.Operations
	// Endpoints are the routes keygate answers itself without an API
	// key (the token endpoint, discovery, JWKS); see Endpoint.
	Endpoints []Endpoint
	// RateLimitHeaders chooses the rate-limit response fields
	// (ratelimit.headers): "draft" (RateLimit-Policy and RateLimit),
	// "legacy" (RateLimit-Limit, -Remaining, -Reset). nil means both; an
	// empty non-nil list, none.
	RateLimitHeaders []string
}

// Deps are the collaborators of a Gateway.
type Deps struct {
	Auth    Authenticator
	Limiter Limiter
	Logger  *zap.Logger
	// Metrics records the request series; nil means series registered
	// nowhere (counted, never exported).
	Metrics *Metrics
	// Failures, when set, throttles addresses with too many failed
	// authentications.
	Failures FailureLimiter
	// Usage, when set, counts each key's requests (see UsageRecorder).
	Usage UsageRecorder
	// Tracer, when set, records the request's stages (authentication,
	// rate limit, context check, upstream round trip) as children of the
	// server span in the request's context, and the upstream gets the
	// upstream span's traceparent. nil costs nothing.
	Tracer oteltrace.Tracer
	// AccessLog, when set, takes each access line whole, appended by hand
	// as the bytes Logger's JSON encoder (logline.EncoderConfig) would
	// write for it, with Logger's name (not its With fields): set it to
	// the sink behind Logger when Logger writes JSON and info lines, and
	// Logger keeps every other line. Without it the access line goes
	// through Logger.
	AccessLog io.Writer
}

// Gateway is the API handler. Build it with New; it is safe for concurrent
// use.
type Gateway struct {
	cfg Config
	// rateHeaders are the rate-limit fields sent (Config.RateLimitHeaders).
	rateHeaders rateHeaders
	auth        Authenticator
	limiter     Limiter
	log         *zap.Logger
	accessLog   io.Writer // Deps.AccessLog
	logName     string    // log's name, for the lines to accessLog
	metrics     *Metrics
	usage       UsageRecorder
	tracer      oteltrace.Tracer
	extraction  *upstream
	registry    *upstream
	proxy       *httputil.ReverseProxy
	depHeaders  [][2]string

	failures       FailureLimiter
	concurrency    *ratelimit.Concurrency
	idleMsg        string
	slowMsg        string
	concurrencyMsg string
	smallHeld      atomic.Int64 // bytes of /sync bodies held by readSmall
	bodyLimits     bodyLimits
	ops            *policy.Operations
	local          map[string]*localRoute // routeLocal rows by path
}

// New checks cfg and builds the handler chain once. Its errors name
// Config's Go fields: cfg is assembled from several sections of the YAML
// configuration (server, ratelimit, upstreams), which package config has
// validated by then, naming their YAML paths.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if deps.Auth == nil || deps.Limiter == nil {
		return nil, errors.New("gateway: an authenticator and a limiter are required")
	}
	if err := cfg.Upstreams.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes <= 0 {
		return nil, errors.New("gateway: Config.MaxBodyBytes must be positive")
	}
	if cfg.RateLimitStatus == 0 {
		cfg.RateLimitStatus = http.StatusTooManyRequests
	}
	var err error
	for _, env := range []string{"live", "test"} {
		if _, ok := cfg.Limits[env]; !ok {
			return nil, fmt.Errorf("gateway: Config.Limits has no limit for env %q", env)
		}
	}
	g := &Gateway{cfg: cfg, auth: deps.Auth, limiter: deps.Limiter, log: deps.Logger, metrics: deps.Metrics, failures: deps.Failures, usage: deps.Usage, tracer: deps.Tracer}
	if g.rateHeaders, err = rateHeadersOf(cfg.RateLimitHeaders); err != nil {
		return nil, err
	}
	if cfg.BodyIdleTimeout < 0 || cfg.MaxConcurrent < 0 || cfg.MinBodyRate.BytesPerSecond < 0 || cfg.MinBodyRate.Grace < 0 {
		return nil, errors.New("gateway: Config.BodyIdleTimeout, Config.MinBodyRate and Config.MaxConcurrent must not be negative")
	}
	if g.local, err = compileEndpoints(cfg.Endpoints); err != nil {
		return nil, err
	}
	g.concurrency = ratelimit.NewConcurrency(cfg.MaxConcurrent)
	if g.ops = cfg.Operations; g.ops == nil {
		g.ops = policy.BuiltinOperations()
	}
	g.bodyLimits = bodyLimits{timeout: cfg.BodyIdleTimeout, rate: cfg.MinBodyRate}
	g.idleMsg, g.slowMsg, g.concurrencyMsg = idleMessage(cfg.BodyIdleTimeout), slowMessage(cfg.MinBodyRate), concurrencyMessage(cfg.MaxConcurrent)
	if g.log == nil {
		g.log = zap.NewNop()
	}
	g.accessLog, g.logName = deps.AccessLog, g.log.Name()
	if g.metrics == nil {
		g.metrics = NewMetrics(nil)
	}
	if g.extraction, err = newUpstream(product.Extraction, cfg.Upstreams.Extraction); err != nil {
		return nil, fmt.Errorf("gateway: Config.Upstreams.Extraction: %w", err)
	}
	if g.registry, err = newUpstream(product.Registry, cfg.Upstreams.Registry); err != nil {
		return nil, fmt.Errorf("gateway: Config.Upstreams.Registry: %w", err)
	}
	if d := cfg.Deprecation; !d.Date.IsZero() || !d.Sunset.IsZero() || d.Link != "" {
		if !d.Date.IsZero() {
			g.depHeaders = append(g.depHeaders, [2]string{"Deprecation", "@" + strconv.FormatInt(d.Date.Unix(), 10)})
		}
		if !d.Sunset.IsZero() {
			g.depHeaders = append(g.depHeaders, [2]string{"Sunset", d.Sunset.UTC().Format(http.TimeFormat)})
		}
		if d.Link != "" {
			g.depHeaders = append(g.depHeaders, [2]string{"Link", "<" + d.Link + `>; rel="deprecation"; type="text/html"`})
		}
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      upstreamTransport{tracer: deps.Tracer, upstreams: []*upstream{g.extraction, g.registry}},
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		BufferPool:     bufferPool{},
		ErrorLog:       zap.NewStdLog(g.log.Named("proxy")),
	}
	return g, nil
}

// state is what one request carries through the proxy hooks and the log.
type state struct {
	trace      trace
	client     netip.Addr // see clientip.TrustedProxies.ClientAddr
	route      route
	principal  auth.Principal
	authed     bool
	admitted   bool // by the rate limiter
	refusal    refusalKind
	reason     string
	bodyErr    atomic.Pointer[error] // set by the transport's goroutine
	upstream   *upstream
	upStart    time.Time
	upLatency  time.Duration
	bytesIn    atomic.Int64 // counted by the transport's goroutine
	spilled    bool
	errMessage string
	idle       idleBody
	small      *smallBuf // the whole /sync body, when readSmall read it
	tiny       smallBuf  // small's memory when the body is tiny
	rec        recorder  // the response as ServeHTTP wraps it
	// hv backs the single values of the headers the gateway sets on the
	// response and on the upstream request (hvTraceID…): one allocation
	// with the state instead of one per header.
	hv [hvCount]string

	// path is the request path operations are matched on: the decoded
	// path an upstream reads (normalisePath); fwdPath is the escaped path
	// forwarded when it differs from the one received.
	path, fwdPath string
	// oauthErrors: refusals are RFC 6749 §5.2 errors (Endpoint.OAuthErrors).
	oauthErrors bool
}

// Slots of state.hv.
const (
	hvTraceID = iota
	hvHSTS
	hvRateLimit
	hvRateRemaining
	hvRateReset
	hvRatePolicy
	hvRateDraft
	hvForwardedFor
	hvForwardedHost
	hvForwardedProto
	hvKeyID
	hvEnv
	hvProduct
	hvContext
	hvTraceparent
	hvCount
)

// value sets h[key] (key in canonical form) to the single value v, held in
// the state's slot i. The slice has no spare capacity, so an append by
// anyone else copies it rather than writing into the next slot.
func (st *state) value(h http.Header, key string, i int, v string) {
	st.hv[i] = v
	h[key] = st.hv[i : i+1 : i+1]
}

type stateKey struct{}

// ServeHTTP runs the request path: key, route and product, rate limit,
// context binding, proxy. No body byte is read before the credentials are
// accepted.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Not pooled: the transport may still read the body (which writes to
	// st) in its own goroutine after the handler returns.
	st := &state{trace: newTrace(r.Header.Get("Traceparent")), route: match(r.URL)}
	st.client = g.cfg.TrustedProxies.ClientAddr(r)
	st.rec.ResponseWriter = w
	rec := &st.rec
	h := w.Header()
	st.value(h, "X-Trace-Id", hvTraceID, st.trace.ID)
	if g.cfg.HSTS != "" && r.TLS != nil {
		st.value(h, "Strict-Transport-Security", hvHSTS, g.cfg.HSTS)
	}
	defer g.finish(r, rec, st, start)
	// The request path wraps r.Body. net/http, handed this same request,
	// looks for its own body there once the handler returns to decide how
	// to close a connection whose body was left unread: with its own body
	// it half-closes and waits, so that a client still sending reads the
	// answer; with a wrapper it closes at once, and the client's next
	// write is reset, the answer lost.
	defer func(body io.ReadCloser) { r.Body = body }(r.Body)
	if st.route == routeNone && g.local != nil {
		if lr := g.local[r.URL.EscapedPath()]; lr != nil {
			st.route, st.oauthErrors = routeLocal, lr.oauth
			if f := g.serveLocal(rec, r, lr); f.refused() {
				g.refuse(rec, r, st, f)
			}
			return
		}
	}
	if f := g.serve(rec, r, st); f.refused() {
		g.refuse(rec, r, st, f)
	}
}

// serve is the request path: admit, acquire a concurrency slot, limit,
// forward. They are steps, not one function, so that a request's
// goroutine needs the stack of one at a time: over HTTP/2 each request
// has a goroutine of its own, which starts with a small stack (the
// average of the process's), and grew it, copying it, on each request
// while serve was one frame of 2.4 KB (5% of keygate's CPU with h2load).
func (g *Gateway) serve(w *recorder, r *http.Request, st *state) refusal {
	if f := g.admit(w, r, st); f.refused() {
		return f
	}
	p := &st.principal
	if f := g.acquire(w, p.ID); f.refused() {
		return f
	}
	defer g.concurrency.Release(p.ID)
	if f := g.limit(w, r, st, p); f.refused() {
		return f
	}
	return g.forward(w, r, st, p)
}

// admit checks the request's method, URL and credential, and what the
// credential may do; the principal it admits is st.principal.
func (g *Gateway) admit(w *recorder, r *http.Request, st *state) refusal {
	if !knownMethod(r.Method) {
		// Not echoed, not logged raw, never forwarded: a key pasted into
		// the method position is a credential too.
		return refusal{kind: refMethod}
	}
	if redact.Contains(r.URL.RawQuery) || redact.Contains(r.URL.EscapedPath()) {
		// A credential in the URL ends up in logs and caches all along the
		// way; it is refused, never forwarded (nor checked: a valid key is
		// not to be made valid this way).
		return refusal{kind: refCredentialInURL}
	}
	if g.failures != nil {
		if f := g.throttled(w, st); f.refused() {
			return f
		}
	}
	_, sp := g.stage(r.Context(), SpanAuthenticate)
	v, err := g.auth.Authenticate(r)
	sp.end(string(v.Reason), err)
	if err != nil || !v.OK {
		return g.unauthenticated(w, r, st, &v, err)
	}
	st.principal, st.authed = v.Principal, true
	p := &st.principal
	g.metrics.keyRequests(p.Method, p.Env).Inc()
	if p.Method == auth.MethodAPIKey {
		for _, kv := range g.depHeaders {
			w.Header().Set(kv[0], kv[1])
		}
		if !p.LeakedUntil.IsZero() {
			setLeakWarning(w.Header(), p.LeakedUntil)
		}
	}

	if st.route == routeNone {
		return refusal{kind: refNotFound}
	}
	if f := st.readPath(r.URL); f.refused() {
		return f
	}
	switch {
	case !p.Allows(st.route.product()):
		return refusal{kind: refWrongProduct, message: "Forbidden: this credential is not valid for the " + st.route.product() + " product"}
	case !st.route.spec().allows(r.Method):
		w.Header().Set("Allow", st.route.spec().allow)
		return refusal{kind: refSyncMethod}
	}
	if f := checkOverride(r); f.refused() {
		return f
	}
	if f := g.permitted(r, st, p); f.refused() {
		return f
	}
	return refusal{}
}

// unauthenticated is the refusal of a request whose credential did not
// hold (v), or could not be checked (err).
func (g *Gateway) unauthenticated(w *recorder, r *http.Request, st *state, v *auth.Verdict, err error) refusal {
	if err != nil {
		return g.backendFailed(w, r, st, refAuthUnavailable, "authentication backend failed", err)
	}
	if v.Challenge != "" {
		w.Header().Set("WWW-Authenticate", v.Challenge)
	}
	g.metrics.AuthFailures.WithLabelValues(string(v.Reason)).Inc()
	if g.failures != nil {
		if f := g.failedAuth(w, r, st, *v); f.refused() {
			return f
		}
	}
	return refusal{kind: refCredential, status: v.Status, message: v.Message, reason: string(v.Reason)}
}

// backendFailed is the refusal (kind, with Retry-After) of a request
// whose credential or limit could not be checked, logged as what; or
// none of the backend's, when the client went away meanwhile.
func (g *Gateway) backendFailed(w *recorder, r *http.Request, st *state, kind refusalKind, what string, err error) refusal {
	if r.Context().Err() != nil {
		return refusal{kind: refClientGone}
	}
	w.Header().Set("Retry-After", "1")
	g.log.Warn(what, zap.String("trace_id", st.trace.ID), zap.Error(err))
	return refusal{kind: kind}
}

// limit asks the limiter whether p may make the request now.
func (g *Gateway) limit(w *recorder, r *http.Request, st *state, p *auth.Principal) refusal {
	lim, limitID := g.limitFor(p)
	ctx, sp := g.stage(r.Context(), SpanLimiter)
	d, err := g.limiter.Allow(ctx, limitID, lim)
	sp.end(string(d.Reason), err)
	if err != nil {
		return g.backendFailed(w, r, st, refLimiterUnavailable, "rate limiter failed", err)
	}
	st.setRateHeaders(w.Header(), g.rateHeaders, lim, d)
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter, 1), 10))
		if d.Reason == ratelimit.ReasonQuota {
			return refusal{kind: refQuota, message: "Rate Limited: usage quota exhausted for this " + quotaHolder(p, limitID) + "; it renews in " + strconv.FormatInt(ceilSeconds(d.Reset, 1), 10) + "s"}
		}
		return refusal{kind: refRate}
	}
	st.admitted = true
	return refusal{}
}

// forward checks the body (the context of a /sync form) and proxies the
// request.
func (g *Gateway) forward(w *recorder, r *http.Request, st *state, p *auth.Principal) refusal {
	if r.ContentLength > g.cfg.MaxBodyBytes {
		return refusal{kind: refTooLarge}
	}
	body := st.route.spec().body
	if body == bodyStreamContext {
		if f := checkSyncHeaders(r); f.refused() {
			return f
		}
	}
	g.watchBody(w, r, st)
	defer st.idle.stop()
	if body == bodyStreamContext {
		_, sp := g.stage(r.Context(), SpanContext)
		body, err := formctx.Read(r.Body, r.Header.Get("Content-Type"), formctx.Config{
			MaxBytes:    g.cfg.MaxBodyBytes,
			MemoryBytes: g.cfg.SpoolMemoryBytes,
			TempDir:     g.cfg.SpoolDir,
		})
		if err != nil {
			sp.end("body", nil)
			return g.bodyRefusal(r, st, err)
		}
		defer body.Close()
		st.spilled = body.Spilled()
		if !formctx.EqualContext(body.Context(), p.Context) || p.Context == "" {
			sp.end("context", nil)
			return refusal{kind: refContext}
		}
		sp.end("ok", nil)
		buf, ok, err := g.readSmall(body, r.ContentLength, &st.tiny)
		if ok {
			defer g.releaseSmall(buf)
		}
		switch {
		case err != nil:
			return g.bodyRefusal(r, st, err)
		case ok:
			st.small = buf
			st.bytesIn.Store(int64(len(buf.b)))
		default:
			r.Body = &watchedBody{rc: body, st: st}
		}
	} else if r.Body != nil && r.Body != http.NoBody {
		// The real ResponseWriter, not the recorder: over the cap,
		// MaxBytesReader tells net/http to close the connection after the
		// 413 rather than read on.
		r.Body = &watchedBody{rc: http.MaxBytesReader(w.ResponseWriter, r.Body, g.cfg.MaxBodyBytes), st: st}
	}
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	return refusal{}
}

// permitted is the policy check: the client address against the key's
// and its consumer's allowed_cidrs, then the request's operation against
// the key's permissions, its consumer's and its plan's features, all
// resolved when the key loaded (policy.Access). It reads no body and
// comes before the limiter, so a refused request spends no token.
func (g *Gateway) permitted(r *http.Request, st *state, p *auth.Principal) refusal {
	if p.Access == nil {
		return refusal{}
	}
	switch p.Access.Decide(g.ops.Match(r.Method, st.path), st.client) {
	case policy.DenyAddress:
		return refusal{kind: refForbiddenAddress}
	case policy.DenyOperation:
		return refusal{kind: refForbiddenOperation}
	case policy.DenyPlan:
		return refusal{kind: refForbiddenPlan}
	}
	if st.route == routeRegistry {
		return g.formOverride(r, st, p)
	}
	return refusal{}
}

// readPath sets st.path and st.fwdPath from the request's URL, or
// refuses a path below /registry that upstreams could read in more than
// one way (normalisePath).
func (st *state) readPath(u *url.URL) refusal {
	p := u.EscapedPath()
	if st.route != routeRegistry {
		st.path = p // "/sync", exactly
		return refusal{}
	}
	fwd, dec, ok := normalisePath(p)
	if !ok {
		return refusal{kind: refPath}
	}
	st.path = dec
	if fwd != p {
		st.fwdPath = fwd
	}
	return refusal{}
}

// bodyError maps a failure to read a request body to its refusal.
func bodyError(ctx context.Context, err error) refusal {
	var fe *formctx.Error
	var mbe *http.MaxBytesError
	var pe *fs.PathError
	switch {
	case errors.As(err, &fe):
		return refusal{kind: refBody, status: fe.Status, message: fe.Message}
	case errors.As(err, &mbe):
		return refusal{kind: refTooLarge}
	case ctx.Err() != nil:
		return refusal{kind: refUpstreamClientGone, reason: "body"}
	case errors.As(err, &pe): // the spool's temp file, not the client
		return refusal{kind: refBody, status: http.StatusServiceUnavailable, message: "could not hold the upload for the context check; try again shortly"}
	default:
		return refusal{kind: refBody}
	}
}

// watchedBody remembers the first read error of the body sent upstream, so
// that a failed check found while streaming (a conflicting context further
// on, a truncated upload, the size cap) is reported to the client as what
// it is and not as a 502.
type watchedBody struct {
	rc io.ReadCloser
	st *state
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.st.bytesIn.Add(int64(n))
	if err != nil && !errors.Is(err, io.EOF) {
		b.st.bodyErr.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (b *watchedBody) Close() error { return b.rc.Close() }

func ceilSeconds(d time.Duration, min int64) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < min {
		return min
	}
	return s
}

// safePath trims a path for an error message: short, and printable only.
func safePath(p string) string {
	if len(p) > 64 {
		p = p[:64] + "..."
	}
	printable := true // ASCII without controls, which strings.Map leaves as it is
	for i := 0; i < len(p) && printable; i++ {
		printable = 0x20 <= p[i] && p[i] < 0x7f
	}
	if printable {
		return p
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, p)
}

// finish writes the access log line and the request metrics.
func (g *Gateway) finish(r *http.Request, w *recorder, st *state, start time.Time) {
	status := w.status
	if status == 0 {
		status = StatusClientClosedRequest
	}
	elapsed := time.Since(start)
	route := st.route.String()
	g.metrics.requests(st.route, status).Inc()
	g.metrics.duration(st.route).Observe(elapsed.Seconds())
	if st.authed && g.usage != nil {
		g.recordUsage(st, start.Add(elapsed))
	}
	if g.tracer != nil {
		g.endServerSpan(r, st, status)
	}
	if g.accessLog != nil {
		g.writeAccessLine(r, w, st, route, status, start, elapsed)
		return
	}
	if ce := g.log.Check(zapcore.InfoLevel, "request"); ce != nil {
		// Lent from a pool: every core encodes the fields before Write
		// returns.
		zf := accessFields.Get().(*zapFields)
		g.accessLine(zf, r, w, st, route, status, start, elapsed)
		ce.Write(zf.fs...)
		clear(zf.fs)
		zf.fs = zf.fs[:0]
		accessFields.Put(zf)
	}
}

// writeAccessLine appends the access line by hand (logline) and writes it
// whole to Deps.AccessLog: the same bytes as through the logger, at
// about 4% less of keygate's CPU per request (see logline).
func (g *Gateway) writeAccessLine(r *http.Request, w *recorder, st *state, route string, status int, start time.Time, elapsed time.Duration) {
	l := accessLines.Get().(*jsonLine)
	l.b = logline.Begin(l.b[:0], zapcore.InfoLevel, time.Now(), g.logName, "request")
	g.accessLine(l, r, w, st, route, status, start, elapsed)
	l.b = logline.End(l.b)
	if _, err := g.accessLog.Write(l.b); err != nil {
		// zap reports a failed write on its error output; the logger's
		// warning reaches the operator where that goes.
		g.log.Warn("access log write failed", zap.Error(err))
	}
	if cap(l.b) <= 64<<10 { // a line with a long refusal text is not kept
		accessLines.Put(l)
	}
}

// accessEncoder takes the access line's fields in order: the logger's
// fields (zapFields) or a line appended by hand (jsonLine). scan marks a
// value that came from the client (the path, the remote address, an
// unknown method, the key id, refusal texts): it is scanned for
// credentials before it is written. The others are values the gateway
// made itself that cannot hold one (a trace id of 32 hex digits, names
// from fixed sets), written verbatim.
type accessEncoder interface {
	str(key, val string, scan bool)
	num(key string, v int64)
	ms(key string, d time.Duration) // in milliseconds, a float
	flag(key string, v bool)
}

// accessLine is the access line's content, whichever encoder writes it.
// It is a function of its own so that what it builds on the stack is off
// it before the line is written, the deepest point of a request (see
// serve).
func (g *Gateway) accessLine(enc accessEncoder, r *http.Request, w *recorder, st *state, route string, status int, start time.Time, elapsed time.Duration) {
	enc.str("trace_id", st.trace.ID, false)
	enc.str("method", r.Method, !knownMethod(r.Method))
	enc.str("path", safePath(r.URL.EscapedPath()), true)
	enc.str("route", route, false)
	enc.num("status", int64(status))
	enc.num("bytes_in", st.bytesIn.Load())
	enc.num("bytes_out", w.bytes)
	enc.ms("latency_ms", latency(st, start, elapsed))
	enc.ms("duration_ms", elapsed)
	enc.str("remote", st.remote(r), true)
	if st.authed {
		enc.str("key_id", st.principal.ID, true)
		m := st.principal.Method
		enc.str("auth", string(m), m != auth.MethodAPIKey && m != auth.MethodOAuth2 && m != auth.MethodBearer)
		enc.str("product", st.route.product(), false)
		enc.str("env", st.principal.Env, true)
	}
	if st.upstream != nil {
		enc.str("upstream", st.upstream.name, false)
		enc.ms("upstream_latency_ms", st.upLatency)
	}
	if st.reason != "" {
		enc.str("reason", st.reason, true)
		enc.str("error", st.errMessage, true)
	}
	if st.spilled {
		enc.flag("spilled", true)
	}
}

// zapFields is the access line as the logger's fields. The redacting
// core scans every string field but the Verbatim ones.
type zapFields struct{ fs []zap.Field }

func (z *zapFields) str(key, val string, scan bool) {
	if scan {
		z.fs = append(z.fs, zap.String(key, val))
	} else {
		z.fs = append(z.fs, redact.Verbatim(key, val))
	}
}
func (z *zapFields) num(key string, v int64)        { z.fs = append(z.fs, zap.Int64(key, v)) }
func (z *zapFields) ms(key string, d time.Duration) { z.fs = append(z.fs, zap.Float64(key, millis(d))) }
func (z *zapFields) flag(key string, v bool)        { z.fs = append(z.fs, zap.Bool(key, v)) }

// jsonLine is the access line appended by hand, scanned as the
// redacting core scans the logger's string fields.
type jsonLine struct{ b []byte }

func (l *jsonLine) str(key, val string, scan bool) {
	if scan {
		val = redact.String(val)
	}
	l.b = logline.String(l.b, key, val)
}
func (l *jsonLine) num(key string, v int64)        { l.b = logline.Int(l.b, key, v) }
func (l *jsonLine) ms(key string, d time.Duration) { l.b = logline.Millis(l.b, key, d) }
func (l *jsonLine) flag(key string, v bool)        { l.b = logline.Bool(l.b, key, v) }

// accessFields lends finish the access line's fields, with room for
// every optional one so that appending never grows the slice (growslice
// showed in the 256 B profile).
var accessFields = sync.Pool{New: func() any { return &zapFields{fs: make([]zap.Field, 0, 20)} }}

// accessLines lends writeAccessLine its line buffers.
var accessLines = sync.Pool{New: func() any { return &jsonLine{b: make([]byte, 0, 1024)} }}
