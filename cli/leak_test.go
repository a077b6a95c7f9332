package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// TestKeysShowLeak: a key that secret scanning reported shows where it was
// found, when, and what was done, in `keys show` and its JSON; `keys
// usage` and the migration report mark it too.
func TestKeysShowLeak(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	cfg := filepath.Join(dir, "keygate.yaml")
	if err := os.WriteFile(cfg, []byte("keystore:\n  file: "+path+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	ops, err := keyops.New(keyops.Config{Store: &keystore.FileAdmin{Path: path}, Limits: res})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, rec, err := ops.IssueKey(ctx, keyops.Actor{ID: "cli:test"}, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live})
	if err != nil {
		t.Fatal(err)
	}
	const where = "https://github.com/octo/app/blob/0123abc/.env"
	if _, _, err := ops.ReportLeak(ctx, keyops.Actor{ID: "secret-scanning:github"}, keyops.Leak{KeyID: rec.ID, URL: where, Source: "content", Action: keyops.LeakRevoke}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("keys", "show", rec.ID, "--config", cfg)
	if code != 0 || !strings.Contains(out, "found public at "+where+" (content) on ") || !strings.Contains(out, "; revoked") {
		t.Fatalf("keys show: %d %s %s", code, out, errOut)
	}
	code, out, _ = run("keys", "show", rec.ID, "--json", "--config", cfg)
	var d struct {
		Leak *keystore.Leak `json:"leak"`
	}
	usageCode, usageOut, usageErr := run("keys", "usage", rec.ID, "--config", cfg)
	if usageCode != 0 || !strings.Contains(usageOut, "found public at "+where) {
		t.Errorf("keys usage: %d %s %s", usageCode, usageOut, usageErr)
	}
	migCode, migOut, migErr := run("migration", "--config", cfg)
	if migCode != 0 || !strings.Contains(migOut, "revoked (leaked)") {
		t.Errorf("migration: %d %s %s", migCode, migOut, migErr)
	}
	if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil || d.Leak == nil || d.Leak.URL != where || d.Leak.Action != "revoke" || d.Leak.FoundAt.IsZero() {
		t.Fatalf("keys show --json: %d %s (%v)", code, out, err)
	}
}
