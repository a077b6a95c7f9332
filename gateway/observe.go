package gateway

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/keygate/keygate/redact"
)

// What the request path reports besides its answer: the access line's
// timings and, when Deps.Tracer is set, OpenTelemetry spans. With no
// tracer every hook below is one nil check.

// millis is d in milliseconds, for the access line's *_ms fields.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latency is how long the client waited for the response headers: until
// the upstream's headers came back when the request was forwarded, else
// the whole exchange (keygate's own answers are written at once).
func latency(st *state, start time.Time, elapsed time.Duration) time.Duration {
	if st.upLatency > 0 && !st.upStart.IsZero() {
		if d := st.upStart.Add(st.upLatency).Sub(start); d < elapsed {
			return d
		}
	}
	return elapsed
}

// Span attribute keys. The key id is the credential's public id; no
// attribute ever holds the key, a token or an Authorization value.
const (
	AttrRoute   = attribute.Key("http.route")
	AttrStatus  = attribute.Key("http.response.status_code")
	AttrKeyID   = attribute.Key("keygate.key_id")
	AttrReason  = attribute.Key("keygate.refusal.reason")
	AttrAuth    = attribute.Key("keygate.auth.method")
	AttrEnv     = attribute.Key("keygate.env")
	AttrProduct = attribute.Key("keygate.product")
	AttrUpName  = attribute.Key("keygate.upstream")
	AttrOutcome = attribute.Key("keygate.outcome")
)

// Span names of the request's stages, children of the server span.
const (
	SpanAuthenticate = "keygate.authenticate"
	SpanLimiter      = "keygate.ratelimit"
	SpanContext      = "keygate.context_check"
	SpanUpstream     = "keygate.upstream"
)

// stage is one traced stage of the request path; its zero value (no
// tracer) does nothing.
type stage struct{ span oteltrace.Span }

// stage starts a child span of ctx's span, when tracing is on and the
// request's server span is recorded; ctx is returned unchanged otherwise
// (an unsampled request's children would not be recorded either, so they
// are not started).
func (g *Gateway) stage(ctx context.Context, name string) (context.Context, stage) {
	if g.tracer == nil || !oteltrace.SpanFromContext(ctx).IsRecording() {
		return ctx, stage{}
	}
	ctx, sp := g.tracer.Start(ctx, name, oteltrace.WithSpanKind(oteltrace.SpanKindInternal))
	return ctx, stage{sp}
}

// end closes the stage with its outcome ("ok" when empty and err is nil,
// else a refusal reason) and, when err is set, an error status (redacted,
// though the authenticators' and limiters' errors name backends, never
// keys).
func (s stage) end(outcome string, err error) {
	if s.span == nil {
		return
	}
	if outcome == "" && err == nil {
		outcome = "ok"
	}
	if outcome != "" {
		s.span.SetAttributes(AttrOutcome.String(outcome))
	}
	if err != nil {
		s.span.SetStatus(codes.Error, redact.String(err.Error()))
	}
	s.span.End()
}

// endServerSpan names the request's server span (started by the
// listener's tracing handler) by its route and records what keygate
// decided: status, key id, refusal reason.
func (g *Gateway) endServerSpan(r *http.Request, st *state, status int) {
	sp := oteltrace.SpanFromContext(r.Context())
	if !sp.IsRecording() {
		return
	}
	route := st.route.String()
	sp.SetName(r.Method + " " + route)
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, AttrRoute.String(route), AttrStatus.Int(status))
	if st.authed {
		p := &st.principal
		attrs = append(attrs, AttrKeyID.String(p.ID), AttrAuth.String(string(p.Method)), AttrEnv.String(p.Env), AttrProduct.String(st.route.product()))
	}
	if st.reason != "" {
		attrs = append(attrs, AttrReason.String(st.reason))
	}
	if st.upstream != nil {
		attrs = append(attrs, AttrUpName.String(st.upstream.name))
	}
	sp.SetAttributes(attrs...)
	if status >= 500 {
		sp.SetStatus(codes.Error, redact.String(st.errMessage))
	}
}

// tracedRoundTrip sends req upstream inside a client span and hands the
// upstream that span's context in traceparent (replacing the one rewrite
// set), so the upstream's spans are its children. An unsampled request
// keeps rewrite's traceparent: same trace id, not sampled.
func tracedRoundTrip(tr oteltrace.Tracer, upstream string, rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	ctx, sp := tr.Start(req.Context(), SpanUpstream, oteltrace.WithSpanKind(oteltrace.SpanKindClient),
		oteltrace.WithAttributes(AttrUpName.String(upstream),
			attribute.String("http.request.method", req.Method),
			attribute.String("server.address", req.URL.Host)))
	defer sp.End()
	delete(req.Header, "Tracestate")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		sp.SetStatus(codes.Error, "upstream round trip failed")
		return resp, err
	}
	sp.SetAttributes(AttrStatus.Int(resp.StatusCode))
	if resp.StatusCode >= 500 {
		sp.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}
