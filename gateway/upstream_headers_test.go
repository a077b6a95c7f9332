package gateway_test

import (
	"net/http"
	"slices"
	"testing"
)

// TestUpstreamCannotSetTheGatewaysHeaders: the headers keygate sets on a
// response (its trace id, the rate-limit headers, HSTS) are keygate's
// alone, whatever the upstream answers, in any letter case.
func TestUpstreamCannotSetTheGatewaysHeaders(t *testing.T) {
	t.Parallel()
	upstream := map[string]string{
		"X-Trace-Id":                "upstream-trace",
		"ratelimit-limit":           "1",
		"RateLimit-Remaining":       "0",
		"RATELIMIT-RESET":           "999",
		"strict-transport-security": "max-age=0",
	}
	e := newEnv(t, envOpts{
		hsts: "max-age=31536000",
		extractionH: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range upstream {
				w.Header()[k] = []string{v} // as written, not canonicalized
			}
			w.WriteHeader(http.StatusOK)
		}),
	})
	r := e.sync(e.LiveKey, ctxA)
	if r.Status != http.StatusOK {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	for k, v := range upstream {
		if got := r.Header.Values(k); slices.Contains(got, v) {
			t.Errorf("%s: %q, the upstream's %q got through", k, got, v)
		}
	}
	if got := r.Header.Values("Strict-Transport-Security"); len(got) != 1 || got[0] != "max-age=31536000" {
		t.Errorf("Strict-Transport-Security = %q, want keygate's alone", got)
	}
	if got := r.Header.Values("X-Trace-Id"); len(got) != 1 || len(got[0]) != 32 {
		t.Errorf("X-Trace-Id = %q, want keygate's trace id alone", got)
	}
}
