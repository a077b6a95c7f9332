package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
)

// TestKeysMigrateMovesTheConsumers: `keygate keys migrate` moves the
// consumers of a store that the previous build wrote (every consumer in
// one hash, no layout marker) into their buckets, the keys' last uses
// from its one sorted set and the token endpoint's key references from
// its one hash into theirs, says how many, and audits it; a
// second run moves none, and the file keystore has nothing to move.
func TestKeysMigrateMovesTheConsumers(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keygate.yaml")
	yaml := fmt.Sprintf("keystore:\n  backend: redis\nredis:\n  addrs: [%q]\n  key_prefix: \"kgm:\"\naudit:\n  file: %s\n", rs.Addr, filepath.Join(dir, "audit.log"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range []string{"Acme", "Globex", "Initech"} {
		code, out, errOut := run("consumers", "create", "--config", cfg, "--name", name)
		if code != 0 {
			t.Fatalf("consumers create: %d %s", code, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	// Put them where the previous build kept them.
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ctx := context.Background()
	buckets, err := c.Keys(ctx, "kgm:keystore:{ks:*}:consumers").Result()
	if err != nil || len(buckets) == 0 {
		t.Fatalf("no bucket of consumers after three creations: %v %v", buckets, err)
	}
	for _, b := range buckets {
		all, _ := c.HGetAll(ctx, b).Result()
		for id, v := range all {
			c.HSet(ctx, "kgm:keystore:{ks}:consumers", id, v)
		}
		c.Del(ctx, b)
	}
	c.Del(ctx, "kgm:keystore:{ks}:layout")
	c.ZAdd(ctx, "kgm:usage:last", redis.Z{Score: 1764237600000, Member: "key_0123456789abcdef"})
	c.HSet(ctx, "kgm:tokenissuer:key-refs", "key_0123456789abcdef", "sha256:"+strings.Repeat("ab", 32))

	code, out, errOut := run("keys", "migrate", "--config", cfg)
	if code != 0 || !strings.Contains(out, "moved 3 consumers") || !strings.Contains(out, "moved 1 last uses") ||
		!strings.Contains(out, "moved 1 token references") {
		t.Fatalf("keys migrate: %d\n%s%s", code, out, errOut)
	}
	if n, _ := c.Exists(ctx, "kgm:keystore:{ks}:consumers", "kgm:usage:last", "kgm:tokenissuer:key-refs").Result(); n != 0 {
		t.Error("the one hash of consumers, the one sorted set of last uses or the one hash of token references is still there")
	}
	for _, id := range ids {
		code, out, _ := run("consumers", "show", "--config", cfg, id)
		if code != 0 || !strings.Contains(out, id) {
			t.Errorf("consumers show %s after the move: %d %s", id, code, out)
		}
	}
	audit, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	if !strings.Contains(string(audit), `"action":"keystore.migrate"`) || !strings.Contains(string(audit), `"consumers_moved":"3"`) {
		t.Errorf("the move is not in the audit log:\n%s", audit)
	}
	if code, out, _ := run("keys", "migrate", "--config", cfg); code != 0 || !strings.Contains(out, "moved 0 consumers") {
		t.Errorf("a second keys migrate: %d %s", code, out)
	}

	fileCfg := filepath.Join(dir, "file.yaml")
	if err := os.WriteFile(fileCfg, []byte("keystore:\n  backend: file\n  file: "+filepath.Join(dir, "keys.yaml")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run("keys", "migrate", "--config", fileCfg); code != 2 || !strings.Contains(errOut, "no layout to move") {
		t.Errorf("keys migrate on the file keystore: %d %s", code, errOut)
	}
}
