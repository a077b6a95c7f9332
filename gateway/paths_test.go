package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

const (
	msgAmbiguousPath = "could be read in more than one way"
	msgOverride      = "overrides"
	msgFormOverride  = "form body's _method"
)

// seen is what the registry upstream received.
type seen struct {
	mu       sync.Mutex
	requests []string // "METHOD request-URI"
	headers  []http.Header
}

func (s *seen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.RequestURI)
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *seen) since(n int) ([]string, []http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests[n:]...), append([]http.Header(nil), s.headers[n:]...)
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// pathEnv is a gateway with issue 49's operations (registry:admin on
// /registry/admin/, registry:delete for DELETE on /registry/) and keys
// without each, and a registry upstream that records what it receives.
type pathEnv struct {
	*env
	NoAdmin, NoDelete string
	up                *seen
}

func newPathEnv(t *testing.T) *pathEnv {
	t.Helper()
	ops, err := policy.NewOperations(policy.OperationsConfig{
		"registry:admin":  {Path: "/registry/admin/"},
		"registry:delete": {Methods: []string{"DELETE"}, Path: "/registry/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lim := policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000}
	res, err := policy.NewResolver(map[string]policy.Limit{"live": lim, "test": lim}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pe := &pathEnv{up: &seen{}}
	setup := func(e *env) {
		issue := func(perms ...string) string {
			k, rec, err := e.Admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Admin.UpdateKey(context.Background(), rec.ID, func(r keystore.Record) (keystore.Record, error) {
				r.Permissions = perms
				return r, nil
			}); err != nil {
				t.Fatal(err)
			}
			return k
		}
		pe.NoAdmin = issue(policy.OpRegistryRead, policy.OpRegistryWrite, "registry:delete")
		pe.NoDelete = issue(policy.OpRegistryRead, policy.OpRegistryWrite, "registry:admin")
	}
	pe.env = newEnv(t, envOpts{resolver: res.WithOperations(ops), ops: ops, registryH: pe.up, setup: setup})
	return pe
}

// rawRequest is a request whose request-target is sent exactly as
// written, escapes and all.
func (e *env) rawRequest(method, target, key string) *http.Request {
	req := e.request(method, "/registry/x", key, "", nil)
	req.URL.Opaque = target
	req.URL.RawQuery = ""
	return req
}

// TestPathsAsUpstreamReads is issue 49's findings 1 and 2 and their kin,
// through the gateway to a real upstream: a key without registry:admin
// gets 403 or 400 for every spelling of /registry/admin/..., and the
// upstream receives none of them; a key with it reaches the upstream with
// the normalised path.
func TestPathsAsUpstreamReads(t *testing.T) {
	t.Parallel()
	e := newPathEnv(t)
	variants := []struct {
		path   string
		status int    // for a key without registry:admin; 0: refused by net/http itself (400, not keygate's body)
		msg    string // of that refusal
		fwd    string // what a key with registry:admin has forwarded; "" when refused
	}{
		{"/registry/admin/users", 403, msgNoPermission, "/registry/admin/users"},
		{"/registry/%61dmin/users", 403, msgNoPermission, "/registry/admin/users"},
		{"/registry/%61%64%6d%69%6e/users", 403, msgNoPermission, "/registry/admin/users"},
		{"/registry/%61%64%6D%69%6E/users", 403, msgNoPermission, "/registry/admin/users"},
		{"/registry/adm%69n/users", 403, msgNoPermission, "/registry/admin/users"},
		{"/registry/admi%6E", 403, msgNoPermission, "/registry/admin"},
		{"/registry/%41dmin/x", 403, msgNoPermission, "/registry/Admin/x"},
		{"/registry/ADMIN/users", 403, msgNoPermission, "/registry/ADMIN/users"},
		{"/registry/Admin/x", 403, msgNoPermission, "/registry/Admin/x"},
		{"/registry/aDmIn", 403, msgNoPermission, "/registry/aDmIn"},
		{"/registry/admin/", 403, msgNoPermission, "/registry/admin/"},
		{"/registry/admin./x", 400, msgAmbiguousPath, ""},
		{"/registry/admin../x", 400, msgAmbiguousPath, ""},
		{"/registry/ADMIN./x", 400, msgAmbiguousPath, ""},
		{"/registry/admin%2e/x", 400, msgAmbiguousPath, ""},
		{"/registry/admin%20/x", 400, msgAmbiguousPath, ""},
		{"/registry/%2561dmin/users", 400, msgAmbiguousPath, ""},
		{"/registry/%252561dmin/users", 400, msgAmbiguousPath, ""},
		{"/registry/x%2F..%2Fadmin/users", 400, msgAmbiguousPath, ""},
		{"/registry/x%2fadmin", 400, msgAmbiguousPath, ""},
		{"/registry/x/../admin/users", 400, msgAmbiguousPath, ""},
		{"/registry/x/%2e%2e/admin/users", 400, msgAmbiguousPath, ""},
		{"/registry/./admin/users", 400, msgAmbiguousPath, ""},
		{"/registry//admin/users", 400, msgAmbiguousPath, ""},
		{"/registry/admin;x/users", 400, msgAmbiguousPath, ""},
		{"/registry/admin%3bx/users", 400, msgAmbiguousPath, ""},
		{"/registry/x%5c..%5cadmin", 400, msgAmbiguousPath, ""},
		{"/registry/%ef%bd%81dmin/users", 400, msgAmbiguousPath, ""},
		{"/registry/adm%c4%b1n/users", 400, msgAmbiguousPath, ""}, // dotless i
		{"/registry/%c1%a1dmin", 400, msgAmbiguousPath, ""},       // overlong "a"
		{"/registry/%u0061dmin", 0, "", ""},
		{"/registry/%6", 0, "", ""},
		// Not the protected path.
		{"/registry/administrator", 200, "", "/registry/administrator"},
		{"/registry/x/admin", 200, "", "/registry/x/admin"},
		{"/registry/a%20b/%c3%a9", 200, "", "/registry/a%20b/%C3%A9"},
		{"/registry/x%21y", 200, "", "/registry/x%21y"},
	}
	for _, v := range variants {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			t.Run(method+" "+v.path, func(t *testing.T) {
				before := e.up.count()
				var r result
				if v.status == 0 {
					// Over HTTP/1.1: net/http's HTTP/2 server resets such a
					// stream, and its client then waits out its timeout.
					r = raw(t, e.env, method+" "+v.path+" HTTP/1.1\r\nHost: x\r\nX-Api-Key: "+e.NoAdmin+"\r\n\r\n")
				} else {
					r = e.do(e.rawRequest(method, v.path, e.NoAdmin))
				}
				got, _ := e.up.since(before)
				switch v.status {
				case 0:
					if r.Status != 400 {
						t.Errorf("status %d, want 400 from net/http", r.Status)
					}
				case 200:
					if r.Status != 200 || len(got) != 1 || got[0] != method+" "+v.fwd {
						t.Errorf("status %d, upstream got %q; want 200 and %q", r.Status, got, method+" "+v.fwd)
					}
					return
				default:
					assertError(t, r, v.status, v.msg)
				}
				if len(got) != 0 {
					t.Fatalf("the upstream received %q", got)
				}
				if v.fwd == "" {
					return
				}
				// A key that holds registry:admin gets through, with the
				// path in its normal form.
				r = e.do(e.rawRequest(method, v.path, e.RegistryKey))
				got, _ = e.up.since(before)
				if r.Status != 200 || len(got) != 1 || got[0] != method+" "+v.fwd {
					t.Errorf("with registry:admin: status %d, upstream got %q; want 200 and %q", r.Status, got, method+" "+v.fwd)
				}
			})
		}
	}
	// A refused path is refused for every key.
	before := e.up.count()
	for _, p := range []string{"/registry/admin./x", "/registry/%2561dmin", "/registry/a%2Fb"} {
		assertError(t, e.do(e.rawRequest("GET", p, e.RegistryKey)), 400, msgAmbiguousPath)
	}
	if got, _ := e.up.since(before); len(got) != 0 {
		t.Errorf("the upstream received %q", got)
	}
}

// TestMethodOverrides is issue 49's finding 3: a key without
// registry:delete cannot delete through any override header, the _method
// query parameter in any spelling, or a form body's _method; a refused
// request never reaches the upstream, and an ordinary one does, with no
// override header.
func TestMethodOverrides(t *testing.T) {
	t.Parallel()
	e := newPathEnv(t)
	type req struct {
		name, method, target string
		header               [2]string // name, value
		ct, body             string
		key                  func() string
		status               int
		msg                  string
	}
	noDelete := func() string { return e.NoDelete }
	full := func() string { return e.RegistryKey }
	cases := []req{
		{name: "real DELETE", method: "DELETE", target: "/registry/x", key: noDelete, status: 403, msg: msgNoPermission},
		{name: "plain POST", method: "POST", target: "/registry/x", key: noDelete, status: 200},
		{name: "JSON POST", method: "POST", target: "/registry/x", ct: "application/json", body: `{"_method":"DELETE"}`, key: noDelete, status: 200},
		{name: "a parameter that is not _method", method: "POST", target: "/registry/x?method=a&methods=b&x_method=c&_methods=d&+method=e", key: noDelete, status: 200},
		{name: "form POST, key with every method", method: "POST", target: "/registry/x", ct: "application/x-www-form-urlencoded", body: "_method=DELETE", key: full, status: 200},
		{name: "form POST", method: "POST", target: "/registry/x", ct: "application/x-www-form-urlencoded", body: "_method=DELETE", key: noDelete, status: 400, msg: msgFormOverride},
		{name: "form POST with charset", method: "POST", target: "/registry/x", ct: "Application/X-WWW-Form-Urlencoded; charset=utf-8", body: "a=1", key: noDelete, status: 400, msg: msgFormOverride},
		{name: "multipart POST", method: "POST", target: "/registry/x", ct: "multipart/form-data; boundary=B", body: "--B\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--B--\r\n", key: noDelete, status: 400, msg: msgFormOverride},
		{name: "unparsable content type", method: "POST", target: "/registry/x", ct: "application/x-www-form-urlencoded; ;", body: "_method=DELETE", key: noDelete, status: 400, msg: msgFormOverride},
	}
	for _, h := range []string{"X-HTTP-Method-Override", "x-http-method-override", "X-HTTP-Method", "X-Method-Override", "x-method-override", "X-Original-URL", "X-Rewrite-Url"} {
		cases = append(cases,
			req{name: h, method: "POST", target: "/registry/x", header: [2]string{h, "DELETE"}, key: noDelete, status: 400, msg: msgOverride},
			req{name: h + " with every method", method: "POST", target: "/registry/x", header: [2]string{h, "DELETE"}, key: full, status: 400, msg: msgOverride},
			req{name: h + " on GET", method: "GET", target: "/registry/x", header: [2]string{h, "GET"}, key: noDelete, status: 400, msg: msgOverride})
	}
	for _, q := range []string{"_method=DELETE", "_METHOD=DELETE", "_Method=delete", "%5Fmethod=DELETE", "%5fmethod=DELETE", "_m%65thod=DELETE", "_%6D%45THOD=DELETE",
		"a=1&_method=DELETE", "a=1;_method=DELETE", ".method=DELETE", "+_method=DELETE", "%20_method=DELETE", "_method[]=DELETE", "_method[x]=DELETE", "_method", "_method="} {
		cases = append(cases, req{name: "?" + q, method: "POST", target: "/registry/x?" + q, key: noDelete, status: 400, msg: msgOverride})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body *strings.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			r := e.request(c.method, "/registry/x", c.key(), c.ct, nil)
			if body != nil {
				r = e.request(c.method, "/registry/x", c.key(), c.ct, body)
			}
			path, query, _ := strings.Cut(c.target, "?")
			r.URL.Opaque, r.URL.RawQuery = path, query
			if c.header[0] != "" {
				r.Header[c.header[0]] = []string{c.header[1]} // as written, not canonicalised
			}
			before := e.up.count()
			res := e.do(r)
			got, hdrs := e.up.since(before)
			if c.status != 200 {
				assertError(t, res, c.status, c.msg)
				if len(got) != 0 {
					t.Fatalf("the upstream received %q", got)
				}
				return
			}
			if res.Status != 200 || len(got) != 1 || !strings.HasPrefix(got[0], c.method+" ") {
				t.Fatalf("status %d, upstream got %q; want 200 and one %s", res.Status, got, c.method)
			}
			for k := range hdrs[0] {
				if strings.Contains(strings.ToLower(k), "method") {
					t.Errorf("the upstream received %s", k)
				}
			}
		})
	}
	// /sync is refused the same way.
	r := e.request("POST", "/sync", e.LiveKey, "multipart/form-data; boundary=B", strings.NewReader("--B--\r\n"))
	r.Header.Set("X-HTTP-Method-Override", "DELETE")
	assertError(t, e.do(r), 400, msgOverride)
}
