package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// TestReadyzListsDegradedComponentsInOrder: while Redis is gone, /readyz
// names both the rate limiter and the Redis keystore as degraded, in the
// same (sorted) order on every request, so that monitors and diffs of the
// body do not flap.
func TestReadyzListsDegradedComponentsInOrder(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	client := rs.Client(t)
	key, _, err := (&keystore.RedisAdmin{Client: client}).Issue(context.Background(),
		keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA, Name: "readyz"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, setup{mod: func(c *config.Config) {
		useRedis(c, rs.Addr)
		c.Keystore.Backend = "redis"
		c.RateLimit.Backend = "redis"
		c.RateLimit.BreakerFailures = 1
		c.RateLimit.BreakerBackoff = time.Hour // stays open for the test
	}})
	h.secret(key)
	if r := h.sync(keyCred(key), ctxA); r.Status != 200 {
		t.Fatalf("sync: %d %s", r.Status, r.Body)
	}

	rs.Kill()
	type body struct {
		Degraded []string `json:"degraded"`
	}
	read := func() []string {
		var b body
		if err := json.Unmarshal(h.get(h.Admin, "/readyz", cred{}).Body, &b); err != nil {
			t.Fatal(err)
		}
		return b.Degraded
	}
	testkit.Eventually(t, 20*time.Second, "the limiter and the keystore degraded", func() error {
		h.sync(keyCred(key), ctxA) // a failed Redis call opens the limiter's breaker
		got := read()
		return testkit.True(len(got) == 2, "degraded %q", got)
	})
	for range 30 {
		if got := read(); !slices.IsSorted(got) {
			t.Fatalf("degraded = %q, not in a stable (sorted) order", got)
		}
	}
}
