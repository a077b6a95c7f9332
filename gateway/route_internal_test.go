package gateway

import (
	"net/url"
	"testing"
)

// TestMatch: routing is on the path as forwarded, and anything an upstream
// could normalise into another path is no route.
func TestMatch(t *testing.T) {
	t.Parallel()
	cases := map[string]route{
		"/sync":                    routeSync,
		"/registry":                routeRegistry,
		"/registry/":               routeRegistry,
		"/registry/schemas/a%20b":  routeRegistry,
		"/registry/schemas/x-1":    routeRegistry,
		"/%73ync":                  routeNone,
		"/Sync":                    routeNone,
		"/sync/":                   routeNone,
		"/sync;x":                  routeNone,
		"/registry%2fx":            routeNone,
		"/registry/a%2Fb":          routeNone,
		"/registry/a%5cb":          routeNone,
		"/registry/..;/sync":       routeNone,
		"/registry/x;jsessionid=1": routeNone,
		"/registry/../sync":        routeNone,
		"/registry/%2e%2e/sync":    routeNone,
		"/registry/.%2e/sync":      routeNone,
		"/registry//x":             routeNone,
		"/registry/./x":            routeNone,
		"/registry/a%00":           routeNone,
		"/%72egistry/x":            routeNone,
		"/svc_live_abc":            routeNone,
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
