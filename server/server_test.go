package server_test

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

func TestTLSListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	apiHost := strings.TrimPrefix(h.API, "https://")

	t.Run("TLS 1.1 is refused", func(t *testing.T) {
		c, err := tls.Dial("tcp", apiHost, &tls.Config{MaxVersion: tls.VersionTLS11, InsecureSkipVerify: true})
		if err == nil {
			c.Close()
			t.Fatalf("a TLS 1.1 handshake succeeded (version %x)", c.ConnectionState().Version)
		}
	})

	t.Run("self-signed certificate verifies for localhost", func(t *testing.T) {
		roots := poolFromFile(t, filepath.Join(h.Cfg.TLS.SelfSignedDir, "cert.pem"))
		c, err := tls.Dial("tcp", apiHost, &tls.Config{RootCAs: roots, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("client trusting cert.pem, ServerName localhost: %v", err)
		}
		defer c.Close()
		if v := c.ConnectionState().Version; v < tls.VersionTLS12 {
			t.Errorf("negotiated TLS version %x", v)
		}
	})

	t.Run("HTTP/2 and HSTS on success and error responses", func(t *testing.T) {
		ok := h.sync(keyCred(h.LiveKey), ctxA)
		if ok.Status != 200 {
			t.Fatalf("status %d: %s", ok.Status, ok.Body)
		}
		denied := h.sync(cred{}, ctxA)
		assertError(t, denied, 401, "")
		for name, r := range map[string]result{"200": ok, "401": denied} {
			if r.Proto != 2 {
				t.Errorf("%s: HTTP/%d, want HTTP/2", name, r.Proto)
			}
			if got := r.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
				t.Errorf("%s: Strict-Transport-Security = %q", name, got)
			}
		}
	})
}

func TestHSTSDisabled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.TLS.HSTS.Enabled = false }})
	for name, r := range map[string]result{
		"success": h.sync(keyCred(h.LiveKey), ctxA),
		"error":   h.sync(keyCred(h.LiveKey), ctxB),
	} {
		if r.Status != 200 && r.Status != 403 {
			t.Fatalf("%s: status %d: %s", name, r.Status, r.Body)
		}
		if got, ok := r.Header["Strict-Transport-Security"]; ok {
			t.Errorf("%s: Strict-Transport-Security = %q with tls.hsts.enabled false", name, got)
		}
	}
}

