package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/standin"
	"github.com/keygate/keygate/usage"
)

const (
	msgNoPermission = "Forbidden: this key lacks permission for this operation"
	msgNoFeature    = "Forbidden: your plan does not include this operation"
	msgNoAddress    = "Forbidden: requests from this address are not allowed for this key"
)

// permEnv is a gateway whose store resolves permissions, with keys:
// read-only registry, a key on a plan without extraction:sync, a key of a
// consumer limited to registry:read, and a key held to 10.0.0.0/8.
type permEnv struct {
	*env
	RO, NoSync, Narrowed, TenNet string
	ROID                         string
	upstream                     *atomic.Int64 // requests the registry upstream saw
	counters                     *usage.Counters
}

func newPermEnv(t *testing.T, trusted clientip.TrustedProxies) *permEnv {
	t.Helper()
	lim := policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000}
	res, err := policy.NewResolver(map[string]policy.Limit{"live": lim, "test": lim},
		map[string]policy.Plan{"starter": {Limit: lim, Features: []string{policy.OpRegistryRead}}})
	if err != nil {
		t.Fatal(err)
	}
	pe := &permEnv{upstream: new(atomic.Int64), counters: usage.NewCounters(0)}
	reg := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pe.upstream.Add(1)
		standin.Handler{Name: "registry"}.ServeHTTP(w, r)
	})
	ctx := context.Background()
	setup := func(e *env) {
		con := keystore.Consumer{ID: "con_0123456789abcdef", Name: "narrow", Permissions: []string{policy.OpRegistryRead}}
		if err := e.Admin.CreateConsumer(ctx, con); err != nil {
			t.Fatal(err)
		}
		consumer := ""
		issue := func(p keystore.Product, c string, change func(*keystore.Record)) (string, string) {
			k, rec, err := e.Admin.Issue(ctx, keystore.IssueRequest{Product: p, Env: keystore.Live, Context: c, Consumer: consumer})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Admin.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) { change(&r); return r, nil }); err != nil {
				t.Fatal(err)
			}
			return k, rec.ID
		}
		pe.RO, pe.ROID = issue(keystore.Registry, "", func(r *keystore.Record) { r.Permissions = []string{policy.OpRegistryRead} })
		pe.NoSync, _ = issue(keystore.Extraction, ctxA, func(r *keystore.Record) { r.Plan = "starter" })
		consumer = con.ID
		pe.Narrowed, _ = issue(keystore.Registry, "", func(r *keystore.Record) {
			r.Permissions = []string{policy.OpRegistryRead, policy.OpRegistryWrite} // the consumer narrows it anyway
		})
		consumer = ""
		pe.TenNet, _ = issue(keystore.Registry, "", func(r *keystore.Record) { r.AllowedCIDRs = []string{"10.0.0.0/8"} })
	}
	pe.env = newEnv(t, envOpts{resolver: res, registryH: reg, trusted: trusted, setup: setup, usage: pe.counters})
	return pe
}

// TestPermissions is the issue's decision table on a gateway behind real
// TLS: read-only keys, plan features, consumer narrowing and addresses,
// each 403 in the spec's body with its own message, and the upstream never
// sees a refused request.
func TestPermissions(t *testing.T) {
	t.Parallel()
	trusted, err := clientip.ParseTrustedProxies("server.trusted_proxies", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	behindProxy := newPermEnv(t, trusted)
	direct := newPermEnv(t, clientip.TrustedProxies{})
	for _, c := range []struct {
		name         string
		e            *permEnv
		key          func(*permEnv) string
		method, path string
		xff          string
		status       int
		msg          string
	}{
		{"read-only key reads", direct, func(e *permEnv) string { return e.RO }, "GET", "/registry/x", "", 200, ""},
		{"read-only key HEAD", direct, func(e *permEnv) string { return e.RO }, "HEAD", "/registry/x", "", 200, ""},
		{"read-only key POST", direct, func(e *permEnv) string { return e.RO }, "POST", "/registry/x", "", 403, msgNoPermission},
		{"read-only key DELETE", direct, func(e *permEnv) string { return e.RO }, "DELETE", "/registry/x", "", 403, msgNoPermission},
		{"ordinary registry key writes", direct, func(e *permEnv) string { return e.RegistryKey }, "POST", "/registry/x", "", 200, ""},
		{"plan without extraction:sync", direct, func(e *permEnv) string { return e.NoSync }, "POST", "/sync", "", 403, msgNoFeature},
		{"consumer narrows a writing key", direct, func(e *permEnv) string { return e.Narrowed }, "PUT", "/registry/x", "", 403, msgNoPermission},
		{"consumer's key still reads", direct, func(e *permEnv) string { return e.Narrowed }, "GET", "/registry/x", "", 200, ""},
		{"10/8 key from 127.0.0.1", direct, func(e *permEnv) string { return e.TenNet }, "GET", "/registry/x", "", 403, msgNoAddress},
		{"10/8 key, XFF from an untrusted peer", direct, func(e *permEnv) string { return e.TenNet }, "GET", "/registry/x", "10.1.2.3", 403, msgNoAddress},
		{"10/8 key through a trusted proxy", behindProxy, func(e *permEnv) string { return e.TenNet }, "GET", "/registry/x", "10.1.2.3", 200, ""},
		{"10/8 key, IPv4-mapped client", behindProxy, func(e *permEnv) string { return e.TenNet }, "GET", "/registry/x", "::ffff:10.1.2.3", 200, ""},
		{"10/8 key, trusted proxy, other client", behindProxy, func(e *permEnv) string { return e.TenNet }, "GET", "/registry/x", "192.0.2.1", 403, msgNoAddress},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.e.upstream.Load()
			req := c.e.request(c.method, c.path, c.key(c.e), "", nil)
			if c.xff != "" {
				req.Header.Set("X-Forwarded-For", c.xff)
			}
			r := c.e.do(req)
			saw := c.e.upstream.Load() - before
			if c.status != 200 {
				if c.method == "HEAD" {
					t.Fatal("no body to check on HEAD")
				}
				assertError(t, r, c.status, c.msg)
				if saw != 0 {
					t.Errorf("the upstream saw %d refused requests", saw)
				}
				return
			}
			if r.Status != 200 || saw != 1 {
				t.Errorf("status %d (%s), upstream saw %d; want 200 and 1", r.Status, r.Body, saw)
			}
		})
	}
	got := map[string]usage.Counts{}
	for _, d := range direct.counters.Drain() {
		got[d.ID] = d.Counts
	}
	if c := got[direct.ROID]; c.ForbiddenOperation != 2 || c.Admitted != 2 {
		t.Errorf("usage of the read-only key: %+v, want 2 admitted and 2 forbidden (operation)", c)
	}
	var plan, addr int64
	for _, c := range got {
		plan += c.ForbiddenPlan
		addr += c.ForbiddenAddress
	}
	if plan != 1 || addr != 2 {
		t.Errorf("forbidden by plan %d, by address %d; want 1 and 2", plan, addr)
	}
}

// TestForbiddenAnsweredAtOnce: a refused POST that declares a body and
// sends none is answered within a second and its connection closed,
// whatever the declared size.
func TestForbiddenAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := newPermEnv(t, clientip.TrustedProxies{})
	for _, n := range []int{1000, 50000000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			head := "POST /registry/x HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + e.RO +
				"\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(n) + "\r\n\r\n"
			answeredAtOnce(t, e.env, head, 403, msgNoPermission)
		})
	}
	if n := e.upstream.Load(); n != 0 {
		t.Errorf("the upstream saw %d requests", n)
	}
}
