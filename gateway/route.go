package gateway

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/keygate/keygate/product"
)

// route is where a request path goes.
type route int

const (
	routeNone route = iota
	routeSync
	routeRegistry
)

func (r route) String() string {
	switch r {
	case routeSync:
		return "sync"
	case routeRegistry:
		return "registry"
	}
	return "other"
}

// product is the product a route belongs to.
func (r route) product() string {
	switch r {
	case routeSync:
		return product.Extraction
	case routeRegistry:
		return product.Registry
	}
	return ""
}

// match maps a request to a route by its path exactly as it is forwarded
// (the escaped form, byte for byte), so that what was routed is what the
// upstream reads. Only the exact path /sync is the extraction endpoint;
// /registry and everything below it is the registry. Everything else,
// percent-encoded spellings of those (/%73ync) included, is no route.
// Below /registry, a path that an upstream could normalise into another
// is refused outright: empty, "." or ".." segments, decoded or encoded;
// ";" (path parameters: Tomcat reads /..;/ as /../); a backslash or an
// encoded slash, backslash or dot; an encoded control character. So
// /registry/../sync, /registry%2fx or /registry/..;/sync can never reach
// an upstream that would clean them into something else.
func match(u *url.URL) route {
	p := u.EscapedPath()
	if p == "/sync" {
		return routeSync
	}
	if p == "/registry" || strings.HasPrefix(p, "/registry/") {
		if !canonical(p) || !canonical(u.Path) || ambiguousInPath(p) {
			return routeNone
		}
		return routeRegistry
	}
	return routeNone
}

// canonical reports whether path has no empty, "." or ".." segments (a
// trailing slash is allowed).
func canonical(path string) bool {
	segs := strings.Split(path[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i != len(segs)-1) {
			return false
		}
	}
	return true
}

// ambiguousInPath reports whether an escaped path holds what upstreams
// read differently: ";", a backslash, or a percent-encoded "/", "\", "."
// or control character.
func ambiguousInPath(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case ';', '\\':
			return true
		case '%':
			if i+2 >= len(p) {
				return true
			}
			b, ok := unhex2(p[i+1], p[i+2])
			if !ok || b == '/' || b == '\\' || b == '.' || b < 0x20 || b == 0x7f {
				return true
			}
		}
	}
	return false
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
