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
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/formctx"
	"github.com/keygate/keygate/internal/clientip"
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
	Date time.Time
	// Sunset is when API keys stop working.
	Sunset time.Time
	// Link points to the migration guide.
	Link string
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
}

// Gateway is the API handler. Build it with New; it is safe for concurrent
// use.
type Gateway struct {
	cfg Config
	// rateHeaders are the rate-limit fields sent (Config.RateLimitHeaders).
	rateHeaders rateHeaders
	auth        Authenticator
	limiter     Limiter
	log         *zap.Logger // also writes the access lines, at info
	metrics     *Metrics
	usage       UsageRecorder
	tracer      oteltrace.Tracer
	proxy       *Proxy
	depHeaders  [][2]string

	failures       FailureLimiter
	concurrency    *ratelimit.Concurrency
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
	g.bodyLimits = bodyLimits{timeout: cfg.BodyIdleTimeout, rate: cfg.MinBodyRate, idleMsg: idleMessage(cfg.BodyIdleTimeout), slowMsg: slowMessage(cfg.MinBodyRate)}
	g.concurrencyMsg = concurrencyMessage(cfg.MaxConcurrent)
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.metrics == nil {
		g.metrics = NewMetrics(nil)
	}
	if g.proxy, err = newProxy(cfg.Upstreams, deps.Tracer, g.metrics, &g.bodyLimits, g.log); err != nil {
		return nil, err
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
	return g, nil
}

// state is what one request carries through the request path, the proxy
// and the log.
type state struct {
	trace      trace
	client     netip.Addr // see clientip.TrustedProxies.ClientAddr
	route      route
	principal  auth.Principal
	authed     bool
	admitted   bool // by the rate limiter
	refusal    refusalKind
	reason     string
	upstream   *upstream
	upStart    time.Time
	upLatency  time.Duration
	spilled    bool
	errMessage string
	body       clientBody
	form       *formctx.Body // the /sync body as formctx streams it upstream
	small      *smallBuf     // the whole /sync body, when readSmall read it
	tiny       smallBuf      // small's memory when the body is tiny
	rec        recorder      // the response as ServeHTTP wraps it

	// path is the request path operations are matched on: the decoded
	// path an upstream reads (normalisePath); fwdPath is the escaped path
	// forwarded when it differs from the one received.
	path, fwdPath string
	// oauthErrors: refusals are RFC 6749 §5.2 errors (Endpoint.OAuthErrors).
	oauthErrors bool
}

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
	h["X-Trace-Id"] = []string{st.trace.ID}
	if g.cfg.HSTS != "" && r.TLS != nil {
		h["Strict-Transport-Security"] = []string{g.cfg.HSTS}
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

// serve is the request path, in order: method and URL, credential,
// route and product, policy, concurrency slot, rate limit and quota, the
// body (the context of a /sync form), proxy. Each step either refuses the
// request or goes on to the next.
func (g *Gateway) serve(w *recorder, r *http.Request, st *state) refusal {
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

	// The credential.
	if g.failures != nil {
		if f := g.throttled(w, st); f.refused() {
			return f
		}
	}
	_, sp := g.stage(r.Context(), SpanAuthenticate)
	v, err := g.auth.Authenticate(r)
	sp.end(string(v.Reason), err)
	if err != nil {
		return g.backendFailed(w, r, st, refAuthUnavailable, "authentication backend failed", err)
	}
	if !v.OK {
		if v.Challenge != "" {
			w.Header().Set("WWW-Authenticate", v.Challenge)
		}
		g.metrics.AuthFailures.WithLabelValues(string(v.Reason)).Inc()
		if g.failures != nil {
			if f := g.failedAuth(w, r, st, v); f.refused() {
				return f
			}
		}
		return refusal{kind: refCredential, status: v.Status, message: v.Message, reason: string(v.Reason)}
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

	// Route, product and policy.
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

	// Concurrency, rate limit and quota.
	if !g.concurrency.Acquire(p.ID) {
		w.Header().Set("Retry-After", "1")
		return refusal{kind: refConcurrency, message: g.concurrencyMsg}
	}
	defer g.concurrency.Release(p.ID)
	lim, limitID := g.limitFor(p)
	ctx, sp := g.stage(r.Context(), SpanLimiter)
	d, err := g.limiter.Allow(ctx, limitID, lim)
	sp.end(string(d.Reason), err)
	if err != nil {
		return g.backendFailed(w, r, st, refLimiterUnavailable, "rate limiter failed", err)
	}
	setRateHeaders(w.Header(), g.rateHeaders, lim, d)
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter, 1), 10))
		if d.Reason == ratelimit.ReasonQuota {
			return refusal{kind: refQuota, message: "Rate Limited: usage quota exhausted for this " + quotaHolder(p, limitID) + "; it renews in " + strconv.FormatInt(ceilSeconds(d.Reset, 1), 10) + "s"}
		}
		return refusal{kind: refRate}
	}
	st.admitted = true

	// The body, then the proxy.
	if r.ContentLength > g.cfg.MaxBodyBytes {
		return refusal{kind: refTooLarge}
	}
	mode := st.route.spec().body
	if mode == bodyStreamContext {
		if f := checkSyncHeaders(r); f.refused() {
			return f
		}
	}
	g.watchBody(w, r, st, mode != bodyStreamContext) // formctx has a cap of its own
	defer st.body.stop()
	if mode == bodyStreamContext {
		_, sp := g.stage(r.Context(), SpanContext)
		body, err := formctx.Read(r.Body, r.Header.Get("Content-Type"), formctx.Config{
			MaxBytes:    g.cfg.MaxBodyBytes,
			MemoryBytes: g.cfg.SpoolMemoryBytes,
			TempDir:     g.cfg.SpoolDir,
		})
		if err != nil {
			sp.end("body", nil)
			return g.bodyLimits.refusal(r, st, err)
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
			return g.bodyLimits.refusal(r, st, err)
		case ok:
			st.small = buf
		default:
			r.Body, st.form = body, body
		}
	}
	return g.proxy.forward(w, r, st)
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

