package adminapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// tokenAuthn is what keygate's server puts between package admintoken
// and the API: real admin tokens, looked up in the keystore.
type tokenAuthn struct{ a *admintoken.Authenticator }

func (t tokenAuthn) Authenticate(ctx context.Context, token string) (adminapi.Principal, bool, error) {
	info, ok, err := t.a.Authenticate(ctx, token)
	if err != nil || !ok {
		return adminapi.Principal{}, false, err
	}
	return adminapi.Principal{ID: info.ID, Scopes: info.Scopes}, true, nil
}

// redisReplica is the admin API as one keygate replica serves it with
// the Redis keystore: a RedisAdmin, real admin tokens, the audit log
// (file and stream) and Idempotency-Keys in Redis, over real HTTP.
type redisReplica struct {
	srv   *httptest.Server
	token string // an admin token with keys:read and keys:write
	audit *audit.Log
}

func newRedisReplica(tb testing.TB, client redis.UniversalClient) *redisReplica {
	tb.Helper()
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: client}
	log, err := audit.Open(audit.Config{File: filepath.Join(tb.TempDir(), "audit.jsonl"), Redis: client})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = log.Close() })
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		tb.Fatal(err)
	}
	ops, err := keyops.New(keyops.Config{Store: admin, Limits: res, Auditor: log})
	if err != nil {
		tb.Fatal(err)
	}
	tokens, err := admintoken.New(admintoken.Config{Store: admin, Auditor: log})
	if err != nil {
		tb.Fatal(err)
	}
	tok, _, err := tokens.Create(ctx, keyops.Actor{ID: "cli:bench"}, admintoken.CreateRequest{Name: "churn", Scopes: []string{admintoken.KeysRead, admintoken.KeysWrite}})
	if err != nil {
		tb.Fatal(err)
	}
	authn, err := admintoken.NewAuthenticator(admintoken.AuthConfig{Store: admin})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := adminapi.DefaultConfig()
	cfg.Enabled, cfg.TLS = true, adminapi.TLSOff
	api, err := adminapi.New(cfg, adminapi.Deps{Ops: ops, Tokens: tokenAuthn{authn}, Redis: client, Audit: nil})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	tb.Cleanup(srv.Close)
	return &redisReplica{srv: srv, token: tok, audit: log}
}

// fillRedis stores n random key records in the Redis keystore in
// pipelined batches of 1000, as `keys import` does.
func fillRedis(tb testing.TB, client redis.UniversalClient, n int) {
	tb.Helper()
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: client}
	created := time.Now().UTC().Truncate(time.Second)
	batch := make([]keystore.Record, 0, 1000)
	var id [8]byte
	for i := range n {
		var h keystore.Hash
		_, _ = rand.Read(h[:])
		_, _ = rand.Read(id[:])
		batch = append(batch, keystore.Record{
			ID: "key_" + hex.EncodeToString(id[:]), Name: "app " + strconv.Itoa(i%5000), Hash: h,
			Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, CreatedAt: created, Status: keystore.Active,
		})
		if len(batch) == cap(batch) || i == n-1 {
			if _, _, err := admin.ImportBatch(ctx, batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// post sends one admin call and decodes its JSON answer into v; headers
// are "Name: value" pairs.
func (r *redisReplica) post(tb testing.TB, c *http.Client, path, body string, want int, v any, headers ...string) {
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != want {
		tb.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkRedisIssueRevoke100k is one round of what bench-churn's driver
// does to a replica's admin API: issue a key, then revoke it, over real
// HTTP (keep-alive) with a real admin token, the audit log and Redis
// holding 100k keys. The CPU per round is what the replica spends on two
// admin calls.
func BenchmarkRedisIssueRevoke100k(b *testing.B) {
	rs := redistest.Start(b)
	client := rs.Client(b)
	fillRedis(b, client, 100_000)
	r := newRedisReplica(b, client)
	c := r.srv.Client()
	body := `{"product":"extraction","env":"live","context":"` + ctxA + `","name":"churn"}`
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		var issued struct {
			ID string `json:"id"`
		}
		r.post(b, c, "/v1/keys", body, http.StatusCreated, &issued)
		var revoked struct {
			Status string `json:"status"`
		}
		r.post(b, c, "/v1/keys/"+issued.ID+"/revoke", "", http.StatusOK, &revoked)
		if revoked.Status != "revoked" {
			b.Fatalf("revoked: status %q", revoked.Status)
		}
	}
	// The CPU of this process (API, HTTP client and Redis client; not
	// redis-server) per round.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
