package gateway

import "strings"

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
		return "extraction"
	case routeRegistry:
		return "registry"
	}
	return ""
}

// match maps a path, as received and not cleaned, to a route. Only the exact
// path /sync is the extraction endpoint; /registry and everything below it
// is the registry. Paths with empty or dot segments are refused outright, so
// that /registry/../sync or //sync can never reach an upstream that would
// clean them into something else.
func match(path string) route {
	if path == "/sync" {
		return routeSync
	}
	if path == "/registry" || strings.HasPrefix(path, "/registry/") {
		if !canonical(path) {
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