// bodyErr is the first failure to read the body sent upstream: a check
// formctx failed while the body streamed (a conflicting context further
// on, a truncated upload, the size cap), else the client body's own read
// error. It tells such a failure, reported to the client as what it is,
// from a failed upstream (502). Safe to call while the transport's
// goroutine still reads the body.
func (st *state) bodyErr() error {
	if st.form != nil {
		if err := st.form.Err(); err != nil {
			return err
		}
	}
	return st.body.failure()
}

// bytesIn is the request body's size as the access log and the usage
// count it: the bytes read from the client for a request forwarded
// upstream, 0 for one refused before.
func (st *state) bytesIn() int64 {
	if st.upstream == nil {
		return 0
	}
	return st.body.read.Load()
}

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
	g.metrics.requests(st.route, status).Inc()
	g.metrics.duration(st.route).Observe(elapsed.Seconds())
	if st.authed && g.usage != nil {
		g.recordUsage(st, start.Add(elapsed))
	}
	if g.tracer != nil {
		g.endServerSpan(r, st, status)
	}
	if ce := g.log.Check(zapcore.InfoLevel, "request"); ce != nil {
		// Lent from a pool: every core encodes the fields before Write
		// returns.
		fp := accessFields.Get().(*[]zap.Field)
		fs := accessLine((*fp)[:0], r, w, st, status, start, elapsed)
		ce.Write(fs...)
		clear(fs)
		*fp = fs[:0]
		accessFields.Put(fp)
	}
}

// accessLine appends the access line's fields to fs. The redacting core
// scans every string field for credentials but the redact.Verbatim ones:
// values the gateway made itself that cannot hold one (a trace id of 32
// hex digits, names from fixed sets). What came from the client (the
// path, the remote address, an unknown method, the key id, refusal texts)
// is scanned.
func accessLine(fs []zap.Field, r *http.Request, w *recorder, st *state, status int, start time.Time, elapsed time.Duration) []zap.Field {
	method := zap.String("method", r.Method)
	if knownMethod(r.Method) {
		method = redact.Verbatim("method", r.Method)
	}
	fs = append(fs,
		redact.Verbatim("trace_id", st.trace.ID),
		method,
		zap.String("path", safePath(r.URL.EscapedPath())),
		redact.Verbatim("route", st.route.String()),
		zap.Int("status", status),
		zap.Int64("bytes_in", st.bytesIn()),
		zap.Int64("bytes_out", w.bytes),
		zap.Float64("latency_ms", millis(latency(st, start, elapsed))),
		zap.Float64("duration_ms", millis(elapsed)),
		zap.String("remote", st.remote(r)),
	)
	if st.authed {
		am := zap.String("auth", string(st.principal.Method))
		switch st.principal.Method {
		case auth.MethodAPIKey, auth.MethodOAuth2, auth.MethodBearer:
			am = redact.Verbatim("auth", string(st.principal.Method))
		}
		fs = append(fs,
			zap.String("key_id", st.principal.ID),
			am,
			redact.Verbatim("product", st.route.product()),
			zap.String("env", st.principal.Env))
	}
	if st.upstream != nil {
		fs = append(fs, redact.Verbatim("upstream", st.upstream.name), zap.Float64("upstream_latency_ms", millis(st.upLatency)))
	}
	if st.reason != "" {
		fs = append(fs, zap.String("reason", st.reason), zap.String("error", st.errMessage))
	}
	if st.spilled {
		fs = append(fs, zap.Bool("spilled", true))
	}
	return fs
}

// accessFields lends finish the access line's fields, with room for
// every optional one.
var accessFields = sync.Pool{New: func() any { fs := make([]zap.Field, 0, 20); return &fs }}
