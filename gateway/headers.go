package gateway

import (
	"net/http"
	"net/url"
	"strings"
)

// clientIPHeaders are the headers by which proxies and CDNs pass on a
// client's address. A client may send any of them; none reaches the
// upstream, which gets the gateway's own X-Real-IP and X-Forwarded-For.
var clientIPHeaders = [...]string{"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Client-Ip", "X-Cluster-Client-Ip"}

// scrubOutbound removes from an outbound request's headers what the
// upstream must not see or could misread: the credentials, the client's
// claims about addresses and identity, names with "_" (CGI, WSGI, PHP and
// nginx with underscores_in_headers read x_api_key as x-api-key), and
// anything under X-Keygate-. It works on canonical and non-canonical keys
// alike.
func scrubOutbound(h http.Header) {
	delete(h, "X-Api-Key")
	delete(h, "Authorization")
	delete(h, "Expect") // the gateway has already read part of the body
	delete(h, "Forwarded")
	delete(h, "Trailer")
	delete(h, "Tracestate")
	for _, k := range clientIPHeaders {
		delete(h, k)
	}
	for k := range h {
		switch {
		case strings.IndexByte(k, '_') >= 0,
			len(k) >= 10 && strings.EqualFold(k[:10], "X-Keygate-"),
			strings.EqualFold(k, "x-api-key"), strings.EqualFold(k, "authorization"):
			delete(h, k)
		}
	}
}

// Refusals of /sync requests whose headers keygate cannot read the way
// every upstream would.
const (
	msgContentType     = "the request must carry exactly one Content-Type header, multipart/form-data with a boundary"
	msgContentEncoding = "Unsupported Media Type: /sync does not accept a Content-Encoding; send the form uncompressed"
	msgQueryContext    = "the contextId belongs in the multipart form, not in the query string"
)

// checkSyncHeaders refuses a /sync request whose framing around the form
// is ambiguous: not exactly one Content-Type (a last-header-wins upstream
// would parse another body than keygate checked), a Content-Encoding (the
// upstream would decompress and read another form), or a context field
// in the query string (werkzeug's request.values and PHP's $_REQUEST mix it
// with the form).
func checkSyncHeaders(r *http.Request) refusal {
	if len(r.Header["Content-Type"]) != 1 {
		return refusal{kind: refContentType}
	}
	if ce := r.Header["Content-Encoding"]; len(ce) > 0 && (len(ce) > 1 || !strings.EqualFold(strings.TrimSpace(ce[0]), "identity")) {
		return refusal{kind: refContentEncoding}
	}
	if r.URL.RawQuery != "" && queryNamesContext(r.URL.RawQuery) {
		return refusal{kind: refQueryContext}
	}
	return refusal{}
}

// queryNamesContext reports whether a query string has a parameter that
// an upstream could take for the context field, or does not parse (and so
// could be read in more than one way).
func queryNamesContext(q string) bool {
	vs, err := url.ParseQuery(q)
	if err != nil {
		return true
	}
	for k := range vs {
		if i := strings.IndexByte(k, '['); i >= 0 {
			k = k[:i]
		}
		if strings.EqualFold(strings.TrimSpace(k), "contextid") {
			return true
		}
	}
	return false
}
