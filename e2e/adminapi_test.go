package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// adminAPI is the admin API of a running binary, with a client that
// authenticates.
type adminAPI struct {
	t      *testing.T
	base   string
	client *http.Client
	token  string
	usage  bool // the credential has usage:read
}

func (a *adminAPI) call(method, path, body string) (int, map[string]any, http.Header) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			a.t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, m, resp.Header
}

// startWithAdminAPI starts the binary with the admin API on a free port
// and extra admin_api lines.
func startWithAdminAPI(t *testing.T, adminYAML string) (*gateway, string) {
	t.Helper()
	addr := testkit.FreeAddr(t)
	g := startGateway(t, gwOpts{extra: fmt.Sprintf("admin_api:\n  enabled: true\n  listen: %q\n%s", addr, adminYAML)})
	return g, "https://" + addr
}

// keyLifecycle creates a consumer and a key through the API, uses the key
// on /sync, revokes it through the API and sees it refused.
func keyLifecycle(t *testing.T, g *gateway, a *adminAPI) {
	t.Helper()
	status, con, _ := a.call("POST", "/v1/consumers", `{"name":"Acme Corp","contexts":["`+ctxA+`"]}`)
	if status != http.StatusCreated {
		t.Fatalf("create consumer: %d %v", status, con)
	}
	body := `{"product":"extraction","env":"live","context":"` + ctxA + `","consumer":"` + con["id"].(string) + `","name":"e2e"}`
	status, issued, h := a.call("POST", "/v1/keys", body)
	if status != http.StatusCreated || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("issue: %d %v %v", status, issued, h)
	}
	key, id := issued["key"].(string), issued["id"].(string)
	eventually(t, testkit.HangCheck, func() string {
		if s, b, _ := g.post(key, ctxA, []byte("%PDF-1.4 e2e")); s != http.StatusOK {
			return fmt.Sprintf("/sync with the issued key: %d %s", s, b)
		}
		return ""
	})
	if s, b, _ := g.post(key, ctxB, []byte("%PDF-1.4 e2e")); s != http.StatusForbidden {
		t.Errorf("/sync with another context: %d %s", s, b)
	}
	if a.usage {
		// GET /v1/keys/{id}/usage reads what the gateway flushed (once a
		// second): one admitted request at least, one context refusal.
		eventually(t, testkit.HangCheck, func() string {
			status, u, _ := a.call("GET", "/v1/keys/"+id+"/usage?since=1h", "")
			if status != http.StatusOK {
				return fmt.Sprintf("usage: %d %v", status, u)
			}
			if adm, _ := u["admitted"].(float64); adm < 1 || u["refused_context"] != float64(1) || u["last_used_at"] == nil {
				return fmt.Sprintf("usage not flushed yet: %v", u)
			}
			return ""
		})
	}
	if status, rec, _ := a.call("POST", "/v1/keys/"+id+"/revoke", ""); status != http.StatusOK || rec["status"] != "revoked" {
		t.Fatalf("revoke: %d %v", status, rec)
	}
	eventually(t, testkit.HangCheck, func() string {
		if s, b, _ := g.post(key, ctxA, []byte("%PDF-1.4 e2e")); s != http.StatusUnauthorized {
			return fmt.Sprintf("/sync with the revoked key: %d %s", s, b)
		}
		return ""
	})
	// The CLI sees what the API did: one implementation, one store.
	for _, r := range g.list() {
		if r.ID == id && r.Status != "revoked" {
			t.Errorf("keys list shows %s as %s", id, r.Status)
		}
	}
	if strings.Contains(g.logs.String(), key) {
		t.Error("the issued key appears in keygate's log")
	}
}

// TestAdminAPIClientCertificate: a client certificate from
// admin_api.client_ca_file, its CN mapped to scopes, manages consumers
// and keys on the real binary.
func TestAdminAPIClientCertificate(t *testing.T) {
	t.Parallel()
	ca := testkit.NewCA(t, "ops CA")
	caFile := filepath.Join(t.TempDir(), "ops-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	g, base := startWithAdminAPI(t, fmt.Sprintf("  client_ca_file: %q\n  client_cert_scopes:\n    support: [keys:read, keys:write, consumers:read, consumers:write]\n    auditor: [audit:read]\n", caFile))
	withCert := func(cn string) *http.Client {
		tc := &tls.Config{InsecureSkipVerify: true} // the self-signed server cert is checked in package tlsconf
		if cn != "" {
			tc.Certificates = []tls.Certificate{ca.ClientCert(t, cn)}
		}
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
		t.Cleanup(c.CloseIdleConnections)
		return c
	}
	keyLifecycle(t, g, &adminAPI{t: t, base: base, client: withCert("support")})

	auditor := &adminAPI{t: t, base: base, client: withCert("auditor")}
	if status, p, _ := auditor.call("POST", "/v1/keys", `{"product":"registry","env":"test"}`); status != http.StatusForbidden || p["type"] != "urn:keygate:problem:forbidden" {
		t.Errorf("auditor issuing a key: %d %v", status, p)
	}
	anon := &adminAPI{t: t, base: base, client: withCert("")}
	if status, _, h := anon.call("GET", "/v1/keys", ""); status != http.StatusUnauthorized || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("no credential: %d %v", status, h)
	}
	if status, doc, _ := (&adminAPI{t: t, base: base, client: withCert("support")}).call("GET", "/v1/openapi.json", ""); status != http.StatusOK || doc["openapi"] != "3.1.0" {
		t.Errorf("openapi.json: %d", status)
	}
}

// TestAdminAPIToken: an admin token made with `keygate admin-tokens
// create` manages consumers and keys on the real binary.
func TestAdminAPIToken(t *testing.T) {
	t.Parallel()
	g, base := startWithAdminAPI(t, "")
	out, errOut, err := g.keygate("admin-tokens", "create", "--name", "e2e", "--scopes", "keys:read,keys:write,consumers:read,consumers:write,usage:read")
	if err != nil {
		t.Fatalf("admin-tokens create: %v\n%s", err, errOut)
	}
	token := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	keyLifecycle(t, g, &adminAPI{t: t, base: base, client: client, token: token, usage: true})
	if status, _, _ := (&adminAPI{t: t, base: base, client: client, token: token + "x"}).call("GET", "/v1/keys", ""); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", status)
	}
	if strings.Contains(g.logs.String(), token) {
		t.Error("the admin token appears in keygate's log")
	}
}
