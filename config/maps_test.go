package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/policy"
)

// mapOptions is every map-valued option of the configuration file, by YAML
// path: a file that writes one of them gives it exactly the entries
// written, none of the defaults. Each row parses yaml and expects either
// the option to equal want, or an error naming err (an entry the default
// has and the file leaves out, where the option needs it).
var mapOptions = []struct {
	path, name string
	yaml       string
	got        func(config.Config) any
	want       any
	err        string
}{
	{
		path: "ratelimit.limits", name: "entries written whole",
		yaml: `
ratelimit:
  limits:
    live: { rate: 10, per: 1s, burst: 20 }
    test: { rate: 1, per: 1s, burst: 1 }
`,
		got: func(c config.Config) any { return c.RateLimit.Limits },
		// The default test limit has a quota; an entry written without
		// one has none.
		want: map[string]policy.Limit{
			"live": {Rate: 10, Per: time.Second, Burst: 20},
			"test": {Rate: 1, Per: time.Second, Burst: 1},
		},
	},
	{
		// Merged, the default test limit would silently stay.
		path: "ratelimit.limits", name: "an environment left out",
		yaml: `
ratelimit:
  limits:
    live: { rate: 10, per: 1s, burst: 20 }
`,
		err: "ratelimit.limits.test: required",
	},
	{
		path: "ratelimit.plans", name: "plans as written, scope defaulting to key",
		yaml: `
ratelimit:
  plans:
    pro: { rate: 200, per: 1s, burst: 400, quota: { requests: 50000, per: 24h } }
    team: { rate: 20, per: 1s, burst: 20, scope: consumer }
`,
		got: func(c config.Config) any { return c.RateLimit.Plans },
		want: map[string]policy.Plan{
			"pro":  {Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: 24 * time.Hour}}},
			"team": {Limit: policy.Limit{Rate: 20, Per: time.Second, Burst: 20}, Scope: policy.ScopeConsumer},
		},
	},
	{
		path: "auth.oauth2.product_scopes", name: "one product",
		yaml: `
auth:
  oauth2:
    enabled: true
    issuer: https://issuer.example/
    jwks_url: https://issuer.example/jwks
    product_scopes: { extraction: "x:sync" }
`,
		got: func(c config.Config) any { return c.Auth.OAuth2.ProductScopes },
		// Not the default registry: registry, which would let any token
		// with scope "registry" reach the registry.
		want: map[string]string{"extraction": "x:sync"},
	},
	{
		path: "auth.oauth2.product_scopes", name: "written through a merge key",
		yaml: `
auth:
  oauth2:
    <<: { product_scopes: { registry: "r:read" } }
    enabled: true
    issuer: https://issuer.example/
    jwks_url: https://issuer.example/jwks
`,
		got:  func(c config.Config) any { return c.Auth.OAuth2.ProductScopes },
		want: map[string]string{"registry": "r:read"},
	},
	{
		path: "operations", name: "custom operations as written, plan features checked against them",
		yaml: `
operations:
  registry:delete: { methods: [DELETE], path: /registry/ }
ratelimit:
  plans:
    readonly: { rate: 20, per: 1s, burst: 20, features: [registry:read, registry:delete] }
`,
		got:  func(c config.Config) any { return c.Operations },
		want: policy.OperationsConfig{"registry:delete": {Methods: []string{"DELETE"}, Path: "/registry/"}},
	},
	{
		path: "operations", name: "a plan feature that is no operation",
		yaml: `
ratelimit:
  plans:
    readonly: { rate: 20, per: 1s, burst: 20, features: [registry:delete] }
`,
		err: "ratelimit.plans.readonly.features[0]: unknown operation \"registry:delete\"",
	},
	{
		path: "operations", name: "overlapping operations refused at start",
		yaml: `
operations:
  registry:get: { methods: [GET], path: /registry/ }
`,
		err: "operations.registry:get: overlaps registry:read",
	},
	{
		path: "admin_api.client_cert_scopes", name: "scopes as written",
		yaml: `
admin_api:
  client_ca_file: ca.pem
  client_cert_scopes: { support: [keys:read, keys:write] }
`,
		got:  func(c config.Config) any { return c.AdminAPI.ClientCertScopes },
		want: map[string][]string{"support": {"keys:read", "keys:write"}},
	},
	{
		path: "tracing.headers", name: "headers as written",
		yaml: `
tracing:
  headers: { x-scope-orgid: keygate }
`,
		got:  func(c config.Config) any { return c.Tracing.Headers },
		want: map[string]string{"x-scope-orgid": "keygate"},
	},
	{
		path: "tracing.headers_env", name: "header variables as written",
		yaml: `
tracing:
  headers_env: { x-honeycomb-team: HONEYCOMB_API_KEY }
`,
		got:  func(c config.Config) any { return c.Tracing.HeadersEnv },
		want: map[string]string{"x-honeycomb-team": "HONEYCOMB_API_KEY"},
	},
}

// TestFileMapReplacesTheDefault: each map-valued option written in a file
// replaces the default map whole; it is not merged into it.
func TestFileMapReplacesTheDefault(t *testing.T) {
	t.Parallel()
	for _, o := range mapOptions {
		t.Run(o.path+"/"+o.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse([]byte(o.yaml))
			if o.err != "" {
				if err == nil || !strings.Contains(err.Error(), o.err) {
					t.Errorf("err = %v, want %q", err, o.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := o.got(c); !reflect.DeepEqual(got, o.want) {
				t.Errorf("%s = %v, want exactly the file's %v", o.path, got, o.want)
			}
			// The default is untouched, for the next Parse.
			if reflect.DeepEqual(o.got(config.Default()), o.want) {
				t.Errorf("config.Default().%s changed to the file's map", o.path)
			}
		})
	}
}

// TestMapOptionsAreAllCovered finds every map-valued field reachable from
// config.Config, so that a new map option cannot skip the table above.
func TestMapOptionsAreAllCovered(t *testing.T) {
	t.Parallel()
	var found []string
	var walk func(reflect.Type, string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			found = append(found, path)
			return
		case reflect.Struct:
		default:
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || tag == "-" {
				continue
			}
			if tag == "" {
				tag = strings.ToLower(f.Name)
			}
			p := tag
			if path != "" {
				p = path + "." + tag
			}
			walk(f.Type, p)
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	var covered []string
	for _, o := range mapOptions {
		covered = append(covered, o.path)
	}
	slices.Sort(found)
	slices.Sort(covered)
	covered = slices.Compact(covered)
	if !slices.Equal(found, covered) {
		t.Errorf("map-valued options %v; mapOptions covers %v", found, covered)
	}
}

// TestPartialMapEntryNamesTheMissingField: an entry of a map option must
// be complete, since nothing is taken from the default entry of the same
// name; a missing field is an error that names it.
func TestPartialMapEntryNamesTheMissingField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, field string }{
		{"limit without per", "ratelimit:\n  limits:\n    live: { rate: 10, burst: 20 }\n    test: { rate: 1, per: 1s, burst: 1 }\n", "ratelimit.limits.live.per"},
		{"empty map", "ratelimit:\n  limits: {}\n", "ratelimit.limits"},
		{"plan without burst", "ratelimit:\n  plans:\n    pro: { rate: 10, per: 1s }\n", "ratelimit.plans.pro.burst"},
		{"plan with a bad scope", "ratelimit:\n  plans:\n    pro: { rate: 10, per: 1s, burst: 5, scope: team }\n", "ratelimit.plans.pro.scope"},
	} {
		expectRefused(t, c.name, c.yaml, func(msg string) bool { return strings.Contains(msg, c.field+":") }, "name "+c.field)
	}
}
