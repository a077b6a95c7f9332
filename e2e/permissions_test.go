package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/standin"
)

const (
	msgNoPermission = "Forbidden: this key lacks permission for this operation"
	msgNoFeature    = "Forbidden: your plan does not include this operation"
	msgNoAddress    = "Forbidden: requests from this address are not allowed for this key"
)

// registryCall makes method on /registry/x with key through c (g.Client
// when nil), plus header pairs, and returns the status and body.
func (g *gateway) registryCall(c *http.Client, method, key string, hdr ...string) (int, http.Header, []byte) {
	g.t.Helper()
	if c == nil {
		c = g.Client
	}
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader(`{"name":"x"}`)
	}
	req, err := http.NewRequest(method, g.API+"/registry/x", body)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		g.t.Fatalf("%s /registry/x: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// waitServed waits until g knows key (any answer but 401).
func (g *gateway) waitServed(key string) {
	g.t.Helper()
	eventually(g.t, testkit.HangCheck, func() string {
		if s, _, b := g.registryCall(nil, http.MethodHead, key); s == 401 {
			return fmt.Sprintf("key not served yet: %d %s", s, b)
		}
		return ""
	})
}

// TestPermissionsOnRealBinary is the issue's acceptance on the binary:
// a read-only registry key, a consumer that narrows, address rules with
// and without a trusted proxy, refusals answered at once before the
// body, the CLI's validation and `keys show`'s sources.
func TestPermissionsOnRealBinary(t *testing.T) {
	var hits atomic.Int64
	reg := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		standin.Handler{Name: "registry"}.ServeHTTP(w, r)
	})
	g := startGateway(t, gwOpts{registry: reg, serverYAML: "  trusted_proxies: [127.0.0.1]\n"})

	// A read-only registry key.
	ro := g.issue("--product", "registry", "--env", "live", "--name", "ro", "--permissions", "registry:read")
	g.waitServed(ro)
	if s, _, b := g.registryCall(nil, http.MethodGet, ro); s != 200 {
		t.Fatalf("GET with registry:read: %d %s", s, b)
	}
	before := hits.Load()
	for _, m := range []string{http.MethodPost, http.MethodDelete} {
		s, h, b := g.registryCall(nil, m, ro)
		specError(t, s, h, b, 403, msgNoPermission)
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("the upstream saw %d refused requests", n)
	}
	// Refused before the body: a POST that declares a body and sends none
	// is answered at once, whatever the size it declares.
	for _, n := range []int{1000, 50000000} {
		c := g.dialFrom(t, "")
		start := time.Now()
		fmt.Fprintf(c, "POST /registry/x HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", ro, n)
		// The body is never sent: an answer that waited for it would
		// not come before this deadline, the hang check.
		_ = c.SetReadDeadline(start.Add(testkit.HangCheck))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("Content-Length %d: no answer without the body (hang check): %v", n, err)
		}
		b, _ := io.ReadAll(resp.Body)
		took := time.Since(start)
		specError(t, resp.StatusCode, resp.Header, b, 403, msgNoPermission)
		t.Logf("Content-Length %d: 403 after %s", n, took.Round(time.Microsecond))
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("the upstream saw %d refused requests", n)
	}

	// keys show names each permission's source.
	id := keyID(t, g, "ro")
	out, _, err := g.keygate("keys", "show", id)
	if err != nil || !strings.Contains(out, "registry:read") || !strings.Contains(out, "denied by key") {
		t.Errorf("keys show: %v\n%s", err, out)
	}

	// A consumer limited to registry:read makes its keys' writes 403,
	// whatever the keys say.
	conOut, errOut, err := g.keygate("consumers", "create", "--name", "narrow", "--permissions", "registry:read")
	if err != nil {
		t.Fatalf("consumers create: %v\n%s", err, errOut)
	}
	con := strings.TrimSpace(conOut)
	writer := g.issue("--product", "registry", "--env", "live", "--consumer", con, "--permissions", "registry:read,registry:write")
	g.waitServed(writer)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		s, h, b := g.registryCall(nil, m, writer)
		specError(t, s, h, b, 403, msgNoPermission)
	}
	if s, _, b := g.registryCall(nil, http.MethodGet, writer); s != 200 {
		t.Errorf("the consumer's key reads: %d %s", s, b)
	}

	// Addresses: 10.0.0.0/8 only; 127.0.0.1 is a trusted proxy.
	ten := g.issue("--product", "registry", "--env", "live", "--allow-cidr", "10.0.0.0/8")
	g.waitServed(ten)
	untrusted := clientFrom(t, "127.0.0.2")
	for _, c := range []struct {
		name   string
		client *http.Client
		xff    string
		status int
	}{
		{"from 127.0.0.1 itself", nil, "", 403},
		{"through the trusted proxy", nil, "10.1.2.3", 200},
		{"IPv4-mapped through the trusted proxy", nil, "::ffff:10.1.2.3", 200},
		{"through the trusted proxy, another client", nil, "192.0.2.1", 403},
		{"the same header from an untrusted peer", untrusted, "10.1.2.3", 403},
	} {
		var hdr []string
		if c.xff != "" {
			hdr = []string{"X-Forwarded-For", c.xff}
		}
		s, h, b := g.registryCall(c.client, http.MethodGet, ten, hdr...)
		if c.status == 403 {
			specError(t, s, h, b, 403, msgNoAddress)
		} else if s != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, s, b, c.status)
		}
	}

	// An unknown operation is a clear CLI error, and nothing is issued.
	_, errOut, err = g.keygate("keys", "issue", "--product", "registry", "--env", "live", "--permissions", "registry:admin")
	if err == nil || !strings.Contains(errOut, `unknown operation "registry:admin"`) {
		t.Errorf("unknown operation: %v\n%s", err, errOut)
	}
	assertNoKeyInLogs(t, g)
}

