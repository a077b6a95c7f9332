package e2e

import (
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
)

// TestPurgeAcrossReplicas: two replicas of the real binary on one Redis
// keystore. A key revoked and then purged through one replica's admin API
// is an unknown key on both gateways (401 with the spec's body, as when
// it was revoked), while the active key keeps working on both; the
// purged key is gone from the key list and the audit log names its
// purge.
func TestPurgeAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	gs, apis := redisReplicas(t, rs, 2, "keys:read,keys:write,audit:read")
	a1, a2 := apis[0], apis[1]
	issue := func() (key, id string) {
		t.Helper()
		status, rec, _ := a1.call("POST", "/v1/keys", `{"product":"extraction","env":"live","context":"`+ctxA+`"}`)
		if status != http.StatusCreated {
			t.Fatalf("issue: %d %v", status, rec)
		}
		return rec["key"].(string), rec["id"].(string)
	}
	gone, goneID := issue()
	kept, keptID := issue()
	for _, g := range gs {
		eventually(t, testkit.HangCheck, func() string {
			if s, b, _ := g.post(gone, ctxA, []byte("%PDF-1.4")); s != http.StatusOK {
				return fmt.Sprintf("a new key: %d %s", s, b)
			}
			return ""
		})
	}
	if status, rec, _ := a1.call("POST", "/v1/keys/"+goneID+"/revoke", ""); status != http.StatusOK {
		t.Fatalf("revoke: %d %v", status, rec)
	}
	time.Sleep(10 * time.Millisecond)
	status, res, _ := a2.call("POST", "/v1/keys/purge", `{"older_than":"5ms"}`)
	purged, _ := res["purged"].([]any)
	if status != http.StatusOK || len(purged) != 1 || purged[0].(map[string]any)["id"] != goneID || purged[0].(map[string]any)["status"] != "revoked" {
		t.Fatalf("purge: %d %v, want the revoked key %s alone", status, res, goneID)
	}
	for i, g := range gs {
		eventually(t, testkit.HangCheck, func() string {
			s, b, _ := g.post(gone, ctxA, []byte("%PDF-1.4"))
			if s != http.StatusUnauthorized || !strings.Contains(string(b), `"StateText":"ERROR"`) {
				return fmt.Sprintf("replica %d, the purged key: %d %s, want 401 in the spec's shape", i+1, s, b)
			}
			return ""
		})
		if s, b, _ := g.post(kept, ctxA, []byte("%PDF-1.4")); s != http.StatusOK {
			t.Errorf("replica %d, the active key after the purge: %d %s", i+1, s, b)
		}
	}
	for _, a := range apis {
		if status, page, _ := a.call("GET", "/v1/keys", ""); status != http.StatusOK || strings.Contains(fmt.Sprint(page), goneID) || !strings.Contains(fmt.Sprint(page), keptID) {
			t.Errorf("the key list after the purge: %d %v, want %s and not %s", status, page, keptID, goneID)
		}
	}
	if status, page, _ := a1.call("GET", "/v1/audit-events?target="+goneID, ""); status != http.StatusOK || !strings.Contains(fmt.Sprint(page), "key.purge") {
		t.Errorf("audit events of the purged key: %d %v, want its key.purge", status, page)
	}
}
