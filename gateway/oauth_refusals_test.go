package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/gateway"
)

// assertOAuthError checks an RFC 6749 §5.2 error: JSON with exactly error
// and error_description, the description in §5.2's characters.
func assertOAuthError(t *testing.T, status int, h http.Header, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d (%s)", status, wantStatus, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not JSON: %q", body)
	}
	desc, _ := m["error_description"].(string)
	if m["error"] != wantCode || desc == "" || len(m) != 2 {
		t.Errorf("body %q, want error %q and a description only", body, wantCode)
	}
	for _, c := range desc {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			t.Errorf("error_description %q has %q, outside RFC 6749 §5.2", desc, c)
		}
	}
}

// TestTokenEndpointRefusalsAreOAuthShaped: a row with OAuthErrors (the
// token endpoint) gets the gateway's own refusals (405, 413, a key in the
// URL, an unknown method) as RFC 6749 §5.2 errors, not the spec's body.
func TestTokenEndpointRefusalsAreOAuthShaped(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	e := newEnv(t, envOpts{endpoints: []gateway.Endpoint{
		{Path: "/oauth2/token", Methods: []string{http.MethodPost}, Form: true, MaxBodyBytes: 64, OAuthErrors: true, Handler: ok},
	}})
	for _, c := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"GET (405)", "GET", "/oauth2/token", "", 405},
		{"body over the cap (413)", "POST", "/oauth2/token", strings.Repeat("a", 65), 413},
		{"a key in the query (400)", "POST", "/oauth2/token?client_secret=" + url.QueryEscape(e.LiveKey), "grant_type=client_credentials", 400},
		{"an unknown method", "BREW", "/oauth2/token", "", 405},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, e.URL+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			assertOAuthError(t, resp.StatusCode, resp.Header, b, c.want, "invalid_request")
			if strings.Contains(string(b), e.LiveKey) {
				t.Error("the body echoes the key")
			}
		})
	}
}

// TestPlainHTTPRedirectIgnoresHost: the plain-HTTP redirect's Location
// names a configured host, never the client's Host: a configured name
// (any letter case, a trailing dot) is kept, any other Host goes to the
// first configured name, and with none configured the answer is 400.
func TestPlainHTTPRedirectIgnoresHost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, host string
		hosts      []string
		want       string // Location; "" for a 400
	}{
		{"a configured name", "api.example.com", []string{"keygate.example.com", "api.example.com"}, "https://api.example.com:8443/sync?a=1"},
		{"a configured name, other case, trailing dot", "API.Example.COM.:80", []string{"keygate.example.com", "api.example.com"}, "https://api.example.com:8443/sync?a=1"},
		{"an attacker's Host", "evil.example", []string{"keygate.example.com"}, "https://keygate.example.com:8443/sync?a=1"},
		{"a Host with a path trick", "evil.example/x", []string{"keygate.example.com"}, "https://keygate.example.com:8443/sync?a=1"},
		{"no configured names", "keygate.example.com", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(&gateway.PlainHTTP{HTTPSPort: "8443", Hosts: c.hosts})
			defer srv.Close()
			req, _ := http.NewRequest("GET", srv.URL+"/sync?a=1", nil)
			req.Host = c.host
			cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if c.want == "" {
				if resp.StatusCode != 400 {
					t.Errorf("status %d, want 400", resp.StatusCode)
				}
				return
			}
			if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || got != c.want {
				t.Errorf("%d Location %q, want 308 %q", resp.StatusCode, got, c.want)
			}
		})
	}
}

// TestPlainHTTPClientSecretPost: a token request with client_secret in its
// form over plain HTTP is refused (an RFC 6749 error at the token
// endpoint), counted in keygate_cleartext_credentials_total{kind=
// "client_secret"} and warned about with the key id, never the secret.
func TestPlainHTTPClientSecretPost(t *testing.T) {
	t.Parallel()
	const secret = "svc_live_0123456789abcdefghijABCDEFGHIJ"
	core, logs := observer.New(zapcore.WarnLevel)
	exposed := gateway.NewExposedCounter(prometheus.NewRegistry())
	srv := httptest.NewServer(&gateway.PlainHTTP{Hosts: []string{"keygate.example.com"}, TokenPath: "/oauth2/token", Logger: zap.New(core), Exposed: exposed})
	defer srv.Close()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"k_123"}, "client_secret": {secret}}.Encode()
	resp, err := http.Post(srv.URL+"/oauth2/token", "application/x-www-form-urlencoded", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertOAuthError(t, resp.StatusCode, resp.Header, b, 400, "invalid_request")
	if n := testutil.ToFloat64(exposed.WithLabelValues("client_secret")); n != 1 {
		t.Errorf("client_secret exposures counted %v, want 1", n)
	}
	entries := logs.All()
	if len(entries) != 1 || entries[0].ContextMap()["key_id"] != "k_123" || entries[0].ContextMap()["kind"] != "client_secret" {
		t.Fatalf("warnings %+v, want one with key_id k_123", entries)
	}
	for _, en := range entries {
		for _, v := range en.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, secret) {
				t.Error("the log holds the secret")
			}
		}
	}
	// A form without client_secret is refused as before, not counted.
	resp, err = http.Post(srv.URL+"/oauth2/token", "application/x-www-form-urlencoded", strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := testutil.ToFloat64(exposed.WithLabelValues("client_secret")); resp.StatusCode != 400 || n != 1 {
		t.Errorf("form without a secret: %d, counted %v", resp.StatusCode, n)
	}
}