// TestPlanFeaturesAcrossReplicas: a key on a plan without extraction:sync
// gets the plan's 403 on /sync from both replicas sharing Redis; moving it
// to another plan makes it 200 on both without a restart; usage counts the
// refusals as forbidden by plan.
func TestPlanFeaturesAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	gs := replicas(t, 2, rs.Addr, "redis", `    live: { rate: 1000, per: 1s, burst: 1000 }
    test: { rate: 1000, per: 1s, burst: 1000 }
  plans:
    registry_only: { rate: 100, per: 1s, burst: 100, features: [registry:read, registry:write] }
    full: { rate: 100, per: 1s, burst: 100 }`, "")
	key := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "planned")
	id := keyID(t, gs[0], "planned")
	if out, errOut, err := gs[0].keygate("keys", "update", id, "--plan", "registry_only"); err != nil {
		t.Fatalf("keys update: %v\n%s%s", err, out, errOut)
	}
	for i, g := range gs {
		eventually(t, testkit.HangCheck, func() string {
			if s, _, b := g.syncWith(g.Client, key); s != 403 || !strings.Contains(string(b), msgNoFeature) {
				return fmt.Sprintf("replica %d: %d %s", i, s, b)
			}
			return ""
		})
	}
	out, _, _ := gs[1].keygate("keys", "show", id)
	if !strings.Contains(out, "denied by plan registry_only") {
		t.Errorf("keys show does not name the plan:\n%s", out)
	}

	if out, errOut, err := gs[1].keygate("keys", "update", id, "--plan", "full"); err != nil {
		t.Fatalf("keys update: %v\n%s%s", err, out, errOut)
	}
	start := time.Now()
	pending := map[int]bool{0: true, 1: true}
	eventually(t, testkit.HangCheck, func() string {
		for i := range pending {
			if s, _, _ := gs[i].syncWith(gs[i].Client, key); s == 200 {
				delete(pending, i)
			}
		}
		if len(pending) > 0 {
			return fmt.Sprintf("%d replicas still refuse", len(pending))
		}
		return ""
	})
	t.Logf("moved to plan full: 200 on both replicas after %s", time.Since(start).Round(time.Millisecond))

	// Usage: forbidden by plan, counted by the replicas that refused.
	var u struct {
		ForbiddenPlan int64 `json:"forbidden_plan"`
		Admitted      int64 `json:"admitted"`
	}
	eventually(t, testkit.HangCheck, func() string {
		out, errOut, err := gs[0].keygate("keys", "usage", id, "--json")
		if err != nil {
			return err.Error() + errOut
		}
		if err := json.Unmarshal([]byte(out), &u); err != nil {
			return err.Error()
		}
		if u.ForbiddenPlan < 2 || u.Admitted < 2 {
			return fmt.Sprintf("usage %s", out)
		}
		return ""
	})
}

// TestOverlappingOperationsRefusedAtStart: config with overlapping custom
// operations does not start, and the error names the field.
func TestOverlappingOperationsRefusedAtStart(t *testing.T) {
	g := startGateway(t, gwOpts{skipStart: true, extra: "operations:\n  registry:get: { methods: [GET], path: /registry/ }\n"})
	err := g.tryStart()
	if err == nil {
		t.Fatal("keygate started with overlapping operations")
	}
	if !strings.Contains(g.logs.String(), "operations.registry:get: overlaps registry:read") {
		t.Errorf("the error does not name the field:\n%s", g.logs.String())
	}
}
