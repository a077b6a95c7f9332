package adminapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
)

// roundTrips counts a client's round trips to Redis: each command, and
// each pipeline as one.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestRedisAdminCallCost: with the Redis keystore, real admin tokens and
// the audit log, issuing a key and revoking it through the API costs a
// few Redis round trips each, the same whether the store holds 10 keys
// or 3000, and no command that reads the key set. Each round trip is CPU
// in the replica that serves the call (bench-churn's admin calls cost
// 1.6 ms each when an issue took eight and a revocation ten): an issue
// is the token check, the id claim with the record (one pipeline), the
// change log with its wake-up (one pipeline) and the audit stream; a
// revocation is the token check, the id index, the record, its
// compare-and-set, the change log and the audit stream. An
// Idempotency-Key adds its claim and its record.
func TestRedisAdminCallCost(t *testing.T) {
	t.Parallel()
	const wantIssue, wantRevoke = 4, 6
	for _, keys := range []int{10, 3000} {
		rs := redistest.Start(t)
		client := rs.Client(t)
		fillRedis(t, client, keys)
		hook := &roundTrips{}
		client.AddHook(hook)
		r := newRedisReplica(t, client)
		c := r.srv.Client()
		body := `{"product":"extraction","env":"live","context":"` + ctxA + `","name":"churn"}`
		commands := func() map[string]string {
			m := map[string]string{}
			for _, line := range strings.Split(client.Info(context.Background(), "commandstats").Val(), "\n") {
				name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
				if ok && strings.HasPrefix(name, "cmdstat_") {
					calls, _, _ := strings.Cut(stats, ",")
					m[strings.TrimPrefix(name, "cmdstat_")] = calls
				}
			}
			return m
		}
		// The first calls load the compare-and-set script.
		var issued struct {
			ID string `json:"id"`
		}
		var revoked struct {
			Status string `json:"status"`
		}
		r.post(t, c, "/v1/keys", body, http.StatusCreated, &issued)
		r.post(t, c, "/v1/keys/"+issued.ID+"/revoke", "", http.StatusOK, &revoked)
		before := commands()
		n0 := hook.n.Load()
		r.post(t, c, "/v1/keys", body, http.StatusCreated, &issued)
		n1 := hook.n.Load()
		r.post(t, c, "/v1/keys/"+issued.ID+"/revoke", "", http.StatusOK, &revoked)
		n2 := hook.n.Load()
		if revoked.Status != "revoked" {
			t.Fatalf("revoked: status %q", revoked.Status)
		}
		if issue, revoke := n1-n0, n2-n1; issue > wantIssue || revoke > wantRevoke {
			t.Errorf("%d keys: an issue took %d Redis round trips (want at most %d), a revocation %d (want at most %d)", keys, issue, wantIssue, revoke, wantRevoke)
		}
		// With an Idempotency-Key: its claim and its record, one round
		// trip each; a retry is answered from the record alone (the
		// token check, the claim that finds it, and reading it).
		n3 := hook.n.Load()
		r.post(t, c, "/v1/keys", body, http.StatusCreated, &issued, "Idempotency-Key: cost-1")
		n4 := hook.n.Load()
		var replayed struct {
			ID string `json:"id"`
		}
		r.post(t, c, "/v1/keys", body, http.StatusCreated, &replayed, "Idempotency-Key: cost-1")
		n5 := hook.n.Load()
		if replayed.ID != issued.ID {
			t.Fatalf("the retry issued %s, the first call %s", replayed.ID, issued.ID)
		}
		if idem, replay := n4-n3, n5-n4; idem > wantIssue+2 || replay > 3 {
			t.Errorf("%d keys: an issue with an Idempotency-Key took %d round trips (want at most %d), its replay %d (want at most 3)", keys, idem, wantIssue+2, replay)
		}
		after := commands()
		for _, cmd := range []string{"hscan", "hgetall", "scan", "keys", "hkeys", "hvals", "hlen", "xrange", "xrevrange"} {
			if after[cmd] != before[cmd] {
				t.Errorf("%d keys: an issue and a revocation ran %s (%s before, %s after)", keys, cmd, before[cmd], after[cmd])
			}
		}
	}
}
