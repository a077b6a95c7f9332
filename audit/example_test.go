package audit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/keyops"
)

// A Log is the keyops.Auditor of a keyops.Service (or of an admintoken
// service) and a Reader for the admin API's GET /v1/audit-events.
func ExampleLog() {
	dir, _ := os.MkdirTemp("", "audit-example")
	defer os.RemoveAll(dir)
	log, err := audit.Open(audit.Config{File: filepath.Join(dir, "jsonl")})
	if err != nil {
		panic(err)
	}
	defer log.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	_ = log.Audit(ctx, keyops.Event{Time: t0, Actor: keyops.Actor{ID: "tok_0123456789abcdef", Addr: "10.1.2.3:50000"},
		Action: "key.revoke", Target: "key_0123456789abcdef", Changes: map[string]string{"status": "revoked"}})
	_ = log.Audit(ctx, keyops.Event{Time: t0.Add(time.Second), Actor: keyops.Actor{ID: "cli:alice"},
		Action: "key.update", Target: "key_0123456789abcdef", Changes: map[string]string{"name": "leaked svc_live_4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo"},
		Err: errors.New("keystore: key is revoked")})

	events, next, _ := log.Events(ctx, audit.Query{Target: "key_0123456789abcdef", Limit: 10})
	for _, e := range events {
		fmt.Printf("%s %s %q %s %s %v %q\n", e.Time.Format(time.RFC3339), e.Actor, e.Source, e.Action, e.Outcome, e.Changes, e.Error)
	}
	fmt.Printf("next cursor: %q\n", next)
	// Output:
	// 2026-11-23T01:00:01Z cli:alice "" key.update error map[name:leaked svc_live_[REDACTED]] "keystore: key is revoked"
	// 2026-11-23T01:00:00Z tok_0123456789abcdef "10.1.2.3:50000" key.revoke ok map[status:revoked] ""
	// next cursor: ""
}
