package gateway

import (
	"io"
	"net/http"
	"time"

	"github.com/keygate/keygate/usage"
)

// refusalKind names one way keygate answers a request itself instead of
// the upstream: a refusal, or the record of a client that left first. Each
// kind is one row of refusals, the single table of what it means.
type refusalKind uint8

const (
	refNone refusalKind = iota
	refMethod
	refSyncMethod
	refCredentialInURL
	refAuthThrottled
	refCredential
	refAuthUnavailable
	refClientGone // the client left during the key or limiter check
	refNotFound
	refPath
	refOverride
	refWrongProduct
	refForbiddenAddress
	refForbiddenOperation
	refForbiddenPlan
	refConcurrency
	refRate
	refQuota
	refLimiterUnavailable
	refTooLarge
	refContentType
	refContentEncoding
	refQueryContext
	refContext
	refBody
	refBodyIdle
	refBodySlow
	refUpstream
	refUpstreamClientGone // the client left once the request was admitted
	numRefusalKinds
)

// statusRateLimit in the table stands for Config.RateLimitStatus (429 or
// 403).
const statusRateLimit = -1

// refusalSpec is a row of refusals.
type refusalSpec struct {
	// status is the answer's status; statusRateLimit for the configured
	// rate-limit status. StatusClientClosedRequest is logged, never sent.
	status int
	// message is the spec's error message; a refusal may give its own.
	message string
	// counted says whether the key's usage counts the request, as outcome.
	// Only kinds that come after the key was accepted are counted;
	// usage.Admitted only for kinds that come after the limiter admitted
	// the request (its token and quota are spent).
	counted bool
	outcome usage.Outcome
	// label is the reason of keygate_refusals_total, and for a limit
	// (limited) of keygate_ratelimited_total too.
	label   string
	limited bool
	// reason is the access log's reason; a refusal may give its own (the
	// credential kind logs why the credential was refused).
	reason string
}

// refusals is the one table of refusal kinds.
var refusals = [numRefusalKinds]refusalSpec{
	refMethod:             {status: http.StatusMethodNotAllowed, message: "method not allowed", label: "method", reason: "method"},
	refSyncMethod:         {status: http.StatusMethodNotAllowed, message: "method not allowed on /sync; use POST", label: "method", reason: "method"},
	refCredentialInURL:    {status: http.StatusBadRequest, message: "credentials belong in the x-api-key or Authorization header, never in the URL", label: "credential_in_url", reason: "credential_in_url"},
	refAuthThrottled:      {status: http.StatusTooManyRequests, message: msgThrottled, label: "auth_throttled", reason: "auth_throttled"},
	refCredential:         {status: http.StatusUnauthorized, message: "Unauthorized: invalid or missing API key", label: "credential", reason: "credential"},
	refAuthUnavailable:    {status: http.StatusServiceUnavailable, message: "key store unavailable, try again shortly", label: "store_error", reason: "store_error"},
	refClientGone:         {status: StatusClientClosedRequest, message: "client closed request", label: "client_gone", reason: "client_gone"},
	refNotFound:           {status: http.StatusNotFound, message: "no such endpoint", label: "not_found", reason: "not_found"},
	refPath:               {status: http.StatusBadRequest, message: msgPath, label: "path", reason: "path"},
	refOverride:           {status: http.StatusBadRequest, message: msgOverride, label: "override", reason: "override"},
	refWrongProduct:       {status: http.StatusForbidden, message: "Forbidden: this credential is not valid for this product", counted: true, outcome: usage.RefusedProduct, label: "wrong_product", reason: "wrong_product"},
	refForbiddenAddress:   {status: http.StatusForbidden, message: "Forbidden: requests from this address are not allowed for this key", counted: true, outcome: usage.ForbiddenAddress, label: "forbidden_address", reason: "forbidden_address"},
	refForbiddenOperation: {status: http.StatusForbidden, message: "Forbidden: this key lacks permission for this operation", counted: true, outcome: usage.ForbiddenOperation, label: "forbidden_operation", reason: "forbidden_operation"},
	refForbiddenPlan:      {status: http.StatusForbidden, message: "Forbidden: your plan does not include this operation", counted: true, outcome: usage.ForbiddenPlan, label: "forbidden_plan", reason: "forbidden_plan"},
	refConcurrency:        {status: statusRateLimit, limited: true, message: "Rate Limited: too many concurrent requests for this credential; retry when one finishes", counted: true, outcome: usage.RefusedConcurrency, label: "concurrency", reason: "concurrency"},
	refRate:               {status: statusRateLimit, limited: true, message: "Rate Limited: too many requests, back off and retry", counted: true, outcome: usage.RefusedRate, label: "rate", reason: "rate"},
	refQuota:              {status: statusRateLimit, limited: true, message: "Rate Limited: usage quota exhausted", counted: true, outcome: usage.RefusedQuota, label: "quota", reason: "quota"},
	refLimiterUnavailable: {status: http.StatusServiceUnavailable, message: "rate limiter unavailable, try again shortly", label: "limiter_error", reason: "limiter_error"},
	refTooLarge:           {status: http.StatusRequestEntityTooLarge, message: "request body too large", counted: true, outcome: usage.Admitted, label: "too_large", reason: "too_large"},
	refContentType:        {status: http.StatusBadRequest, message: msgContentType, counted: true, outcome: usage.Admitted, label: "content_type", reason: "content_type"},
	refContentEncoding:    {status: http.StatusUnsupportedMediaType, message: msgContentEncoding, counted: true, outcome: usage.Admitted, label: "content_encoding", reason: "content_encoding"},
	refQueryContext:       {status: http.StatusBadRequest, message: msgQueryContext, counted: true, outcome: usage.Admitted, label: "query_context", reason: "query_context"},
	refContext:            {status: http.StatusForbidden, message: "Invalid Context: the contextId does not belong to this credential", counted: true, outcome: usage.RefusedContext, label: "context", reason: "context"},
	refBody:               {status: http.StatusBadRequest, message: "could not read the request body", counted: true, outcome: usage.Admitted, label: "body", reason: "body"},
	refBodyIdle:           {status: http.StatusRequestTimeout, message: "Request Timeout: no request body data; the request was abandoned", counted: true, outcome: usage.Admitted, label: "body_idle", reason: "body_idle"},
	refBodySlow:           {status: http.StatusRequestTimeout, message: "Request Timeout: the request body arrives too slowly; the request was abandoned", counted: true, outcome: usage.Admitted, label: "body_slow", reason: "body_slow"},
	refUpstream:           {status: http.StatusBadGateway, message: "upstream unavailable", counted: true, outcome: usage.Admitted, label: "upstream", reason: "upstream"},
	refUpstreamClientGone: {status: StatusClientClosedRequest, message: "client closed request", counted: true, outcome: usage.Admitted, label: "client_gone", reason: "upstream"},
}

