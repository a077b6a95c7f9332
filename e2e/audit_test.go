package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	keygatecli "github.com/keygate/keygate/cli"
)

// auditEvent is a line of the audit log as the binary writes it.
type auditEvent struct {
	ID      string            `json:"id"`
	Time    time.Time         `json:"time"`
	Actor   string            `json:"actor"`
	Source  string            `json:"source"`
	Action  string            `json:"action"`
	Target  string            `json:"target"`
	Changes map[string]string `json:"changes"`
	Outcome string            `json:"outcome"`
	Error   string            `json:"error"`
}

// TestAuditLogOfCLIChanges: CLI changes made against a running
// gateway's config (keys issue, update, rotate, revoke; consumers create,
// update, delete; admin-tokens create, revoke) each appear once in the
// audit file next to the keystore, with actor cli:<user> and no key,
// token or hash; `keygate audit --json` shows them; the gateway keeps
// serving from the keystore that now also holds an admin token.
func TestAuditLogOfCLIChanges(t *testing.T) {
	g := startGateway(t, gwOpts{})
	var lastErr string
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := g.keygate(args...)
		if err != nil {
			t.Fatalf("keygate %v: %v\n%s", args, err, errOut)
		}
		lastErr = errOut
		return strings.TrimSpace(out)
	}
	issuedID := func() string {
		t.Helper()
		_, rest, _ := strings.Cut(lastErr, "issued ")
		id, _, _ := strings.Cut(rest, ":")
		if !strings.HasPrefix(id, "key_") {
			t.Fatalf("no key id in %q", lastErr)
		}
		return id
	}
	var changes []string
	con := cli("consumers", "create", "--name", "Acme", "--context", ctxA)
	changes = append(changes, "consumer.create "+con)
	cli("consumers", "update", con, "--meta", "tier=gold")
	changes = append(changes, "consumer.update "+con)
	k1 := cli("keys", "issue", "--product", "extraction", "--env", "live", "--context", ctxA, "--consumer", con)
	id1 := issuedID()
	changes = append(changes, "key.issue "+id1)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(k1, ctxA, []byte("%PDF-1.4 audit")); s != 200 {
			return fmt.Sprintf("new key: %d", s)
		}
		return ""
	})
	cli("keys", "update", id1, "--rate", "500", "--burst", "600", "--until", "2099-01-01T00:00:00Z")
	changes = append(changes, "key.update "+id1)
	k2 := cli("keys", "rotate", id1, "--grace", "1m")
	id2 := issuedID()
	changes = append(changes, "key.rotate "+id1)
	tok := cli("admin-tokens", "create", "--name", "ci", "--scopes", "keys:read,audit:read")
	out := cli("admin-tokens", "list", "--json")
	var toks []struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(out), &toks) != nil || len(toks) != 1 {
		t.Fatalf("admin-tokens list --json: %s", out)
	}
	changes = append(changes, "admin_token.create "+toks[0].ID)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(k2, ctxA, []byte("%PDF-1.4 audit")); s != 200 {
			return fmt.Sprintf("rotated key: %d", s)
		}
		return ""
	})
	cli("admin-tokens", "revoke", toks[0].ID)
	changes = append(changes, "admin_token.revoke "+toks[0].ID)
	cli("keys", "revoke", id1)
	changes = append(changes, "key.revoke "+id1)
	cli("keys", "revoke", id2)
	changes = append(changes, "key.revoke "+id2)
	cli("consumers", "delete", con)
	changes = append(changes, "consumer.delete "+con)

	actor := keygatecli.Actor().ID // the keygate binary runs as this test's user

	var secrets []string
	for _, s := range []string{k1, k2, tok} {
		h := sha256.Sum256([]byte(s))
		secrets = append(secrets, s, s[strings.LastIndexByte(s, '_')+1:], hex.EncodeToString(h[:]))
	}
	path := filepath.Join(g.dir, "audit.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode %v, want 0600", fi.Mode().Perm())
	}
	listed := cli("audit", "--json", "--limit", "0")
	for what, raw := range map[string]string{"audit.jsonl": string(data), "keygate audit --json": listed} {
		for _, s := range secrets {
			if strings.Contains(raw, s) {
				t.Errorf("%s holds a key, a token or a hash (%.12s…)", what, s)
			}
		}
	}
	var events []auditEvent
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e auditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		events = append(events, e)
	}
	var fromCLI []auditEvent
	if err := json.Unmarshal([]byte(listed), &fromCLI); err != nil || len(fromCLI) != len(events) {
		t.Fatalf("keygate audit --json: %d events (%v), the file has %d", len(fromCLI), err, len(events))
	}
	got := map[string]int{}
	for i, e := range events {
		if e.Actor != actor || e.Outcome != "ok" || e.ID == "" || e.Time.IsZero() {
			t.Errorf("event %s %s: actor %q outcome %q", e.Action, e.Target, e.Actor, e.Outcome)
		}
		if fromCLI[i].ID != e.ID {
			t.Errorf("keygate audit --json event %d is %s, the file's is %s", i, fromCLI[i].ID, e.ID)
		}
		got[e.Action+" "+e.Target]++
	}
	for _, c := range changes {
		if got[c] != 1 {
			t.Errorf("%q appears %d times in the audit log, want once", c, got[c])
		}
	}
	if len(events) != len(changes) {
		t.Errorf("%d events for %d changes", len(events), len(changes))
	}
	if e := events[3]; e.Action != "key.update" || e.Changes["override.rate"] != "500" || e.Changes["override.burst"] != "600" {
		t.Errorf("the update's changes: %+v", e)
	}
}
