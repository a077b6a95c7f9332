package portal_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestPortalUnknownOperation: an operation name that does not exist is a
// clear 400, at create and at narrowing, and nothing changes.
func TestPortalUnknownOperation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	b := f.signIn(t, conA)
	for _, c := range []struct {
		name, path string
		pairs      []string
	}{
		{"create", "/keys", []string{"product", "registry", "env", "live", "permissions", "registry:admin"}},
		{"narrow", "/keys/" + keyA + "/permissions", []string{"permissions", "extraction:admin"}},
	} {
		p := b.post(c.path, append([]string{"csrf", b.csrf()}, c.pairs...)...)
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, "unknown operation") {
			t.Errorf("%s: %d, want 400 naming the unknown operation\n%s", c.name, p.status, p.body)
		}
	}
	for _, e := range f.audit.Events() {
		if e.Err == nil && strings.HasPrefix(e.Action, "key.") {
			t.Errorf("a change was made: %s %s", e.Action, e.Target)
		}
	}
}
