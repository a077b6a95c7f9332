package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/keyops"
)

const ctxA = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"
const ctxB = "0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d"

// planConfig writes a config with a file keystore and two plans.
func planConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keygate.yaml")
	yaml := "keystore:\n  file: " + filepath.Join(dir, "keys.yaml") + `
ratelimit:
  plans:
    pro: { rate: 200, per: 1s, burst: 400, quota: { requests: 50000, per: 24h } }
    team: { rate: 20, per: 1s, burst: 20, quota: { requests: 1000, per: 1h }, scope: consumer }
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

type keyShow struct {
	ID       string          `json:"id"`
	Consumer string          `json:"consumer"`
	Plan     string          `json:"plan"`
	Override json.RawMessage `json:"override"`
	Limit    keyops.Limit    `json:"effective_limit"`
}

func showKey(t *testing.T, cfg, id string) keyShow {
	t.Helper()
	code, out, errOut := run("keys", "show", id, "--json", "--config", cfg)
	var s keyShow
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("keys show --json: %d %s %s", code, out, errOut)
	}
	return s
}

// TestConsumersCommands: create, list, show, update and delete a
// consumer; keys issued for it respect its contexts; delete is refused
// while it has active keys.
func TestConsumersCommands(t *testing.T) {
	t.Parallel()
	cfg := planConfig(t)
	code, out, errOut := run("consumers", "create", "--config", cfg, "--name", "Acme", "--meta", "crm=A-17", "--context", ctxA, "--plan", "team")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "con_") {
		t.Fatalf("create printed %q, want the id", out)
	}
	if code, _, errOut := run("consumers", "create", "--config", cfg, "--name", "X", "--plan", "gold"); code != 2 || !strings.Contains(errOut, "gold") {
		t.Errorf("create with an unknown plan: %d %s", code, errOut)
	}
	code, out, _ = run("consumers", "list", "--config", cfg, "--json")
	var cons []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &cons) != nil || len(cons) != 1 || cons[0]["id"] != id || cons[0]["plan"] != "team" {
		t.Fatalf("list --json: %d %s", code, out)
	}
	if code, out, _ := run("consumers", "list", "--config", cfg); code != 0 || !strings.Contains(out, "Acme") || !strings.Contains(out, ctxA) {
		t.Errorf("list: %d %s", code, out)
	}

	if code, _, errOut := run("keys", "issue", "--config", cfg, "--product", "extraction", "--env", "live", "--context", ctxB, "--consumer", id); code != 2 || !strings.Contains(errOut, "not among") {
		t.Errorf("issue outside the consumer's contexts: %d %s", code, errOut)
	}
	code, _, errOut = run("keys", "issue", "--config", cfg, "--product", "extraction", "--env", "live", "--context", ctxA, "--consumer", id)
	if code != 0 || !strings.Contains(errOut, "consumer="+id) {
		t.Fatalf("issue for the consumer: %d %s", code, errOut)
	}
	code, out, _ = run("keys", "list", "--config", cfg, "--json", "--consumer", id)
	var recs []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 {
		t.Fatalf("keys list --consumer: %d %s", code, out)
	}
	keyID := recs[0]["id"].(string)
	if s := showKey(t, cfg, keyID); s.Limit.Bucket != id || s.Limit.Sources["quota"] != "consumer plan team" {
		t.Errorf("key of a scope-consumer plan: %+v", s.Limit)
	}

	code, out, errOut = run("consumers", "update", id, "--config", cfg, "--quota", "2000/1h", "--meta", "crm=", "--meta", "tier=gold")
	if code != 0 || !strings.Contains(out, "metadata.tier") || strings.Contains(out, "metadata.crm") {
		t.Fatalf("update: %d %s %s", code, out, errOut)
	}
	if s := showKey(t, cfg, keyID); s.Limit.Quota != "2000/1h0m0s" || s.Limit.Sources["quota"] != "consumer override" || s.Limit.Sources["rate"] != "consumer plan team" {
		t.Errorf("after the consumer's override: %+v", s.Limit)
	}
	if code, _, errOut := run("consumers", "update", id, "--config", cfg, "--context", ctxB); code != 2 || !strings.Contains(errOut, keyID) {
		t.Errorf("narrowing contexts away from an active key: %d %s", code, errOut)
	}
	code, out, _ = run("consumers", "show", id, "--config", cfg, "--json")
	var shown map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown["keys"].(map[string]any)["active"].([]any)[0] != keyID {
		t.Errorf("show --json: %d %s", code, out)
	}
	if code, _, errOut := run("consumers", "delete", id, "--config", cfg); code != 1 || !strings.Contains(errOut, "active keys") {
		t.Errorf("delete with an active key: %d %s", code, errOut)
	}
	if code, _, errOut := run("keys", "revoke", keyID, "--config", cfg); code != 0 {
		t.Fatalf("revoke: %s", errOut)
	}
	if code, out, errOut := run("consumers", "delete", id, "--config", cfg); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("delete: %d %s %s", code, out, errOut)
	}
	if code, out, _ := run("consumers", "list", "--config", cfg, "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list after delete: %s", out)
	}
}

// TestKeysUpdateAndShow: a plan, an override field by field, a temporary
// grant with its fallback, and --clear-override, each explained by
// `keys show` (text and JSON).
func TestKeysUpdateAndShow(t *testing.T) {
	t.Parallel()
	cfg := planConfig(t)
	code, _, errOut := run("keys", "issue", "--config", cfg, "--product", "extraction", "--env", "test", "--context", ctxA)
	if code != 0 {
		t.Fatal(errOut)
	}
	_, out, _ := run("keys", "list", "--config", cfg, "--json")
	var recs []map[string]any
	_ = json.Unmarshal([]byte(out), &recs)
	id := recs[0]["id"].(string)

	s := showKey(t, cfg, id)
	if s.Limit.Rate != 5 || s.Limit.Quota != "1000/24h0m0s" || s.Limit.Sources["rate"] != "env default (test)" || s.Limit.Bucket != id {
		t.Errorf("default: %+v", s.Limit)
	}
	if code, _, errOut := run("keys", "update", id, "--config", cfg, "--plan", "gold"); code != 2 || !strings.Contains(errOut, "pro") {
		t.Errorf("unknown plan: %d %s", code, errOut)
	}
	if code, _, errOut := run("keys", "update", id, "--config", cfg, "--quota", "lots"); code != 2 || !strings.Contains(errOut, "quota") {
		t.Errorf("bad quota: %d %s", code, errOut)
	}
	if code, _, errOut := run("keys", "update", id, "--config", cfg, "--rate", "9", "--until", "2020-01-01T00:00:00Z"); code != 2 || !strings.Contains(errOut, "until") {
		t.Errorf("until in the past: %d %s", code, errOut)
	}
	code, out, errOut = run("keys", "update", id, "--config", cfg, "--plan", "pro")
	if code != 0 || !strings.Contains(out, "key plan pro") || !strings.Contains(errOut, "within a second") {
		t.Fatalf("update --plan: %d %s %s", code, out, errOut)
	}
	until := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	if code, _, errOut := run("keys", "update", id, "--config", cfg, "--rate", "500", "--burst", "800", "--quota", "none", "--until", until.Format(time.RFC3339)); code != 0 {
		t.Fatalf("update override: %s", errOut)
	}
	s = showKey(t, cfg, id)
	l := s.Limit
	if l.Rate != 500 || l.Burst != 800 || l.Per != "1s" || l.Quota != "none" ||
		l.Sources["rate"] != "key override" || l.Sources["per"] != "key plan pro" || l.Sources["quota"] != "key override" ||
		l.Until == nil || !l.Until.Equal(until) || l.Then == nil || l.Then.Rate != 200 || l.Then.Quota != "50000/24h0m0s" {
		t.Errorf("temporary grant: %+v then %+v", l, l.Then)
	}
	if !strings.Contains(string(s.Override), `"quota": "none"`) {
		t.Errorf("override JSON: %s", s.Override)
	}
	code, out, _ = run("keys", "show", id, "--config", cfg)
	for _, want := range []string{"effective limit (bucket " + id, "key override", "key plan pro", "from " + until.Format(time.RFC3339)} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("keys show: missing %q in\n%s", want, out)
		}
	}
	if code, _, errOut := run("keys", "update", id, "--config", cfg, "--clear-override", "--plan", ""); code != 0 {
		t.Fatal(errOut)
	}
	if s := showKey(t, cfg, id); s.Plan != "" || len(s.Override) != 0 || s.Limit.Sources["rate"] != "env default (test)" {
		t.Errorf("after --clear-override --plan '': %+v", s)
	}
	if code, _, errOut := run("keys", "update", id, "--config", cfg); code != 2 || !strings.Contains(errOut, "nothing to update") {
		t.Errorf("update without changes: %d %s", code, errOut)
	}
}
