package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/cli"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/server"
)

// TestMigrationReportAfterMixedTraffic: after requests with a key and
// with tokens for it, `keygate migration` counts each method per key,
// shows the last direct use, and marks the key that used tokens only as
// moved.
func TestMigrationReportAfterMixedTraffic(t *testing.T) {
	t.Parallel()
	const adminToken = "kga_migrationtest"
	h := newHarness(t, setup{
		mod: withTokenEndpoint(func(c *config.Config) { c.AdminAPI.Enabled, c.AdminAPI.Listen = true, "127.0.0.1:0" }),
		deps: func(d *server.Deps) {
			d.AdminTokens = adminTokens{adminToken: {ID: "tok_1", Scopes: []string{adminapi.ScopeUsageRead}}}
		},
	})
	h.secret(adminToken)
	recs, err := h.Keys.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var id2 string
	for _, r := range recs {
		if r.ID != h.LiveID && r.Context == ctxA {
			id2 = r.ID
		}
	}
	tok := h.mustExchange(h.LiveID, h.LiveKey)
	tok2 := h.mustExchange(id2, h.LiveKey2)
	for i, c := range []cred{keyCred(h.LiveKey), tokCred(tok), keyCred(h.LiveKey), tokCred(tok), tokCred(tok), tokCred(tok2), tokCred(tok2)} {
		if r := h.sync(c, ctxA); r.Status != 200 {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	assertError(t, h.sync(tokCred(tok), ctxB), 403, "Invalid Context") // counted too: it reached the key's checks

	cfg := filepath.Join(t.TempDir(), "keygate.yaml")
	if err := os.WriteFile(cfg, []byte("keystore:\n  file: "+h.Cfg.Keystore.File+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var m keyops.Migration
	testkit.Eventually(t, testkit.HangCheck, "the usage flushed", func() error {
		var out, errb bytes.Buffer
		if code := cli.Main([]string{"migration", "--config", cfg, "--json", "--since", "7d"}, nil, &out, &errb); code != 0 {
			t.Fatalf("keygate migration: %d %s", code, errb.String())
		}
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if got := keyOf(m, id2); got == nil || got.Requests.Bearer != 2 {
			return errStatus(0)
		}
		if got := keyOf(m, h.LiveID); got == nil || got.Requests.Bearer != 4 {
			return errStatus(0)
		}
		return nil
	})
	a, b := keyOf(m, h.LiveID), keyOf(m, id2)
	if a.Requests.APIKey != 2 || a.Requests.Bearer != 4 || a.Moved || a.Requests.LastAPIKey.IsZero() {
		t.Errorf("the key used both ways: %+v", a)
	}
	if b.Requests.APIKey != 0 || b.Requests.Bearer != 2 || !b.Moved || !b.Requests.LastAPIKey.IsZero() {
		t.Errorf("the key that used tokens only: %+v", b)
	}
	if r := keyOf(m, h.RegistryID); r == nil || r.Requests.APIKey != 0 || r.Requests.Bearer != 0 || r.Moved {
		t.Errorf("the unused key: %+v", r)
	}
	var table, errb bytes.Buffer
	if code := cli.Main([]string{"migration", "--config", cfg}, nil, &table, &errb); code != 0 || !bytes.Contains(table.Bytes(), []byte(id2)) || !bytes.Contains(table.Bytes(), []byte("MOVED")) {
		t.Errorf("table: %d %s %s", code, table.String(), errb.String())
	}
	if code := cli.Main([]string{"migration", "--config", cfg, "--since", "31d"}, nil, &table, &errb); code != 2 {
		t.Errorf("a window over 30 days: exit %d, want 2", code)
	}

	// The admin API answers the same report (scope usage:read).
	get := func(path string) result {
		req, _ := http.NewRequest(http.MethodGet, "https://"+h.Server.AdminAPIAddr().String()+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		return h.do(req)
	}
	r := get("/v1/migration?since=168h")
	var api keyops.Migration
	if err := json.Unmarshal(r.Body, &api); r.Status != 200 || err != nil {
		t.Fatalf("GET /v1/migration: %d %s", r.Status, r.Body)
	}
	if a, b := keyOf(api, h.LiveID), keyOf(api, id2); a == nil || b == nil || a.Requests.APIKey != 2 || a.Requests.Bearer != 4 || !b.Moved {
		t.Errorf("admin API report: %s", r.Body)
	}
	if r := get("/v1/migration?since=1000h"); r.Status != 400 {
		t.Errorf("a window over 30 days: %d", r.Status)
	}

	// One consumer's report: its keys alone, with their figures; an
	// unknown consumer is 404, and the CLI says so.
	con, err := keystore.NewConsumer(keystore.Consumer{Name: "Bolt"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Keys.CreateConsumer(t.Context(), con); err != nil {
		t.Fatal(err)
	}
	boltKey, bolt, err := h.Keys.Issue(t.Context(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: con.ID})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.HangCheck, "the gateway knows the consumer's key", func() error {
		if r := h.sync(keyCred(boltKey), ctxA); r.Status != 200 {
			return errStatus(r.Status)
		}
		return nil
	})
	boltTok := h.mustExchange(bolt.ID, boltKey)
	for range 2 {
		if r := h.sync(tokCred(boltTok), ctxA); r.Status != 200 {
			t.Fatalf("a token of the consumer's key: %d %s", r.Status, r.Body)
		}
	}
	var one keyops.Migration
	testkit.Eventually(t, testkit.HangCheck, "the consumer's usage flushed", func() error {
		r := get("/v1/migration?since=168h&consumer=" + con.ID)
		one = keyops.Migration{}
		if err := json.Unmarshal(r.Body, &one); r.Status != 200 || err != nil {
			t.Fatalf("GET /v1/migration?consumer=: %d %s", r.Status, r.Body)
		}
		if k := keyOf(one, bolt.ID); k == nil || k.Requests.Bearer != 2 {
			return errStatus(0)
		}
		return nil
	})
	if c := one.Consumers; len(c) != 1 || c[0].ID != con.ID || c[0].Name != "Bolt" || len(c[0].Keys) != 1 ||
		c[0].Keys[0].Requests.APIKey != 1 || c[0].Moved {
		t.Errorf("the consumer's report: %+v", one)
	}
	if r := get("/v1/migration?consumer=con_0000000000000000"); r.Status != 404 {
		t.Errorf("an unknown consumer: %d %s", r.Status, r.Body)
	}
	table.Reset()
	errb.Reset()
	if code := cli.Main([]string{"migration", "--config", cfg, "--consumer", con.ID}, nil, &table, &errb); code != 0 || !bytes.Contains(table.Bytes(), []byte(bolt.ID)) || bytes.Contains(table.Bytes(), []byte(h.LiveID)) {
		t.Errorf("keygate migration --consumer: %d %s %s", code, table.String(), errb.String())
	}
	if code := cli.Main([]string{"migration", "--config", cfg, "--consumer", "con_0000000000000000"}, nil, &table, &errb); code == 0 {
		t.Error("keygate migration --consumer with an unknown consumer exited 0")
	}
}

func keyOf(m keyops.Migration, id string) *keyops.MigrationKey {
	for _, c := range m.Consumers {
		for i := range c.Keys {
			if c.Keys[i].ID == id {
				return &c.Keys[i]
			}
		}
	}
	return nil
}
