package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/usage"
)

// BenchmarkRequestPathResolvedLimit is BenchmarkRequestPath for a key of a
// consumer on a plan, with a temporary grant of its own: the limit comes
// resolved from the store, so the path does what it does for an env
// default plus one time comparison.
func BenchmarkRequestPathResolvedLimit(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
	}))
	b.Cleanup(up.Close)
	// The largest limits policy.CheckFields allows: nothing is refused.
	envs := map[string]policy.Limit{"live": {Rate: 1e6, Per: time.Second, Burst: 5e8}, "test": {Rate: 1e6, Per: time.Second, Burst: 5e8}}
	res, err := policy.NewResolver(envs, map[string]policy.Plan{"big": {Limit: policy.Limit{Rate: 1e6, Per: time.Second, Burst: 5e8}}})
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "keys.yaml")
	admin := &keystore.FileAdmin{Path: path}
	ctx := context.Background()
	con, _ := keystore.NewConsumer(keystore.Consumer{Name: "bench", Plan: "big"}, time.Now())
	if err := admin.CreateConsumer(ctx, con); err != nil {
		b.Fatal(err)
	}
	key, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Consumer: con.ID})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.UpdateKey(ctx, rec.ID, func(r keystore.Record) (keystore.Record, error) {
		r.Override = &policy.Override{Burst: 1e9, Until: time.Now().Add(time.Hour)}
		return r, nil
	}); err != nil {
		b.Fatal(err)
	}
	store, err := keystore.OpenFile(keystore.FileConfig{Path: path, Limits: res})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	keys, _ := auth.NewAPIKeys(auth.APIKeysConfig{Store: store})
	gw, err := gateway.New(gateway.Config{
		Upstreams:    gateway.UpstreamsConfig{Extraction: gateway.UpstreamConfig{Targets: []string{up.URL}}, Registry: gateway.UpstreamConfig{Targets: []string{up.URL}}},
		MaxBodyBytes: 100 << 20,
		Limits:       envs,
	}, gateway.Deps{Auth: keys, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{}), Usage: usage.NewCounters(0)})
	if err != nil {
		b.Fatal(err)
	}
	benchSync(b, gw, key, func(w *httptest.ResponseRecorder) {
		if got := w.Header()["Ratelimit-Limit"]; len(got) == 0 || got[0] != "1000000000" { // the grant's burst
			b.Fatalf("RateLimit-Limit %v", got)
		}
	})
}
