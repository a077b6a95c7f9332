package gateway

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/keygate/keygate/product"
)

// route is a row of the API listener's route table (routes): where a
// request path goes.
type route int

const (
	routeNone route = iota
	routeSync
	routeRegistry
	// routeLocal is an Endpoint keygate answers itself (Config.Endpoints):
	// the token endpoint, discovery metadata, the JWKS.
	routeLocal
)

// bodyMode says how a route's request body is handled.
type bodyMode uint8

const (
	// bodyStreamContext: streamed to the upstream, with the multipart
	// contextId checked against the credential's context first (/sync).
	bodyStreamContext bodyMode = iota
	// bodyStream: streamed to the upstream under the body cap.
	bodyStream
	// bodySmallForm: a small application/x-www-form-urlencoded body read
	// by keygate itself under the endpoint's own cap.
	bodySmallForm
	// bodyNone: no body is read.
	bodyNone
)

// routeSpec is one row of the route table.
type routeSpec struct {
	name string // metric and log label
	// path is the path the row owns, exactly as received (escaped form,
	// byte for byte); with subtree it also owns every path below it
	// (path + "/..."). A row with no path is matched otherwise.
	path    string
	subtree bool
	methods []string
	allow   string // methods as an Allow header; "" for every method
	product string
	body    bodyMode
}

// allows reports whether the row accepts method.
func (s *routeSpec) allows(method string) bool {
	if len(s.methods) == 0 {
		return true
	}
	for _, m := range s.methods {
		if m == method {
			return true
		}
	}
	return false
}

// routes is the fixed part of the API listener's route table: the two
// proxied routes, which take a credential before any body byte is read.
// The rows keygate answers itself without one (routeLocal) come from
// Config.Endpoints and are looked up by exact path (Gateway.local).
var routes = [...]routeSpec{
	routeNone:     {name: "other"},
	routeSync:     {name: "sync", path: "/sync", methods: []string{http.MethodPost}, allow: http.MethodPost, product: product.Extraction, body: bodyStreamContext},
	routeRegistry: {name: "registry", path: "/registry", subtree: true, product: product.Registry, body: bodyStream},
	routeLocal:    {name: "local", body: bodySmallForm},
}

func (r route) spec() *routeSpec {
	if r < 0 || int(r) >= len(routes) {
		return &routes[routeNone]
	}
	return &routes[r]
}

func (r route) String() string { return r.spec().name }

// product is the product a route belongs to.
func (r route) product() string { return r.spec().product }

// match maps a request to the row of routes that owns its path exactly as
// it arrived (the escaped form, byte for byte). Only the exact path /sync
// is the extraction endpoint; /registry and everything below it is the
// registry.
// Everything else, percent-encoded or other-case spellings of those
// (/%73ync, /Sync, /registry%2fx) included, is no route. Below /registry
// the path is then read as an upstream would read it (normalisePath):
// what could be read in more than one way is refused, the rest is matched
// and forwarded in its normal form.
func match(u *url.URL) route {
	p := u.EscapedPath()
	for i := range routes {
		s := &routes[i]
		if s.path == "" {
			continue
		}
		if p == s.path || s.subtree && len(p) > len(s.path) && p[len(s.path)] == '/' && strings.HasPrefix(p, s.path) {
			return route(i)
		}
	}
	return routeNone
}

func unhex2(h, l byte) (byte, bool) {
	x, ok1 := unhex(h)
	y, ok2 := unhex(l)
	return x<<4 | y, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// knownMethod reports whether method is one of HTTP's standard methods;
// anything else is refused before it is looked at further.
func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}