// refusal is keygate's own answer to a request: its kind, and where the
// request's details change them, the status, message or log reason that
// replace the kind's. The zero value (refNone) means no refusal: go on.
// Every stage of the request path returns one, and Gateway.refuse is the
// one place that writes it out.
type refusal struct {
	kind    refusalKind
	status  int    // 0: the kind's
	message string // "": the kind's
	reason  string // "": the kind's
	detail  string // for the log only (an upstream error's text)
}

// refused reports whether f is a refusal.
func (f refusal) refused() bool { return f.kind != refNone }

// spec is f's row of refusals.
func (f refusal) spec() *refusalSpec { return &refusals[f.kind] }

// statusFor is the status f answers with, rls being the configured
// rate-limit status.
func (f refusal) statusFor(rls int) int {
	s := f.status
	if s == 0 {
		s = f.spec().status
	}
	if s == statusRateLimit {
		s = rls
	}
	return s
}

func (f refusal) msg() string {
	if f.message != "" {
		return f.message
	}
	return f.spec().message
}

func (f refusal) logReason() string {
	if f.reason != "" {
		return f.reason
	}
	return f.spec().reason
}

// lingerUnreadBody is how long the connection of a request answered
// before its body was read goes on reading that body after the answer,
// before it is closed. net/http reads up to 256 KiB of an unread body when
// the handler returns, so that a client still sending is not reset (and
// its answer lost) by a close with unread data; this bounds it in time.
const lingerUnreadBody = 500 * time.Millisecond

// A body that has already arrived whole (a small upload, pipelined
// requests) is read before a refusal, so that the connection stays open
// for the client's next request; that read takes at most drainWait and
// drainMax bytes, and a body that does not end within them closes the
// connection instead.
const (
	drainWait = 20 * time.Millisecond
	drainMax  = 64 << 10
)

// drainArrived reads the rest of r's body when it is already there and
// reports whether it reached the body's end. A request that waits for 100
// Continue is not read (reading would ask the client for its body).
func drainArrived(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > drainMax || r.Header.Get("Expect") != "" {
		return false
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(drainWait)) != nil {
		return false
	}
	n, err := io.CopyN(io.Discard, r.Body, drainMax+1)
	if err != io.EOF || n > drainMax {
		return false // the read error, a timeout among them, closes the connection
	}
	_ = rc.SetReadDeadline(time.Time{})
	return true
}

// closeUnreadBody makes an HTTP/1 answer written before the request body
// was read to its end the connection's last: "Connection: close", so that
// net/http sends it at once rather than after reading up to 256 KiB of the
// body, and, with linger, a read deadline lingerUnreadBody away, so that
// what net/http still reads of the body after the answer is bounded in
// time (a body that was cut keeps its deadline, already past).
func closeUnreadBody(w http.ResponseWriter, linger bool) {
	w.Header().Set("Connection", "close")
	if linger {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(lingerUnreadBody))
	}
}

// refuse writes f out: the spec's error body, the access log's reason and
// message, and keygate_refusals_total. A client that left gets nothing (it
// is logged as 499). On HTTP/1 an answer written before the request body
// was read to its end reads the rest when it has already arrived
// (drainArrived), and otherwise closes the connection (closeUnreadBody):
// net/http would read and discard up to 256 KiB of the unread body before
// sending the answer, so a client that declares a body and sends none
// would wait, and could hold the connection, for as long as it liked.
func (g *Gateway) refuse(w *recorder, r *http.Request, st *state, f refusal) {
	msg := f.msg()
	st.refusal = f.kind
	st.reason, st.errMessage = f.logReason(), msg
	if f.detail != "" {
		st.errMessage += ": " + f.detail
	}
	g.metrics.refused(f.kind).Inc()
	if f.spec().limited {
		g.metrics.RateLimited.WithLabelValues(st.principal.Env, f.spec().label).Inc()
	}
	status := f.statusFor(g.cfg.RateLimitStatus)
	if status == StatusClientClosedRequest {
		w.status = status
		return
	}
	if r.ProtoMajor == 1 && r.ContentLength != 0 && !st.body.eof.Load() {
		cut := st.body.fired.Load() != cutNone
		// Once proxied, the transport may still be reading the body.
		if cut || st.upstream != nil || !drainArrived(w, r) {
			closeUnreadBody(w, !cut)
		}
	}
	if st.oauthErrors {
		WriteOAuthError(w, st.trace.ID, status, "invalid_request", msg)
		return
	}
	WriteError(w, st.trace.ID, status, msg)
}
