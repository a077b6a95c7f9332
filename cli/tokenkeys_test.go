package cli_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/tokenissuer"
)

// TestTokenKeysRotateAndList: with either keystore backend, rotate adds a
// signing key and keeps the previous one published, rotate --now leaves
// only the new one, list shows kid, alg, created and retiring, and neither
// the output nor the audit log holds a private key.
func TestTokenKeysRotateAndList(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	for _, backend := range []string{"file", "redis"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "keygate.yaml")
			auditFile := filepath.Join(dir, "audit.jsonl")
			yaml := fmt.Sprintf(`keystore:
  backend: %s
  file: %s
redis:
  addrs: [%q]
  key_prefix: "tk-%s:"
audit:
  file: %s
auth:
  token_endpoint:
    enabled: true
    issuer: https://keygate.test
`, backend, filepath.Join(dir, "keys.yaml"), rs.Addr, backend, auditFile)
			if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var outs []string
			must := func(args ...string) string {
				t.Helper()
				code, out, errOut := run(append(args, "--config", cfg)...)
				if code != 0 {
					t.Fatalf("keygate %v: %d %s", args, code, errOut)
				}
				outs = append(outs, out, errOut)
				return out
			}
			list := func() []tokenissuer.KeyInfo {
				var ks []tokenissuer.KeyInfo
				if err := json.Unmarshal([]byte(must("token-keys", "list", "--json")), &ks); err != nil {
					t.Fatal(err)
				}
				return ks
			}
			must("token-keys", "rotate")
			must("token-keys", "rotate")
			ks := list()
			if len(ks) != 2 || ks[0].Retiring.IsZero() || !ks[1].Retiring.IsZero() || ks[1].Alg != "ES256" {
				t.Fatalf("after two rotations: %+v", ks)
			}
			table := must("token-keys", "list")
			if !strings.Contains(table, "KID") || !strings.Contains(table, ks[0].Kid) || !strings.Contains(table, "RETIRING") {
				t.Errorf("list:\n%s", table)
			}
			out := must("token-keys", "rotate", "--now")
			if !strings.Contains(out, "withdrawn") {
				t.Errorf("rotate --now: %q", out)
			}
			if ks := list(); len(ks) != 1 {
				t.Errorf("after rotate --now: %+v", ks)
			}

			// No private key anywhere the CLI writes to a person.
			var priv []string
			if backend == "file" {
				path := tokenissuer.FilePathBeside(filepath.Join(dir, "keys.yaml"))
				fi, err := os.Stat(path)
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("signing-key file %s: %v %v", path, fi, err)
				}
				st, err := tokenissuer.NewFileStore(path).Load(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range st.Keys {
					priv = append(priv, base64.StdEncoding.EncodeToString(k.Private)[:40])
				}
			}
			audit, err := os.ReadFile(auditFile)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(audit), `"token_key.rotate"`); n != 3 {
				t.Errorf("audit log has %d token_key.rotate events, want 3:\n%s", n, audit)
			}
			all := strings.Join(outs, "\n") + string(audit)
			for _, p := range priv {
				if strings.Contains(all, p) {
					t.Error("a private key reached the output or the audit log")
				}
			}
			if strings.Contains(all, `"private"`) || strings.Contains(all, `"d":`) {
				t.Error("private key material in the output or the audit log")
			}
		})
	}
}
