package e2e

import (
	"encoding/json"
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
)

type usageReport struct {
	ID         string     `json:"id"`
	Admitted   int64      `json:"admitted"`
	Rate       int64      `json:"refused_rate"`
	Quota      int64      `json:"refused_quota"`
	Context    int64      `json:"refused_context"`
	Product    int64      `json:"refused_product"`
	BytesIn    int64      `json:"bytes_in"`
	LastUsedAt *time.Time `json:"last_used_at"`
	QuotaNow   *struct {
		Limit     string `json:"limit"`
		Remaining *int64 `json:"remaining"`
	} `json:"quota"`
}

func (g *gateway) usage(t *testing.T, args ...string) usageReport {
	t.Helper()
	out, errOut, err := g.keygate(append(args, "--json")...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errOut)
	}
	var u usageReport
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return u
}

func keyID(t *testing.T, g *gateway, name string) string {
	t.Helper()
	for _, r := range g.list() {
		if r.Name == name {
			return r.ID
		}
	}
	t.Fatalf("no key named %s", name)
	return ""
}

// TestUsageAcrossReplicas: a known mix of admitted, rate-limited,
// quota-refused, context-refused and product-refused requests through two replicas sharing
// Redis shows up exactly in `keys usage --json` once flushed; last use
// is kept to the minute; `keys list` shows it.
func TestUsageAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	gs := replicas(t, 2, rs.Addr, "file", `    live: { rate: 1, per: 1h, burst: 3 }
    test: { rate: 1000, per: 1s, burst: 1000, quota: { requests: 3, per: 24h } }`, "")
	rated := gs[0].issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "rated")
	quoted := gs[0].issue("--product", "extraction", "--env", "test", "--context", ctxA, "--name", "quoted")
	waitKey(t, gs, rated)
	waitKey(t, gs, quoted)
	ratedID, quotedID := keyID(t, gs[0], "rated"), keyID(t, gs[0], "quoted")

	expect := func(g *gateway, key, ctx string, want int) {
		t.Helper()
		if s, b, _ := g.post(key, ctx, []byte("%PDF-1.4 usage")); s != want {
			t.Fatalf("got %d, want %d: %s", s, want, b)
		}
	}
	// rated: burst 3 = 2 admitted + 1 refused for its context (the limiter
	// admitted it first), then 2 refused by the rate.
	expect(gs[0], rated, ctxA, 200)
	expect(gs[1], rated, ctxA, 200)
	expect(gs[0], rated, ctxB, 403)
	expect(gs[1], rated, ctxA, 429)
	expect(gs[0], rated, ctxA, 429)
	// rated on the registry: refused for the product, before the limiter.
	for _, g := range gs {
		req, _ := http.NewRequest("GET", g.API+"/registry/schemas", nil)
		req.Header.Set("X-Api-Key", rated)
		resp, err := g.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("extraction key on the registry: %d, want 403", resp.StatusCode)
		}
	}
	// quoted: quota 3 = 3 admitted, then 2 refused by the quota.
	for i := range 5 {
		want := 200
		if i >= 3 {
			want = 429
		}
		expect(gs[i%2], quoted, ctxA, want)
	}

	var r usageReport
	eventually(t, testkit.HangCheck, func() string {
		r = gs[1].usage(t, "keys", "usage", ratedID)
		if r.Admitted != 2 || r.Context != 1 || r.Rate != 2 || r.Quota != 0 || r.Product != 2 {
			return fmt.Sprintf("rated: %+v", r)
		}
		return ""
	})
	if r.LastUsedAt == nil || r.BytesIn <= 0 {
		t.Fatalf("rated: last_used_at %v, bytes_in %d", r.LastUsedAt, r.BytesIn)
	}
	first := *r.LastUsedAt
	eventually(t, testkit.HangCheck, func() string {
		q := gs[0].usage(t, "keys", "usage", quotedID, "--since", "1h")
		if q.Admitted != 3 || q.Quota != 2 || q.Rate != 0 || q.Context != 0 {
			return fmt.Sprintf("quoted: %+v", q)
		}
		if q.QuotaNow == nil || q.QuotaNow.Remaining == nil || *q.QuotaNow.Remaining != 0 {
			return fmt.Sprintf("quoted: quota %+v, want 0 remaining", q.QuotaNow)
		}
		return ""
	})

	// One more use, within the minute: it is counted, but the last use
	// is kept to the minute (usage.last_used_resolution), so it does not
	// move; each replica wrote its own first uses already. That it moves
	// once it moved by a minute is usage.TestRedisLastUseStep.
	time.Sleep(20 * time.Millisecond)
	expect(gs[1], rated, ctxA, 429)
	eventually(t, testkit.HangCheck, func() string {
		r = gs[0].usage(t, "keys", "usage", ratedID)
		if r.Rate != 3 || r.LastUsedAt == nil {
			return fmt.Sprintf("rated after one more: %+v (first use %v)", r, first)
		}
		return ""
	})
	if !r.LastUsedAt.Equal(first) {
		t.Errorf("last use moved within the minute: %v, first %v", r.LastUsedAt, first)
	}

	out, errOut, err := gs[0].keygate("keys", "list")
	if err != nil {
		t.Fatalf("keys list: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "LAST USED") || !strings.Contains(out, r.LastUsedAt.UTC().Format(time.RFC3339)) {
		t.Errorf("keys list does not show last use %v:\n%s", r.LastUsedAt, out)
	}
	// Flushes are counted and batched: at most about one per second per
	// replica, however many requests.
	for i, g := range gs {
		if n := g.metric("keygate_usage_flushes_total", "outcome", "ok"); n < 1 {
			t.Errorf("replica %d: keygate_usage_flushes_total{outcome=ok} = %v", i, n)
		}
	}
}
