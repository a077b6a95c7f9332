package adminapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPurgeKeys: POST /v1/keys/purge refuses a bad request with a 400 that
// names the field, and a token without keys:write with a 403; a dry run
// names the keys that ended before the cutoff and deletes nothing; the
// purge deletes them (the key is then unknown: 404), leaves the active
// key, and audits each purged key.
func TestPurgeKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct {
		body, token string
		status      int
		detail      string
	}{
		{`{}`, allToken, 400, "older_than"},
		{`{"older_than":"0d"}`, allToken, 400, "older_than"},
		{`{"older_than":"-1h"}`, allToken, 400, "older_than"},
		{`{"older_than":"soon"}`, allToken, 400, "older_than"},
		{`{"older_than":"90d","limit":0}`, allToken, 400, "limit"},
		{`{"older_than":"90d","limit":100001}`, allToken, 400, "limit"},
		{`{"older_than":"90d","dryrun":true}`, allToken, 400, "dryrun"},
		{`{"older_than":"90d","older_than":"1h"}`, allToken, 400, "older_than"},
		{``, allToken, 400, "body"},
		{`{"older_than":"90d"}`, "kga_keys:read", 403, "keys:write"},
	} {
		got := f.do(t, tc.token, "POST", "/v1/keys/purge", tc.body)
		if got.status != tc.status || !strings.Contains(string(got.body), tc.detail) {
			t.Errorf("%s: %d %s, want %d naming %s", tc.body, got.status, got.body, tc.status, tc.detail)
		}
	}

	if got := f.do(t, allToken, "POST", "/v1/keys/"+keyRegistry+"/revoke", ""); got.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", got.status, got.body)
	}
	time.Sleep(5 * time.Millisecond)
	events := len(f.audit.Events())
	dry := f.do(t, allToken, "POST", "/v1/keys/purge", `{"older_than":"1ms","dry_run":true}`)
	if dry.status != http.StatusOK || !strings.Contains(string(dry.body), `"id":"`+keyRegistry+`","status":"revoked"`) ||
		strings.Contains(string(dry.body), keyAcme) || !strings.Contains(string(dry.body), `"dry_run":true`) {
		t.Errorf("dry run: %d %s, want the revoked key alone", dry.status, dry.body)
	}
	if got := f.do(t, allToken, "GET", "/v1/keys/"+keyRegistry, ""); got.status != http.StatusOK {
		t.Errorf("after a dry run: GET the key: %d, want 200", got.status)
	}
	got := f.do(t, allToken, "POST", "/v1/keys/purge", `{"older_than":"1ms"}`)
	if got.status != http.StatusOK || !strings.Contains(string(got.body), keyRegistry) || !strings.Contains(string(got.body), `"more":false`) {
		t.Errorf("purge: %d %s", got.status, got.body)
	}
	if got := f.do(t, allToken, "GET", "/v1/keys/"+keyRegistry, ""); got.status != http.StatusNotFound {
		t.Errorf("after the purge: GET the purged key: %d, want 404", got.status)
	}
	if got := f.do(t, allToken, "GET", "/v1/keys/"+keyAcme, ""); got.status != http.StatusOK {
		t.Errorf("after the purge: GET the active key: %d, want 200", got.status)
	}
	ev := f.audit.Events()[events:]
	if len(ev) != 1 || ev[0].Action != "key.purge" || ev[0].Target != keyRegistry || ev[0].Actor.ID != "tok_all" {
		t.Errorf("audit events of the purge: %+v, want one key.purge of %s by tok_all", ev, keyRegistry)
	}
}
