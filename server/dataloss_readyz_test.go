package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
)

// TestRedisLostDataIsDegradedUntilRepaired: a single Redis without
// persistence loses the keystore, and no valid key gets 401 for it.
//
//   - SIGKILLed and restarted empty a second later: keys are served from
//     memory while it is down and after it is back, the loss is counted
//     and logged at error, and the replica writes back what it holds.
//   - Back empty and unable to take writes yet (emptied and at its memory
//     limit in one transaction, so the write-back is refused with OOM):
//     the replica stays degraded for as long as that lasts, /readyz names
//     the loss and the metric is 1, until Redis takes writes again.
//
// Either way, after the repair /readyz is clear, the admin token (which
// Redis had lost too) works again, every key works, the revoked one is
// refused, and Redis holds every record, the revocation included.
func TestRedisLostDataIsDegradedUntilRepaired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// held: the write-back is refused until the test lets it through.
		held bool
	}{
		{name: "restarted empty"},
		{name: "back empty and refusing writes", held: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRedisLostData(t, tc.held)
		})
	}
}

func testRedisLostData(t *testing.T, held bool) {
	rs := redistest.Start(t)
	ctx := context.Background()
	rc := rs.Client(t)
	admin := &keystore.RedisAdmin{Client: rc}
	good, revoked, rrec := goodAndRevoked(t, admin)
	tok, trec, err := keystore.NewAdminToken("ops", []string{adminapi.ScopeKeysRead}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateAdminToken(ctx, trec); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, setup{mod: func(c *config.Config) {
		useRedis(c, rs.Addr)
		c.Keystore.Backend = "redis"
		c.AdminAPI.Enabled, c.AdminAPI.Listen = true, "127.0.0.1:0"
	}})
	h.secret(good)
	h.secret(revoked)
	h.secret(tok)
	adminBase := "https://" + h.Server.AdminAPIAddr().String()
	listKeys := func() int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, adminBase+"/v1/keys", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return h.do(req).Status
	}
	degraded := func() []string {
		t.Helper()
		var rd struct {
			Degraded []string `json:"degraded"`
		}
		r := h.get(h.Admin, "/readyz", cred{})
		if r.Status != http.StatusOK {
			t.Fatalf("/readyz: %d %s", r.Status, r.Body)
		}
		if err := json.Unmarshal(r.Body, &rd); err != nil {
			t.Fatal(err)
		}
		return rd.Degraded
	}
	lost := func(d []string) bool {
		for _, s := range d {
			if strings.Contains(s, "lost keystore data") {
				return true
			}
		}
		return false
	}
	// The revoked key is tried once at each stage, not in the loops: a
	// client that keeps sending a bad key is slowed down with 429.
	checkRevoked := func(when string) {
		t.Helper()
		if r := h.sync(keyCred(revoked), ctxA); r.Status != http.StatusUnauthorized {
			t.Fatalf("the revoked key %s: %d", when, r.Status)
		}
	}
	checkKeys := func(when string) {
		t.Helper()
		if r := h.sync(keyCred(good), ctxA); r.Status != http.StatusOK {
			t.Fatalf("a valid key %s: %d %s", when, r.Status, r.Body)
		}
	}
	testkit.Eventually(t, testkit.HangCheck, "loaded", func() error {
		return testkit.True(h.metric("keygate_keystore_keys") == 2, "keys %v", h.metric("keygate_keystore_keys"))
	})
	checkKeys("before")
	checkRevoked("before")
	if s := listKeys(); s != http.StatusOK {
		t.Fatalf("the admin token before: %d", s)
	}

	if held {
		// Empty and full at once: what a restart without persistence
		// leaves, with the write-back held off until the test lets it
		// through.
		if _, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ConfigSet(ctx, "maxmemory-policy", "noeviction")
			p.ConfigSet(ctx, "maxmemory", "1")
			p.FlushAll(ctx)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, "/readyz names the loss", func() error {
			checkKeys("while Redis lost its data")
			d := degraded()
			return testkit.True(lost(d), "degraded %q", d)
		})
		if v := h.metric("keygate_keystore_data_loss"); v != 1 {
			t.Errorf("keygate_keystore_data_loss while degraded: %v, want 1", v)
		}
		if v := h.metric("keygate_keystore_degraded"); v != 1 {
			t.Errorf("keygate_keystore_degraded while degraded: %v, want 1", v)
		}
		checkRevoked("while Redis lost its data")
		// Held off for a while: still degraded, still serving.
		for range 10 {
			checkKeys("while the write-back is refused")
			if d := degraded(); !lost(d) {
				t.Fatalf("/readyz cleared before the repair: %q", d)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
	} else {
		rs.Kill()
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			checkKeys("while Redis is down")
		}
		rs.Restart()
		testkit.Eventually(t, 20*time.Second, "the loss is found", func() error {
			checkKeys("after Redis came back empty")
			return testkit.True(h.metric("keygate_keystore_data_loss_total") >= 1, "data_loss_total %v", h.metric("keygate_keystore_data_loss_total"))
		})
	}
	if !strings.Contains(h.Logs.String(), `"level":"error"`) || !strings.Contains(h.Logs.String(), "Redis lost keystore data") {
		t.Error("no error line says that Redis lost keystore data")
	}
	testkit.Eventually(t, 20*time.Second, "repaired", func() error {
		checkKeys("during the repair")
		d := degraded()
		return testkit.True(!lost(d) && h.metric("keygate_keystore_data_loss") == 0, "degraded %q", d)
	})
	checkKeys("after the repair")
	checkRevoked("after the repair")
	testkit.Eventually(t, testkit.HangCheck, "the admin token works again", func() error {
		return testkit.Equal(listKeys(), http.StatusOK)
	})
	if n, err := admin.Count(ctx); err != nil || n != 2 {
		t.Errorf("records in Redis after the repair: %d %v, want 2", n, err)
	}
	if r, err := admin.Get(ctx, rrec.ID); err != nil || r.Status != keystore.Revoked {
		t.Errorf("the revoked key in Redis after the repair: %+v %v", r, err)
	}
}
