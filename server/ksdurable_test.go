package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// TestRedisKeystoreKeyCountAndDataLoss: keygate_keystore_keys follows
// changes that arrive through the change log, not only full re-reads;
// and when the Redis keystore is emptied (as a restart without
// persistence leaves it), no valid key gets 401, the revoked key stays
// refused, the loss is counted, and afterwards Redis holds every key
// again.
func TestRedisKeystoreKeyCountAndDataLoss(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: rs.Client(t)}
	issue := redisIssuer(t, admin)
	good, revoked, rrec := goodAndRevoked(t, admin)
	h := newHarness(t, setup{mod: func(c *config.Config) {
		useRedis(c, rs.Addr)
		c.Keystore.Backend = "redis"
	}})
	h.secret(good)
	h.secret(revoked)
	testkit.Eventually(t, testkit.HangCheck, "loaded", func() error {
		return testkit.True(h.metric("keygate_keystore_keys") == 2, "keys %v", h.metric("keygate_keystore_keys"))
	})

	// A key issued after the load arrives through the change log.
	later, _ := issue()
	h.secret(later)
	testkit.Eventually(t, testkit.HangCheck, "the count follows the change log", func() error {
		return testkit.True(h.metric("keygate_keystore_keys") == 3, "keys %v", h.metric("keygate_keystore_keys"))
	})
	for _, k := range []string{good, later} {
		if r := h.sync(keyCred(k), ctxA); r.Status != 200 {
			t.Fatalf("sync: %d %s", r.Status, r.Body)
		}
	}

	if _, err := rs.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.metric("keygate_keystore_data_loss_total") < 1 || h.metric("keygate_keystore_data_loss") != 0 {
		for _, k := range []string{good, later} {
			if r := h.sync(keyCred(k), ctxA); r.Status != 200 {
				t.Fatalf("a valid key while Redis lost its data: %d %s", r.Status, r.Body)
			}
		}
		if r := h.sync(keyCred(revoked), ctxA); r.Status != 401 {
			t.Fatalf("the revoked key while Redis lost its data: %d", r.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no repair within 20s: data_loss_total %v", h.metric("keygate_keystore_data_loss_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := admin.Count(ctx); err != nil || n != 3 {
		t.Errorf("records in Redis after the repair: %d %v, want 3", n, err)
	}
	if r, err := admin.Get(ctx, rrec.ID); err != nil || r.Status != keystore.Revoked {
		t.Errorf("the revoked key in Redis after the repair: %+v %v", r, err)
	}
	var rd struct {
		Degraded []string `json:"degraded"`
	}
	if err := json.Unmarshal(h.get(h.Admin, "/readyz", cred{}).Body, &rd); err != nil {
		t.Fatal(err)
	}
	for _, d := range rd.Degraded {
		if strings.Contains(d, "lost") {
			t.Errorf("still degraded after the repair: %q", rd.Degraded)
		}
	}
}

// redisIssuer issues live extraction keys for ctxA straight into a Redis
// keystore.
func redisIssuer(t *testing.T, admin *keystore.RedisAdmin) func() (string, keystore.Record) {
	return func() (string, keystore.Record) {
		t.Helper()
		k, r, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
		if err != nil {
			t.Fatal(err)
		}
		return k, r
	}
}

// goodAndRevoked issues two keys into a Redis keystore and revokes the
// second.
func goodAndRevoked(t *testing.T, admin *keystore.RedisAdmin) (good, revoked string, rrec keystore.Record) {
	t.Helper()
	issue := redisIssuer(t, admin)
	good, _ = issue()
	revoked, rrec = issue()
	if _, err := admin.Revoke(context.Background(), rrec.ID); err != nil {
		t.Fatal(err)
	}
	return good, revoked, rrec
}
