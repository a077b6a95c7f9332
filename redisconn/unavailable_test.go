package redisconn_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/redisconn"
	"github.com/redis/go-redis/v9"
)

// TestUnavailable classifies errors that real redis-servers give: those
// an admin caller should retry (503) and those that are faults (500).
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := func(s *redistest.Server) *redis.Client {
		return s.Client(t, func(o *redis.Options) {
			o.ReadTimeout, o.DialTimeout = 200*time.Millisecond, 200*time.Millisecond
		})
	}
	primary := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	noReplicas := redistest.Start(t, "--min-replicas-to-write", "1")
	slotless := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	frozen := redistest.Start(t)
	frozenClient := client(frozen)
	if err := frozenClient.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	frozen.Freeze()
	t.Cleanup(frozen.Thaw)
	dead := redistest.Start(t)
	deadClient := client(dead)
	dead.Kill()

	for _, tc := range []struct {
		name string
		err  func() error
		want bool
	}{
		{"connection refused by a dead server", func() error { return deadClient.Set(ctx, "k", "v", 0).Err() }, true},
		{"a server that does not answer (i/o timeout)", func() error { return frozenClient.Get(ctx, "k").Err() }, true},
		{"READONLY from a replica", func() error { return client(replica).Set(ctx, "k", "v", 0).Err() }, true},
		{"NOREPLICAS from a primary without its replicas", func() error { return client(noReplicas).Set(ctx, "k", "v", 0).Err() }, true},
		{"CLUSTERDOWN from a node serving no slot", func() error { return client(slotless).Set(ctx, "k", "v", 0).Err() }, true},
		{"a deadline passed", func() error { return context.DeadlineExceeded }, true},
		{"redis.Nil is an answer", func() error { return client(primary).Get(ctx, "absent").Err() }, false},
		{"a wrong command is a fault", func() error { return client(primary).Do(ctx, "NOSUCHCOMMAND").Err() }, false},
		{"a wrong type is a fault", func() error {
			c := client(primary)
			_ = c.Set(ctx, "str", "v", 0).Err()
			return c.HGet(ctx, "str", "f").Err()
		}, false},
		{"no error", func() error { return nil }, false},
		{"the caller went away", func() error { return context.Canceled }, false},
		{"any other error", func() error { return errors.New("keystore: bad record") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if got := redisconn.Unavailable(err); got != tc.want {
				t.Errorf("Unavailable(%v) = %v, want %v", err, got, tc.want)
			}
		})
	}
}
