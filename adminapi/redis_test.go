package adminapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// TestIdempotencyAcrossReplicas: with Redis, a retry that lands on
// another replica replays the first response and issues no key, and
// racing attempts on two replicas issue one key.
func TestIdempotencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	client := rs.Client(t)
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeystore(t, path)
	var replicas []*httptest.Server
	for i := 0; i < 2; i++ {
		cfg := adminapi.DefaultConfig()
		cfg.Enabled, cfg.TLS = true, adminapi.TLSOff
		api, err := adminapi.New(cfg, adminapi.Deps{Ops: newOps(t, path, nil), Tokens: testTokens(), Redis: client, RedisPrefix: "kgtest:"})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(api.Handler())
		t.Cleanup(srv.Close)
		replicas = append(replicas, srv)
	}
	store := &keystore.FileAdmin{Path: path}
	count := func() int {
		recs, err := store.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	before := count()
	body := `{"product":"registry","env":"test","name":"once"}`
	a := do(t, replicas[0].Client(), replicas[0].URL, allToken, "POST", "/v1/keys", body, "Idempotency-Key: k1")
	b := do(t, replicas[1].Client(), replicas[1].URL, allToken, "POST", "/v1/keys", body, "Idempotency-Key: k1")
	if a.status != http.StatusCreated || b.status != http.StatusCreated || b.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d, retry on the other replica %d %v", a.status, b.status, b.header)
	}
	key := a.json(t)["key"].(string)
	if bj := b.json(t); bj["id"] != a.json(t)["id"] || bj["key"] != nil || strings.Contains(string(b.body), key) {
		t.Fatalf("replay %s", b.body)
	}
	checkProblem(t, do(t, replicas[1].Client(), replicas[1].URL, allToken, "POST", "/v1/keys", `{"product":"registry","env":"live"}`, "Idempotency-Key: k1"), http.StatusUnprocessableEntity)
	// Redis holds no key and not the Idempotency-Key itself.
	for _, k := range client.Keys(context.Background(), "*").Val() {
		v := client.Get(context.Background(), k).Val()
		if strings.Contains(k, "k1") || strings.Contains(v, key) || !strings.HasPrefix(k, "kgtest:adminapi:idem:") {
			t.Errorf("redis key %s = %s", k, v)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := replicas[i%2]
			s := do(t, r.Client(), r.URL, allToken, "POST", "/v1/keys", body, "Idempotency-Key: race").status
			if s != http.StatusCreated && s != http.StatusConflict {
				t.Errorf("status %d", s)
			}
		}()
	}
	wg.Wait()
	if n := count(); n != before+2 {
		t.Fatalf("%d keys issued, want 2", n-before)
	}
	// Redis down: a write with an Idempotency-Key is refused (503), not
	// made without the guarantee; one without still works.
	rs.Kill()
	checkProblem(t, do(t, replicas[0].Client(), replicas[0].URL, allToken, "POST", "/v1/keys", body, "Idempotency-Key: k2"), http.StatusServiceUnavailable)
	if r := do(t, replicas[0].Client(), replicas[0].URL, allToken, "POST", "/v1/keys", body); r.status != http.StatusCreated {
		t.Fatalf("without Idempotency-Key: %d", r.status)
	}
}

// TestRedisKeyChangesReadOneKey: with the Redis keystore, issuing,
// showing and revoking a key through the API reads that key, never the
// key set (no HSCAN reaches Redis): each answer carries the key's detail,
// and a read of every record there made a change cost O(keys) — 8 ms of
// CPU per admin call at 1000 keys under bench-churn.
func TestRedisKeyChangesReadOneKey(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	client := rs.Client(t)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: client}
	for i := 0; i < 50; i++ {
		if _, _, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := ratelimit.DefaultConfig()
	res, err := cfg.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: res})
	if err != nil {
		t.Fatal(err)
	}
	acfg := adminapi.DefaultConfig()
	acfg.Enabled, acfg.TLS = true, adminapi.TLSOff
	api, err := adminapi.New(acfg, adminapi.Deps{Ops: ops, Tokens: testTokens()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	hscans := func() string {
		for _, line := range strings.Split(client.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(line, "cmdstat_hscan:") {
				return strings.TrimSpace(line)
			}
		}
		return "none"
	}
	before := hscans()
	issued := do(t, srv.Client(), srv.URL, allToken, "POST", "/v1/keys", `{"product":"registry","env":"test","name":"churn"}`)
	if issued.status != http.StatusCreated {
		t.Fatalf("issue: %d %s", issued.status, issued.body)
	}
	id, _ := issued.json(t)["id"].(string)
	for _, step := range []struct {
		method, path string
		want         int
		status       string
	}{
		{"GET", "/v1/keys/" + id, http.StatusOK, "active"},
		{"POST", "/v1/keys/" + id + "/revoke", http.StatusOK, "revoked"},
	} {
		r := do(t, srv.Client(), srv.URL, allToken, step.method, step.path, "")
		if r.status != step.want || r.json(t)["status"] != step.status {
			t.Errorf("%s %s: %d %s, want %d with status %s", step.method, step.path, r.status, r.body, step.want, step.status)
		}
	}
	if after := hscans(); after != before {
		t.Errorf("key changes scanned the key set: %s, before %s", after, before)
	}
}
