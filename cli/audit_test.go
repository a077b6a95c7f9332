package cli_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/cli"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keystore"
)

// secretsOf returns what must never be in an audit log for a key or a
// token: itself, its random part, and its hash in text and hex form.
func secretsOf(s string) []string {
	h := keystore.HashKey(s)
	_, rnd, _ := strings.Cut(s[1:], "_")
	if strings.HasPrefix(s, "svc_") {
		rnd = s[9:]
	}
	return []string{s, rnd, h.String(), hex.EncodeToString(h[:])}
}

// cliSeries runs issue, update, rotate, revoke, consumer create, update
// and delete, and admin-token create and revoke, plus one refused change,
// through the CLI. It returns the secrets seen and the changes made, as
// "action target outcome".
func cliSeries(t *testing.T, cfg string) (secrets, changes []string) {
	t.Helper()
	var lastErr string
	must := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(append(args, "--config", cfg)...)
		if code != 0 {
			t.Fatalf("keygate %v: %d %s", args, code, errOut)
		}
		lastErr = errOut
		return strings.TrimSpace(out)
	}
	// keyID is the id of the key just issued, from "issued key_…:" on
	// stderr.
	keyID := func(string) string {
		_, rest, ok := strings.Cut(lastErr, "issued ")
		id, _, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || !strings.HasPrefix(id, "key_") {
			t.Fatalf("no key id in %q", lastErr)
		}
		return id
	}
	con := must("consumers", "create", "--name", "Acme", "--meta", "crm=A-17", "--context", ctxA, "--plan", "team")
	changes = append(changes, "consumer.create "+con+" ok")
	must("consumers", "update", con, "--quota", "2000/1h", "--meta", "tier=gold")
	changes = append(changes, "consumer.update "+con+" ok")

	k1 := must("keys", "issue", "--product", "extraction", "--env", "live", "--context", ctxA, "--consumer", con, "--name", "app")
	id1 := keyID(k1)
	changes = append(changes, "key.issue "+id1+" ok")
	k2 := must("keys", "issue", "--product", "registry", "--env", "test", "--name", "schemas")
	id2 := keyID(k2)
	changes = append(changes, "key.issue "+id2+" ok")
	must("keys", "update", id1, "--plan", "pro", "--rate", "300", "--until", "2099-01-01T00:00:00Z")
	changes = append(changes, "key.update "+id1+" ok")
	k3 := must("keys", "rotate", id1, "--grace", "1h")
	id3 := keyID(k3)
	changes = append(changes, "key.rotate "+id1+" ok")
	must("keys", "revoke", id2)
	changes = append(changes, "key.revoke "+id2+" ok")
	if code, _, _ := run("consumers", "delete", con, "--config", cfg); code != 1 {
		t.Fatalf("delete of a consumer with active keys: exit %d", code)
	}
	changes = append(changes, "consumer.delete "+con+" error")
	must("keys", "revoke", id3)
	changes = append(changes, "key.revoke "+id3+" ok")
	must("keys", "revoke", id1) // the rotated key, in its grace period
	changes = append(changes, "key.revoke "+id1+" ok")
	must("consumers", "delete", con)
	changes = append(changes, "consumer.delete "+con+" ok")

	tok := must("admin-tokens", "create", "--name", "ci", "--scopes", "keys:read,audit:read", "--expires-in", "90d")
	code, out, _ := run("admin-tokens", "list", "--json", "--config", cfg)
	var toks []struct {
		ID string `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &toks) != nil || len(toks) != 1 || strings.Contains(out, tok[4:]) || strings.Contains(out, "sha256") {
		t.Fatalf("admin-tokens list --json: %d %s", code, out)
	}
	changes = append(changes, "admin_token.create "+toks[0].ID+" ok")
	must("admin-tokens", "revoke", toks[0].ID)
	changes = append(changes, "admin_token.revoke "+toks[0].ID+" ok")

	for _, s := range []string{k1, k2, k3, tok} {
		secrets = append(secrets, secretsOf(s)...)
	}
	return secrets, changes
}

// checkAuditLog checks the raw audit log text (the file, or the stream's
// events) and its events: no secret anywhere, every change exactly once
// with the CLI's actor.
func checkAuditLog(t *testing.T, what, raw string, events []audit.Event, secrets, changes []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(raw, s) {
			t.Errorf("%s: holds a key, a token or a hash (%.12s…)", what, s)
		}
	}
	got := map[string]int{}
	for _, e := range events {
		if e.Actor != cli.Actor().ID || e.Source != "" {
			t.Errorf("%s: event %s %s: actor %q source %q, want %q", what, e.Action, e.Target, e.Actor, e.Source, cli.Actor().ID)
		}
		got[e.Action+" "+e.Target+" "+e.Outcome]++
	}
	for _, c := range changes {
		if got[c] != 1 {
			t.Errorf("%s: %q appears %d times, want once", what, c, got[c])
		}
	}
	if len(events) != len(changes) {
		t.Errorf("%s: %d events for %d changes", what, len(events), len(changes))
	}
}

func parseLines(t *testing.T, raw string) []audit.Event {
	var out []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// TestCLIChangesAreAudited: with the file keystore, a series of CLI
// changes leaves each change once in audit.jsonl (next to the keystore,
// mode 0600) with actor cli:<user> and no key, token or hash; `keygate
// audit --json` shows the same events, oldest first.
func TestCLIChangesAreAudited(t *testing.T) {
	t.Parallel()
	cfg := planConfig(t)
	path := filepath.Join(filepath.Dir(cfg), "audit.jsonl")
	if code, _, _ := run("keys", "list", "--config", cfg); code != 0 {
		t.Fatal("keys list failed")
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("keys list, which changes nothing, created the audit file")
	}
	secrets, changes := cliSeries(t, cfg)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit.jsonl mode %v, want 0600", fi.Mode().Perm())
	}
	checkAuditLog(t, "audit.jsonl", string(data), parseLines(t, string(data)), secrets, changes)

	code, out, errOut := run("audit", "--json", "--since", "1h", "--config", cfg)
	var events []audit.Event
	if code != 0 || json.Unmarshal([]byte(out), &events) != nil {
		t.Fatalf("keygate audit --json: %d %s %s", code, out, errOut)
	}
	checkAuditLog(t, "keygate audit --json", out, events, secrets, changes)
	if events[0].Action != "consumer.create" || events[len(events)-1].Action != "admin_token.revoke" {
		t.Errorf("keygate audit --json is not oldest first: %s … %s", events[0].Action, events[len(events)-1].Action)
	}
	code, out, _ = run("audit", "--limit", "2", "--config", cfg)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 || !strings.Contains(lines[2], "admin_token.revoke") || !strings.Contains(lines[1], "admin_token.create") {
		t.Errorf("keygate audit --limit 2: %d\n%s", code, out)
	}
	if code, _, _ := run("audit", "--limit", "-1", "--config", cfg); code != 2 {
		t.Errorf("--limit -1: exit %d, want 2", code)
	}
}