func TestFilesModeReloadsWithoutRestart(t *testing.T) {
	t.Parallel()
	ca := testkit.NewCA(t, "keygate server test CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := ca.Leaf(t, 1001)
	writeFileAtomic(t, certFile, c1)
	writeFileAtomic(t, keyFile, k1)
	h := newHarness(t, setup{roots: ca.Pool, mod: func(c *config.Config) {
		c.TLS.Mode = "files"
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
	}})
	apiHost := strings.TrimPrefix(h.API, "https://")
	serial := func() int64 {
		c, err := tls.Dial("tcp", apiHost, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != 1001 {
		t.Fatalf("serving serial %d, want 1001", got)
	}
	if r := h.sync(keyCred(h.LiveKey), ctxA); r.Status != 200 {
		t.Fatalf("sync over the files certificate: %d %s", r.Status, r.Body)
	}

	c2, k2 := ca.Leaf(t, 2002)
	writeFileAtomic(t, keyFile, k2)
	writeFileAtomic(t, certFile, c2)
	testkit.Eventually(t, testkit.HangCheck, "the replaced certificate to be served", func() error { return testkit.Equal(serial(), 2002) })
	h.Client.Transport.(*http.Transport).CloseIdleConnections()
	if r := h.sync(keyCred(h.LiveKey), ctxA); r.Status != 200 {
		t.Fatalf("sync after the reload: %d %s", r.Status, r.Body)
	}
}

func TestPlainHTTPListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mod: func(c *config.Config) { c.Server.HTTPListen = "127.0.0.1:0" }})
	if h.Plain == "" {
		t.Fatal("server.http_listen set but HTTPAddr is nil")
	}

	t.Run("credentials in clear are refused and never forwarded", func(t *testing.T) {
		cases := []struct {
			name string
			cred cred
			kind string
		}{
			{"valid x-api-key", keyCred(h.LiveKey), "api_key"},
			{"bearer token", tokCred(h.secret("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl")), "authorization"},
		}
		for _, tc := range cases {
			before := h.metric("keygate_cleartext_credentials_total", "kind", tc.kind)
			r, _ := h.syncTo(h.Plain, tc.cred, ctxA)
			assertError(t, r, 400, "HTTPS required")
			if got := h.metric("keygate_cleartext_credentials_total", "kind", tc.kind); got != before+1 {
				t.Errorf("%s: keygate_cleartext_credentials_total{kind=%q} went %v -> %v", tc.name, tc.kind, before, got)
			}
		}
		// A GET carrying a key is refused too, not redirected.
		assertError(t, h.get(h.Plain, "/registry/schemas", keyCred(h.RegistryKey)), 400, "HTTPS required")
		if n := h.Extraction.hits.Load() + h.Registry.hits.Load(); n != 0 {
			t.Errorf("upstreams saw %d requests from the plain-HTTP listener", n)
		}
		logs := h.Logs.String()
		if !strings.Contains(logs, `"key_id":"`+h.LiveID+`"`) {
			t.Errorf("the log does not name the exposed key's id %s:\n%s", h.LiveID, logs)
		}
		if strings.Contains(logs, h.LiveKey) || strings.Contains(logs, h.RegistryKey) || strings.Contains(logs, "Bearer ") {
			t.Error("a credential sent in clear appears in the log")
		}
		// (Every harness also checks its whole log for every key and token
		// it handed out, at cleanup.)
	})

	t.Run("client_secret_post in clear is refused, counted and logged by key id", func(t *testing.T) {
		before := h.metric("keygate_cleartext_credentials_total", "kind", "client_secret")
		body := "grant_type=client_credentials&client_id=" + h.LiveID + "&client_secret=" + h.LiveKey
		rq, _ := http.NewRequest(http.MethodPost, h.Plain+"/oauth2/token", strings.NewReader(body))
		rq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r := h.do(rq)
		if r.Status != 400 || !strings.Contains(string(r.Body), "HTTPS required") {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if got := h.metric("keygate_cleartext_credentials_total", "kind", "client_secret"); got != before+1 {
			t.Errorf("keygate_cleartext_credentials_total{kind=client_secret} went %v -> %v", before, got)
		}
		if logs := h.Logs.String(); !strings.Contains(logs, `"kind":"client_secret"`) || strings.Contains(logs, h.LiveKey) {
			t.Errorf("want a client_secret warning without the key")
		}
	})

	t.Run("key-less GET is redirected to HTTPS on the API port", func(t *testing.T) {
		r := h.get(h.Plain, "/registry/schemas?page=2", cred{})
		if r.Status != http.StatusPermanentRedirect {
			t.Fatalf("status %d, want 308", r.Status)
		}
		_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(h.API, "https://"))
		want := "https://127.0.0.1:" + apiPort + "/registry/schemas?page=2"
		if got := r.Header.Get("Location"); got != want {
			t.Errorf("Location = %q, want %q", got, want)
		}
	})

	t.Run("every answer has an access line, and no credential in it", func(t *testing.T) {
		// A key in the path is refused (kind url) and masked in the line.
		assertError(t, h.get(h.Plain, "/sync/"+h.LiveKey, cred{}), 400, "HTTPS required")
		r := h.get(h.Plain, "/registry/schemas?page=3", cred{})
		var lines []map[string]any
		for _, l := range strings.Split(h.Logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["logger"] == "access" && m["listener"] == "plain_http" {
				lines = append(lines, m)
			}
			if strings.Contains(l, h.LiveKey) {
				t.Errorf("a key sent in clear is in the log: %s", l)
			}
		}
		byStatus := map[float64]int{}
		for _, m := range lines {
			byStatus[m["status"].(float64)]++
			if m["msg"] != "request" || m["method"] == nil || m["remote"] != "127.0.0.1" || m["duration_ms"] == nil || m["bytes_out"] == nil {
				t.Errorf("access line lacks a field: %v", m)
			}
		}
		// The earlier subtests: four refusals (400) and one redirect
		// (308); this one: a refusal and a redirect.
		if byStatus[400] != 5 || byStatus[308] != 2 {
			t.Errorf("plain-HTTP access lines by status %v, want 5 × 400 and 2 × 308", byStatus)
		}
		last := lines[len(lines)-1]
		if last["path"] != "/registry/schemas" || last["trace_id"] != r.Header.Get("X-Trace-Id") || last["trace_id"] == "" {
			t.Errorf("the redirect's line %v: want path /registry/schemas and trace id %q", last, r.Header.Get("X-Trace-Id"))
		}
	})
}

func TestAdminListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{})
	if r := h.sync(keyCred(h.LiveKey), ctxA); r.Status != 200 {
		t.Fatalf("sync: %d %s", r.Status, r.Body)
	}

	t.Run("healthz", func(t *testing.T) {
		if r := h.get(h.Admin, "/healthz", cred{}); r.Status != 200 {
			t.Errorf("/healthz: %d %s", r.Status, r.Body)
		}
	})
	t.Run("readyz", func(t *testing.T) {
		r := h.get(h.Admin, "/readyz", cred{})
		var body struct {
			Status string            `json:"status"`
			Checks map[string]string `json:"checks"`
		}
		if r.Status != 200 || json.Unmarshal(r.Body, &body) != nil || body.Status != "ready" {
			t.Errorf("/readyz: %d %s", r.Status, r.Body)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("/readyz Content-Type %q", ct)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		if got := h.metric("keygate_requests_total", "route", "sync", "status", "200"); got != 1 {
			t.Errorf(`keygate_requests_total{route="sync",status="200"} = %v, want 1`, got)
		}
	})
	t.Run("admin endpoints are not on the API listener", func(t *testing.T) {
		for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
			r := h.get(h.API, p, keyCred(h.LiveKey))
			assertError(t, r, 404, "no such endpoint")
			if strings.Contains(string(r.Body), "go_goroutines") {
				t.Errorf("%s on the API listener exposes metrics", p)
			}
		}
	})
	t.Run("authenticated requests are counted per method and env, never per key", func(t *testing.T) {
		before := h.metric("keygate_authenticated_requests_total", "method", "api_key", "env", "live")
		for range 3 {
			if r := h.sync(keyCred(h.LiveKey), ctxA); r.Status != 200 {
				t.Fatalf("sync: %d", r.Status)
			}
		}
		if got := h.metric("keygate_authenticated_requests_total", "method", "api_key", "env", "live"); got != before+3 {
			t.Errorf(`keygate_authenticated_requests_total{method="api_key",env="live"} went %v -> %v, want +3`, before, got)
		}
	})
}
