package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/cli"
)

func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = cli.Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestUsage: bad usage exits 2 with a message, never a panic.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		has  string
	}{
		{nil, 2, "Usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"keys"}, 2, "issue, list"},
		{[]string{"keys", "burn"}, 2, "unknown subcommand"},
		{[]string{"keys", "issue", "--product", "extraction", "--env", "live"}, 2, "context"},
		{[]string{"keys", "issue", "--product", "billing", "--env", "live"}, 2, "product"},
		{[]string{"keys", "revoke"}, 2, "exactly one key ID"},
		{[]string{"keys", "import"}, 2, "--from"},
		{[]string{"keys", "purge"}, 2, "--older-than"},
		{[]string{"keys", "purge", "--older-than", "0d"}, 2, "--older-than"},
		{[]string{"keys", "purge", "--older-than", "90d", "key_0123456789abcdef"}, 2, "unexpected"},
		{[]string{"serve", "--config", "/nonexistent.yaml"}, 1, "nonexistent.yaml"},
		{[]string{"help"}, 0, ""},
		{[]string{"version"}, 0, ""},
	} {
		code, out, errOut := run(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.has) {
			t.Errorf("keygate %v: exit %d (want %d), output %q", c.args, code, c.code, out+errOut)
		}
	}
}

// TestKeysWithFileKeystore: issue prints the key alone on stdout's first
// line; list --json never shows keys or hashes; flags may follow the ID.
func TestKeysWithFileKeystore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keygate.yaml")
	_ = os.WriteFile(cfg, []byte("keystore:\n  file: "+filepath.Join(dir, "keys.yaml")+"\n"), 0o600)
	code, out, errOut := run("keys", "issue", "--config", cfg, "--product", "registry", "--env", "test", "--name", "schemas")
	if code != 0 {
		t.Fatalf("issue: %d %s", code, errOut)
	}
	key := strings.TrimSuffix(out, "\n")
	if strings.Contains(key, "\n") || !strings.HasPrefix(key, "svc_test_") {
		t.Fatalf("stdout = %q, want the key alone", out)
	}
	if strings.Contains(errOut, key) {
		t.Error("the key is repeated on stderr")
	}
	code, out, _ = run("keys", "list", "--config", cfg, "--json")
	var recs []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 {
		t.Fatalf("list --json: %d %q", code, out)
	}
	if strings.Contains(out, key[9:]) || strings.Contains(out, "sha256") {
		t.Error("list --json shows the key or its hash")
	}
	id := recs[0]["id"].(string)
	if code, _, errOut := run("keys", "revoke", id, "--config", cfg); code != 0 {
		t.Fatalf("revoke with the flag after the ID: %d %s", code, errOut)
	}
	code, out, _ = run("keys", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "revoked") || strings.Contains(out, key[9:]) {
		t.Errorf("list: %q", out)
	}
	if code, _, errOut := run("keys", "rotate", id, "--config", cfg); code != 1 || !strings.Contains(errOut, "revoked") {
		t.Errorf("rotating a revoked key: %d %s", code, errOut)
	}
}