// TestCLIChangesAreAuditedInRedis: with the Redis keystore, the same
// series is in the capped stream once per change, and in the file, and
// `keygate audit` reads the stream.
func TestCLIChangesAreAuditedInRedis(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keygate.yaml")
	yaml := fmt.Sprintf(`keystore:
  backend: redis
  file: %s
redis:
  addrs: [%q]
  key_prefix: "kgaudit:"
audit:
  redis_max_len: 5000
ratelimit:
  plans:
    pro: { rate: 200, per: 1s, burst: 400, quota: { requests: 50000, per: 24h } }
    team: { rate: 20, per: 1s, burst: 20, quota: { requests: 1000, per: 1h }, scope: consumer }
`, filepath.Join(dir, "data", "keys.yaml"), rs.Addr)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets, changes := cliSeries(t, cfg)

	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{rs.Addr}})
	defer c.Close()
	msgs, err := c.XRange(context.Background(), "kgaudit:audit:events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	var events []audit.Event
	for _, m := range msgs {
		s, _ := m.Values["event"].(string)
		fmt.Fprint(&raw, m.Values)
		var e audit.Event
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			t.Fatalf("stream entry %s: %v", m.ID, err)
		}
		events = append(events, e)
	}
	checkAuditLog(t, "stream", raw.String(), events, secrets, changes)

	data, err := os.ReadFile(filepath.Join(dir, "data", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	checkAuditLog(t, "file", string(data), parseLines(t, string(data)), secrets, changes)

	// keygate audit reads the stream: remove the file to prove it.
	_ = os.Remove(filepath.Join(dir, "data", "audit.jsonl"))
	code, out, errOut := run("audit", "--json", "--limit", "0", "--config", cfg)
	var listed []audit.Event
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
		t.Fatalf("keygate audit --json: %d %s %s", code, out, errOut)
	}
	checkAuditLog(t, "keygate audit --json (stream)", out, listed, secrets, changes)

	// keys import is audited too, with its counts.
	fileCfg := planConfig(t)
	code, out, _ = run("keys", "issue", "--product", "registry", "--env", "test", "--config", fileCfg)
	if code != 0 {
		t.Fatal("issue into the file keystore")
	}
	imported := strings.TrimSpace(out)
	from := filepath.Join(filepath.Dir(fileCfg), "keys.yaml")
	if code, _, errOut := run("keys", "import", "--from", from, "--config", cfg); code != 0 {
		t.Fatalf("keys import: %s", errOut)
	}
	code, out, _ = run("audit", "--json", "--limit", "1", "--config", cfg)
	var last []audit.Event
	if code != 0 || json.Unmarshal([]byte(out), &last) != nil || len(last) != 1 || last[0].Action != "key.import" ||
		last[0].Changes["keys_added"] != "1" || last[0].Actor != cli.Actor().ID || strings.Contains(out, imported[9:]) {
		t.Errorf("keys import in the audit log: %d %s", code, out)
	}
}
