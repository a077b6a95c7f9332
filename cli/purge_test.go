package cli_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeysPurge: `keys purge --dry-run` prints the ids a purge would
// delete and deletes nothing; `keys purge` prints the ids it deleted, one
// a line, and a count on stderr; the list then lacks them and keeps the
// active key; the audit log names each purged key.
func TestKeysPurge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keygate.yaml")
	_ = os.WriteFile(cfg, []byte("keystore:\n  file: "+filepath.Join(dir, "keys.yaml")+"\naudit:\n  file: "+filepath.Join(dir, "audit.log")+"\n"), 0o600)
	var ids []string
	for range 3 {
		code, _, errOut := run("keys", "issue", "--config", cfg, "--product", "registry", "--env", "test")
		if code != 0 {
			t.Fatalf("issue: %d %s", code, errOut)
		}
		_, after, _ := strings.Cut(errOut, "issued ")
		ids = append(ids, strings.TrimSuffix(strings.Fields(after)[0], ":"))
	}
	for _, id := range ids[:2] {
		if code, _, errOut := run("keys", "revoke", id, "--config", cfg); code != 0 {
			t.Fatalf("revoke: %d %s", code, errOut)
		}
	}
	time.Sleep(10 * time.Millisecond)
	want := strings.Join(slices.Sorted(slices.Values(ids[:2])), "\n")
	lines := func(out string) string { return strings.Join(slices.Sorted(slices.Values(strings.Fields(out))), "\n") }
	code, out, errOut := run("keys", "purge", "--config", cfg, "--older-than", "5ms", "--dry-run")
	if code != 0 || lines(out) != want || !strings.HasSuffix(out, "\n") || !strings.Contains(errOut, "would purge 2 keys") {
		t.Errorf("purge --dry-run: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if _, out, _ := run("keys", "list", "--config", cfg); strings.Count(out, "key_") != 3 {
		t.Errorf("after a dry run, list: %q, want 3 keys", out)
	}
	code, out, errOut = run("keys", "purge", "--config", cfg, "--older-than", "5ms")
	if code != 0 || lines(out) != want || !strings.HasSuffix(out, "\n") || !strings.Contains(errOut, "purged 2 keys") {
		t.Errorf("purge: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if _, out, _ := run("keys", "list", "--config", cfg); strings.Count(out, "key_") != 1 || !strings.Contains(out, ids[2]) {
		t.Errorf("after the purge, list: %q, want %s alone", out, ids[2])
	}
	if code, out, _ := run("audit", "--config", cfg, "--target", ids[0]); code != 0 || !strings.Contains(out, "key.purge") {
		t.Errorf("audit --target %s: %d %q, want its key.purge", ids[0], code, out)
	}
}
