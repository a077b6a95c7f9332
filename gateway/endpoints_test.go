package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// TestEndpointRows: the rows keygate answers itself need no key, answer
// only their methods (405 with Allow), cap their body, refuse a credential
// in the URL, and leave /sync and /registry as they were.
func TestEndpointRows(t *testing.T) {
	t.Parallel()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		_, _ = io.WriteString(w, r.Method+" "+string(b))
	})
	e := newEnv(t, envOpts{endpoints: []gateway.Endpoint{
		{Path: "/oauth2/token", Methods: []string{http.MethodPost}, Form: true, MaxBodyBytes: 64, Handler: echo},
		{Path: "/.well-known/jwks.json", Methods: []string{http.MethodGet}, Handler: echo},
	}})
	cases := []struct {
		name, method, path, body string
		chunked                  bool
		want                     int
		wantBody, allow          string
	}{
		{name: "form under the cap, no key", method: "POST", path: "/oauth2/token", body: "grant_type=x", want: 200, wantBody: "POST grant_type=x"},
		{name: "form over the cap", method: "POST", path: "/oauth2/token", body: strings.Repeat("a", 65), want: 413, wantBody: "request body too large"},
		{name: "chunked form over the cap", method: "POST", path: "/oauth2/token", body: strings.Repeat("a", 65), chunked: true, want: 413, wantBody: "body:"},
		{name: "GET on the token endpoint", method: "GET", path: "/oauth2/token", want: 405, allow: "POST"},
		{name: "a key in the URL", method: "POST", path: "/oauth2/token?client_secret=" + e.LiveKey, want: 400, wantBody: "never in the URL"},
		{name: "GET without a key", method: "GET", path: "/.well-known/jwks.json", want: 200, wantBody: "GET "},
		{name: "HEAD where GET is", method: "HEAD", path: "/.well-known/jwks.json", want: 200},
		{name: "POST on a GET row", method: "POST", path: "/.well-known/jwks.json", body: "x", want: 405, allow: "GET, HEAD"},
		{name: "a body where none is read", method: "GET", path: "/.well-known/jwks.json", body: "x", want: 413},
		{name: "a path beside a row", method: "GET", path: "/.well-known/jwks.json/", want: 401},
		{name: "/sync still needs a key", method: "POST", path: "/sync", want: 401},
		{name: "/registry still needs a key", method: "GET", path: "/registry/x", want: 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
				if c.chunked {
					body = io.MultiReader(strings.NewReader(c.body))
				}
			}
			req, err := http.NewRequest(c.method, e.URL+c.path, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || !strings.Contains(string(b), c.wantBody) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, b, c.want, c.wantBody)
			}
			if c.allow != "" && resp.Header.Get("Allow") != c.allow {
				t.Errorf("Allow = %q, want %q", resp.Header.Get("Allow"), c.allow)
			}
			if resp.Header.Get("X-Trace-Id") == "" {
				t.Error("no X-Trace-Id")
			}
			if strings.Contains(string(b), e.LiveKey) {
				t.Error("the key echoed")
			}
		})
	}
}

func TestEndpointRowsAreChecked(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	base := gateway.Config{
		Upstreams: gateway.UpstreamsConfig{
			Extraction: gateway.UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}},
			Registry:   gateway.UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}},
		},
		MaxBodyBytes: 1 << 20,
		Limits:       map[string]policy.Limit{"live": {Rate: 1, Per: time.Second, Burst: 1}, "test": {Rate: 1, Per: time.Second, Burst: 1}},
	}
	cases := map[string][]gateway.Endpoint{
		"/sync is not a row of its own": {{Path: "/sync", Methods: []string{"POST"}, Handler: h}},
		"nor is a path below /registry": {{Path: "/registry/token", Methods: []string{"POST"}, Handler: h}},
		"a path twice":                  {{Path: "/a", Methods: []string{"GET"}, Handler: h}, {Path: "/a", Methods: []string{"GET"}, Handler: h}},
		"no handler":                    {{Path: "/a", Methods: []string{"GET"}}},
		"a form without a cap":          {{Path: "/a", Methods: []string{"POST"}, Form: true, Handler: h}},
		"a relative path":               {{Path: "a", Methods: []string{"GET"}, Handler: h}},
	}
	for name, eps := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := base
			cfg.Endpoints = eps
			if _, err := gateway.New(cfg, gateway.Deps{Auth: okAuth{}, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{})}); err == nil || !strings.Contains(err.Error(), "Config.Endpoints") {
				t.Errorf("New = %v, want an error naming Config.Endpoints", err)
			}
		})
	}
}
