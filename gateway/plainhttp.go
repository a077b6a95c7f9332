package gateway

import (
	"io"
	"mime"
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
	// Hosts are the host names a redirect may send a client to (the TLS
	// names from the configuration), lower case. A request whose Host is
	// one of them is sent to it; any other is sent to the first: the
	// client's Host is never copied into Location. None means no
	// redirect: every request is refused with "HTTPS required".
	Hosts []string
	// TokenPath is the token endpoint's path (empty: none). Its refusals
	// here are RFC 6749 §5.2 errors, as on the API listener.
	TokenPath string
	// Auth identifies a key sent in clear, for the log; may be nil.
	Auth Authenticator
	// Logger receives one warning per exposed credential (never the key).
	Logger *zap.Logger
	// Exposed counts credentials sent in clear, by kind: api_key (x-api-key
	// or an alias such as x_api_key), authorization, url (a key-shaped value
	// in the path or query, refused rather than redirected), client_secret
	// (a token request's client_secret_post form).
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
	var clientID string
	secretInForm := false
	if form, whole, ok := smallForm(w, r); ok {
		// A token request's form (client_secret_post) is read, as far as
		// it has arrived, to count and log the exposed key, never to use
		// it.
		vs, err := url.ParseQuery(string(form))
		if _, has := vs["client_secret"]; err == nil && has {
			secretInForm, clientID = true, vs.Get("client_id")
		}
		if !whole {
			closeUnreadBody(w, true)
		}
	} else if r.ProtoMajor == 1 && r.ContentLength != 0 && !drainArrived(w, r) {
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
	if hasKey || hasAuthz || inURL || alias || secretInForm {
		kind := "authorization"
		switch {
		case hasKey, alias:
			kind = "api_key"
		case inURL:
			kind = "url"
		case secretInForm && !hasAuthz:
			kind = "client_secret"
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
			if kind == "client_secret" && clientID != "" {
				// The form's client_id is the key id (never the secret).
				fields = append(fields, zap.String("key_id", safeID(clientID)))
			}
			p.Logger.Warn("credential sent over plain HTTP; refused, rotate it", fields...)
		}
		w.Header().Set("Connection", "close")
		p.refuse(w, r, tr.ID, "HTTPS required: credentials sent over plain HTTP are refused; rotate this credential")
		return
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		host, ok := p.redirectHost(r.Host)
		if !ok {
			p.refuse(w, r, tr.ID, "HTTPS required")
			return
		}
		if p.HTTPSPort != "" && p.HTTPSPort != "443" {
			host = net.JoinHostPort(host, p.HTTPSPort)
		} else if strings.Contains(host, ":") {
			host = "[" + host + "]" // an IPv6 address
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
		return
	}
	p.refuse(w, r, tr.ID, "HTTPS required")
}

// refuse answers 400: an RFC 6749 §5.2 error at the token endpoint, the
// spec's error body elsewhere.
func (p *PlainHTTP) refuse(w http.ResponseWriter, r *http.Request, traceID, msg string) {
	if p.TokenPath != "" && r.URL.EscapedPath() == p.TokenPath {
		WriteOAuthError(w, traceID, http.StatusBadRequest, "invalid_request", msg)
		return
	}
	WriteError(w, traceID, http.StatusBadRequest, msg)
}

// redirectHost is the host a redirect names: the request's Host when it
// is one of Hosts (letter case, a trailing dot and the port aside), else
// the first of Hosts; false when there are none.
func (p *PlainHTTP) redirectHost(host string) (string, bool) {
	if len(p.Hosts) == 0 {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, h := range p.Hosts {
		if h == host {
			return h, true
		}
	}
	return p.Hosts[0], true
}

// maxPlainForm caps the form read from a plain-HTTP request: a token
// request's is a few hundred bytes.
const maxPlainForm = 4 << 10

// smallForm reads the body of a POST whose Content-Type is a form and
// that is at most maxPlainForm, as far as it arrives within drainWait:
// ok false for any other request; whole when it was read to its end.
func smallForm(w http.ResponseWriter, r *http.Request) (form []byte, whole, ok bool) {
	if r.ProtoMajor != 1 || r.Method != http.MethodPost || r.ContentLength == 0 || r.ContentLength > maxPlainForm || r.Header.Get("Expect") != "" {
		return nil, false, false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, false, false
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(drainWait)) != nil {
		return nil, false, true
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxPlainForm+1))
	if err != nil || len(b) > maxPlainForm {
		return b, false, true // the read error, a timeout among them, closes the connection
	}
	_ = rc.SetReadDeadline(time.Time{})
	return b, true, true
}

// safeID trims a client-sent key id for the log: printable ASCII, 64
// bytes at most.
func safeID(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(c rune) rune {
		if c <= 0x20 || c >= 0x7f {
			return '?'
		}
		return c
	}, s)
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
