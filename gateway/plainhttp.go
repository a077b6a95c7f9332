package gateway

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/internal/statuswriter"
	"github.com/keygate/keygate/redact"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// PlainHTTP guards the plain-HTTP listener. It never forwards anything: a
// request that carries a credential in clear is refused with "HTTPS
// required" (and the exposure is logged by key id and counted, so the
// operator can rotate the key); a key-less GET or HEAD is redirected to
// HTTPS; anything else is refused. It is safe for concurrent use.
type PlainHTTP struct {
	// HTTPSPort is the API listener's port for redirects; empty means 443.
	HTTPSPort string
	// Auth identifies a key sent in clear, for the log; may be nil.
	Auth Authenticator
	// Logger receives one warning per exposed credential (never the key).
	Logger *zap.Logger
	// Exposed counts credentials sent in clear, by kind: api_key (x-api-key
	// or an alias such as x_api_key), authorization, url (a key-shaped value
	// in the path or query, refused rather than redirected).
	Exposed *prometheus.CounterVec
}

// NewExposedCounter creates and registers keygate_cleartext_credentials_total.
func NewExposedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_cleartext_credentials_total",
		Help: "Requests that sent an API key or Authorization header over plain HTTP (refused; rotate the key).",
	}, []string{"kind"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// LogPlainAccess wraps the plain-HTTP listener's handler (ACME http-01
// answers in front of PlainHTTP) so that every request it answers gets an
// access line, as the API listener's do: message "request" on log, with
// listener "plain_http", the trace id the answer carries (none for an
// ACME answer), method, path (64 bytes at most), status, bytes out,
// duration and remote. Nothing is forwarded from this listener, so the
// line has no key id, upstream or bytes in; a credential in the path is
// masked by the redacting core, as in every other line.
func LogPlainAccess(log *zap.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statuswriter.Wrap(w)
		next.ServeHTTP(sw, r)
		ce := log.Check(zapcore.InfoLevel, "request")
		if ce == nil {
			return
		}
		status := sw.Status()
		if status == 0 {
			status = http.StatusOK
		}
		fields := make([]zap.Field, 0, 9)
		if id := w.Header().Get("X-Trace-Id"); id != "" {
			fields = append(fields, zap.String("trace_id", id))
		}
		fields = append(fields,
			zap.String("listener", "plain_http"),
			zap.String("method", r.Method),
			zap.String("path", safePath(r.URL.EscapedPath())),
			zap.Int("status", status),
			zap.Int64("bytes_out", sw.Bytes()),
			zap.Float64("duration_ms", millis(time.Since(start))),
			zap.String("remote", remoteString(r, peerAddr(r))),
		)
		ce.Write(fields...)
	})
}

func (p *PlainHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tr := newTrace(r.Header.Get("Traceparent"))
	w.Header().Set("X-Trace-Id", tr.ID)
	if r.ProtoMajor == 1 && r.ContentLength != 0 && !drainArrived(w, r) {
		// Every answer here comes before the body, which is never read:
		// sent at once, and the connection closed, unless the body had
		// already arrived whole.
		closeUnreadBody(w, true)
	}
	_, hasKey := r.Header["X-Api-Key"]
	_, hasAuthz := r.Header["Authorization"]
	inURL := redact.Contains(r.URL.RawQuery) || redact.Contains(r.URL.EscapedPath()) || redact.Contains(r.URL.Path)
	if !inURL && r.URL.RawQuery != "" {
		if q, err := url.QueryUnescape(r.URL.RawQuery); err == nil {
			inURL = redact.Contains(q)
		}
	}
	if !inURL && r.URL.RawQuery != "" {
		inURL = queryNamesCredential(r.URL.RawQuery)
	}
	alias := !hasKey && !hasAuthz && credentialAlias(r.Header)
	if hasKey || hasAuthz || inURL || alias {
		kind := "authorization"
		switch {
		case hasKey, alias:
			kind = "api_key"
		case inURL:
			kind = "url"
		}
		if p.Exposed != nil {
			p.Exposed.WithLabelValues(kind).Inc()
		}
		if p.Logger != nil {
			fields := []zap.Field{zap.String("trace_id", tr.ID), zap.String("kind", kind), zap.String("remote", r.RemoteAddr)}
			if p.Auth != nil && hasKey {
				if v, err := p.Auth.Authenticate(r); err == nil && v.OK {
					fields = append(fields, zap.String("key_id", v.Principal.ID))
				}
			}
			p.Logger.Warn("credential sent over plain HTTP; refused, rotate it", fields...)
		}
		w.Header().Set("Connection", "close")
		WriteError(w, tr.ID, http.StatusBadRequest, "HTTPS required: credentials sent over plain HTTP are refused; rotate this credential")
		return
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			WriteError(w, tr.ID, http.StatusBadRequest, "HTTPS required")
			return
		}
		if p.HTTPSPort != "" && p.HTTPSPort != "443" {
			host = net.JoinHostPort(host, p.HTTPSPort)
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
		return
	}
	WriteError(w, tr.ID, http.StatusBadRequest, "HTTPS required")
}

// credentialAlias reports whether a header name reads as x-api-key or
// authorization to a server that maps "_" to "-" (CGI, WSGI, PHP, nginx
// with underscores_in_headers).
func credentialAlias(h http.Header) bool {
	for k := range h {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		n := strings.ReplaceAll(k, "_", "-")
		if strings.EqualFold(n, "x-api-key") || strings.EqualFold(n, "authorization") {
			return true
		}
	}
	return false
}

// credentialParams are query parameters that carry a credential, whatever
// its shape (OAuth 2.0 access tokens, keys pasted under a header's name).
var credentialParams = [...]string{"x-api-key", "x_api_key", "api_key", "apikey", "api-key", "key", "access_token", "token", "id_token", "authorization"}

// queryNamesCredential reports whether a query string has a parameter
// named like a credential.
func queryNamesCredential(q string) bool {
	vs, err := url.ParseQuery(q)
	if err != nil {
		return false
	}
	for k := range vs {
		for _, p := range credentialParams {
			if strings.EqualFold(strings.TrimSpace(k), p) {
				return true
			}
		}
	}
	return false
}
