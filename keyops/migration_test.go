package keyops_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/usage"
)

// TestMigrationReportBounds: the whole migration report is refused, as a
// bad request naming the way out (one consumer at a time), when the
// store holds more keys than the query's MaxKeys; on Redis the keys are
// counted first (an HLEN a bucket), so a refused report reads no record.
// A consumer's report and a report within the bound go on.
func TestMigrationReportBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.Start(t)
	backends := []struct {
		name  string
		store keyops.Store
		usage keyops.UsageReader
	}{
		{"file", &keystore.FileAdmin{Path: filepath.Join(t.TempDir(), "keys.yaml")}, &usage.FileStore{Path: filepath.Join(t.TempDir(), "usage.json")}},
		{"redis", &keystore.RedisAdmin{Client: rs.Client(t)}, &usage.RedisStore{Client: rs.Client(t)}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ops, err := keyops.New(keyops.Config{Store: b.store, Limits: defaultLimits(t), Usage: b.usage})
			if err != nil {
				t.Fatal(err)
			}
			actor := keyops.Actor{ID: "ops"}
			con, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: "Acme"})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				req := keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Live}
				if i < 2 {
					req.Consumer = con.ID
				}
				if _, _, err := ops.IssueKey(ctx, actor, req); err != nil {
					t.Fatal(err)
				}
			}
			keysIn := func(m keyops.Migration) int {
				n := 0
				for _, c := range m.Consumers {
					n += len(c.Keys)
				}
				return n
			}
			cases := []struct {
				name      string
				q         keyops.MigrationQuery
				keys      int  // reported; -1: refused
				readsNone bool // on Redis, without an HSCAN
			}{
				{"whole, within the bound", keyops.MigrationQuery{Since: 24 * time.Hour, MaxKeys: 5}, 5, false},
				{"whole, unbounded (the CLI)", keyops.MigrationQuery{Since: 24 * time.Hour}, 5, false},
				{"whole, past the bound", keyops.MigrationQuery{Since: 24 * time.Hour, MaxKeys: 4}, -1, true},
				{"one consumer, past the bound", keyops.MigrationQuery{Since: 24 * time.Hour, Consumer: con.ID, MaxKeys: 1}, 2, false},
			}
			for _, c := range cases {
				scans := func() int { return rs.Calls(t)["hscan"] }
				n0 := scans()
				m, err := ops.Migration(ctx, c.q)
				switch {
				case c.keys < 0:
					if !errors.Is(err, keyops.ErrInvalid) || !strings.Contains(err.Error(), "one consumer at a time") {
						t.Errorf("%s: %v, want a bad request naming the way out", c.name, err)
					}
				case err != nil || keysIn(m) != c.keys:
					t.Errorf("%s: %d keys, %v; want %d", c.name, keysIn(m), err, c.keys)
				}
				if b.name == "redis" && c.readsNone && scans() != n0 {
					t.Errorf("%s: the refused report read the key set (%d HSCANs)", c.name, scans()-n0)
				}
			}
		})
	}
}
