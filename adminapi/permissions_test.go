package adminapi_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestKeyPermissionsAndAddresses: permissions and allowed_cidrs on keys
// and consumers through the admin API: validated (an unknown operation
// is a 400 naming it), stored in canonical form, shown with each
// permission's source in the key view, and audited.
func TestKeyPermissionsAndAddresses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		has                      string
	}{
		{"unknown operation", "PATCH", "/v1/keys/" + keyRegistry, `{"permissions":["registry:delete"]}`, 400, `unknown operation \"registry:delete\"`},
		{"operation of another product", "PATCH", "/v1/keys/" + keyRegistry, `{"permissions":["extraction:sync"]}`, 400, "not an operation of registry keys"},
		{"bad address", "PATCH", "/v1/keys/" + keyRegistry, `{"allowed_cidrs":["10.0.0.0/33"]}`, 400, "allowed_cidrs[0]"},
		{"permissions not a list", "PATCH", "/v1/keys/" + keyRegistry, `{"permissions":"registry:read"}`, 400, "permissions"},
		{"unknown operation at issue", "POST", "/v1/keys", `{"product":"registry","env":"live","permissions":["registry:admin"]}`, 400, "registry:admin"},
		{"consumer: unknown operation", "PATCH", "/v1/consumers/" + conEmpty, `{"permissions":["registry:nope"]}`, 400, "registry:nope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.do(t, allToken, c.method, c.path, c.body)
			if r.status != c.status || !strings.Contains(string(r.body), c.has) {
				t.Errorf("%d %s, want %d containing %q", r.status, r.body, c.status, c.has)
			}
		})
	}

	r := f.do(t, allToken, "PATCH", "/v1/keys/"+keyRegistry, `{"permissions":["registry:read"],"allowed_cidrs":["::ffff:10.1.2.3","192.0.2.0/24"]}`)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	v := r.json(t)
	if got := v["allowed_cidrs"]; !reflect.DeepEqual(got, []any{"10.1.2.3/32", "192.0.2.0/24"}) {
		t.Errorf("allowed_cidrs = %v, want canonical form", got)
	}
	if got := v["allowed_operations"]; !reflect.DeepEqual(got, []any{"registry:read"}) {
		t.Errorf("allowed_operations = %v", got)
	}
	perms := v["effective_permissions"].([]any)
	write := perms[1].(map[string]any)
	if write["operation"] != "registry:write" || write["allowed"] != false || !reflect.DeepEqual(write["denied_by"], []any{"key"}) {
		t.Errorf("registry:write = %v, want denied by key", write)
	}

	// A consumer narrows; its keys' view says so.
	if r := f.do(t, allToken, "PATCH", "/v1/consumers/"+conAcme, `{"permissions":["registry:read"]}`); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	v = f.do(t, allToken, "GET", "/v1/keys/"+keyAcme, "").json(t)
	sync := v["effective_permissions"].([]any)[0].(map[string]any)
	if sync["allowed"] != false || !reflect.DeepEqual(sync["denied_by"], []any{"consumer"}) || !reflect.DeepEqual(sync["sources"], []any{"key default"}) {
		t.Errorf("extraction:sync under a registry:read consumer = %v", sync)
	}

	var audited []string
	for _, e := range f.audit.Events() {
		if p, ok := e.Changes["permissions"]; ok && e.Err == nil {
			audited = append(audited, e.Action+" "+e.Target+" "+p)
		}
	}
	want := []string{"key.update " + keyRegistry + " registry:read", "consumer.update " + conAcme + " registry:read"}
	if !reflect.DeepEqual(audited, want) {
		t.Errorf("audited %v, want %v", audited, want)
	}
}
