package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/keygate/keygate/redact"
)

// Endpoint is a row of the route table that keygate answers itself,
// without an API key: the OAuth 2.0 token endpoint, its discovery
// metadata, its JWKS. The gateway checks the method, refuses credentials
// in the URL, caps the body and hands the request to Handler, which
// authenticates its own clients where it must.
type Endpoint struct {
	// Path is the exact escaped path ("/oauth2/token").
	Path string
	// Methods are the methods it answers; others get 405 with Allow.
	// HEAD is accepted wherever GET is.
	Methods []string
	// Form says the body is a small application/x-www-form-urlencoded
	// form of at most MaxBodyBytes (the token request); otherwise the
	// endpoint reads no body.
	Form         bool
	MaxBodyBytes int64
	// OAuthErrors says the gateway's own refusals of this route (method,
	// credential in the URL, body too large) are RFC 6749 §5.2 errors
	// (invalid_request), not the spec's error body: the token endpoint's
	// clients parse those.
	OAuthErrors bool
	// Handler answers the request.
	Handler http.Handler
}

// localRoute is a compiled Endpoint.
type localRoute struct {
	spec    routeSpec
	max     int64
	handler http.Handler
	oauth   bool // Endpoint.OAuthErrors
}

// compileEndpoints checks eps and builds their rows.
func compileEndpoints(eps []Endpoint) (map[string]*localRoute, error) {
	if len(eps) == 0 {
		return nil, nil
	}
	m := make(map[string]*localRoute, len(eps))
	for i, e := range eps {
		switch {
		case !strings.HasPrefix(e.Path, "/") || e.Path == "/sync" || e.Path == "/registry" || strings.HasPrefix(e.Path, "/registry/"):
			return nil, fmt.Errorf("gateway: Config.Endpoints[%d]: path %q is not a path of its own", i, e.Path)
		case e.Handler == nil || len(e.Methods) == 0:
			return nil, fmt.Errorf("gateway: Config.Endpoints[%d] (%s) needs a handler and methods", i, e.Path)
		case e.Form && e.MaxBodyBytes <= 0:
			return nil, fmt.Errorf("gateway: Config.Endpoints[%d] (%s) reads a form and needs MaxBodyBytes", i, e.Path)
		}
		if _, dup := m[e.Path]; dup {
			return nil, fmt.Errorf("gateway: Config.Endpoints: %s twice", e.Path)
		}
		methods := append([]string(nil), e.Methods...)
		for _, mm := range e.Methods {
			if mm == http.MethodGet {
				methods = append(methods, http.MethodHead)
			}
		}
		body := bodyNone
		if e.Form {
			body = bodySmallForm
		}
		m[e.Path] = &localRoute{
			spec:    routeSpec{name: routes[routeLocal].name, path: e.Path, methods: methods, allow: strings.Join(methods, ", "), body: body},
			max:     e.MaxBodyBytes,
			handler: e.Handler,
			oauth:   e.OAuthErrors,
		}
	}
	return m, nil
}

// serveLocal answers a routeLocal request: method, credential-in-URL and
// body cap, then the endpoint's own handler.
func (g *Gateway) serveLocal(w *recorder, r *http.Request, lr *localRoute) refusal {
	if !knownMethod(r.Method) {
		return refusal{kind: refMethod}
	}
	if redact.Contains(r.URL.RawQuery) {
		return refusal{kind: refCredentialInURL}
	}
	if !lr.spec.allows(r.Method) {
		w.Header().Set("Allow", lr.spec.allow)
		return refusal{kind: refMethod}
	}
	if lr.spec.body == bodyNone {
		if r.ContentLength > 0 {
			return refusal{kind: refTooLarge}
		}
		r.Body = http.NoBody
	} else {
		if r.ContentLength > lr.max {
			return refusal{kind: refTooLarge}
		}
		r.Body = http.MaxBytesReader(w.ResponseWriter, r.Body, lr.max)
	}
	lr.handler.ServeHTTP(w, r)
	return refusal{}
}
