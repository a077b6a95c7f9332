package gateway

import (
	"net/url"
	"testing"
)

// TestMatch: routing is on the path as received; a spelling of a route's
// own segment other than the plain one is no route. What lies below
// /registry is normalisePath's (TestNormalisePath).
func TestMatch(t *testing.T) {
	t.Parallel()
	cases := map[string]route{
		"/sync":                   routeSync,
		"/registry":               routeRegistry,
		"/registry/":              routeRegistry,
		"/registry/schemas/a%20b": routeRegistry,
		"/registry/schemas/x-1":   routeRegistry,
		"/registry/a%2Fb":         routeRegistry, // refused by normalisePath
		"/%73ync":                 routeNone,
		"/Sync":                   routeNone,
		"/sync/":                  routeNone,
		"/sync;x":                 routeNone,
		"/registry%2fx":           routeNone,
		"/Registry/x":             routeNone,
		"/%72egistry/x":           routeNone,
		"/svc_live_abc":           routeNone,
	}
	for raw, want := range cases {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := match(u); got != want {
			t.Errorf("match(%s) = %s, want %s", raw, got, want)
		}
	}
}
