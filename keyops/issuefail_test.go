package keyops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// TestIssueNotAuditedIsRevoked: an issue whose key was stored but whose
// audit event could not be written (the audit stream's Redis is gone)
// hands out no key and leaves the stored key revoked: never live and
// unaudited.
func TestIssueNotAuditedIsRevoked(t *testing.T) {
	t.Parallel()
	keys, events := redistest.Start(t), redistest.Start(t)
	store := &keystore.RedisAdmin{Client: keys.Client(t)}
	log, err := audit.Open(audit.Config{File: audit.NoFile, Redis: events.Client(t, func(o *redis.Options) { o.DialTimeout = 200 * time.Millisecond })})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	s, err := keyops.New(keyops.Config{Store: store, Limits: res, Auditor: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	events.Kill()
	key, _, err := s.IssueKey(ctx, keyops.Actor{ID: "cli:test"}, keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err == nil || key != "" {
		t.Fatalf("issue with the audit log gone: key given %v, err %v", key != "", err)
	}
	if !strings.Contains(err.Error(), "not audited") || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("error %q does not say the key was not audited and was revoked", err)
	}
	recs, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Status != keystore.Revoked {
		t.Fatalf("stored keys after the failed issue: %+v; want one, revoked", recs)
	}
}
