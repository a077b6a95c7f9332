package keystore

// Durable acknowledgement of the Redis keystore's writes: WAIT for the
// Redis replicas before an admin's change is answered.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// ErrNotDurable means a change was stored on the Redis primary but fewer
// Redis replicas than asked for (RedisAdmin.WaitReplicas) confirmed it
// within RedisAdmin.WaitTimeout: a failover now could lose it. What holds
// then depends on the change (see RedisAdmin). The admin API answers 503.
var ErrNotDurable = errors.New("keystore: the change is stored on the Redis primary but its replicas did not confirm it in time")

// DefaultWaitTimeout is RedisAdmin.WaitTimeout's default.
const DefaultWaitTimeout = time.Second

// nodeClient is what a Redis Cluster client gives for the node that
// owns a key (go-redis ClusterClient.MasterForKey).
type nodeClient interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// connClient gives one connection of its pool for the caller alone
// (go-redis Client.Conn): WAIT counts the writes of its own connection.
type connClient interface {
	Conn() *redis.Conn
}

// ack waits until min(WaitReplicas, connected replicas) Redis replicas of
// every primary that holds one of keys have everything that primary
// wrote up to now (Redis WAIT), or WaitTimeout passes: then it returns an
// error wrapping ErrNotDurable, logs a warning and calls OnWaitTimeout.
//
// WAIT counts the writes of the connection it runs on, and the change
// was written on other connections of the pool. So each primary gets a
// small marker write (SET of <tag>:ack, in the hash tag of a key the
// change wrote, so it lands on the same node) on a connection of its
// own, then WAIT there: a replica that has the marker has every earlier
// write of that primary, the change included.
//
// A primary with no connected replica (a standalone Redis) is not
// waited for. A replica that lost its link to the primary is not
// counted as connected once Redis notices (repl-timeout); one whose
// link stalls is, and its WAIT times out. Operators who want writes
// refused while replicas are gone set Redis' own min-replicas-to-write.
func (a *RedisAdmin) ack(ctx context.Context, what string, keys ...string) error {
	if a.WaitReplicas <= 0 || len(keys) == 0 {
		return nil
	}
	type node struct {
		c      connClient
		marker string
	}
	var nodes []node
	if nc, ok := a.Client.(nodeClient); ok {
		seen := map[string]bool{}
		for _, k := range keys {
			c, err := nc.MasterForKey(ctx, k)
			if err != nil {
				return fmt.Errorf("keystore: %w", err)
			}
			addr := c.Options().Addr
			if !seen[addr] {
				seen[addr] = true
				nodes = append(nodes, node{c, ackMarker(k)})
			}
		}
	} else if cc, ok := a.Client.(connClient); ok {
		nodes = append(nodes, node{cc, ackMarker(keys[0])})
	}
	var errs []error
	for _, n := range nodes {
		if err := a.waitNode(ctx, n.c, n.marker); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if errors.Is(err, ErrNotDurable) {
		if a.OnWaitTimeout != nil {
			a.OnWaitTimeout(what)
		}
		a.logger().Warn("keystore: Redis replicas did not confirm a change in time; a failover now could lose it",
			zap.String("change", what), zap.Int("wait_replicas", a.WaitReplicas), zap.Duration("wait_timeout", a.waitTimeout()), zap.Error(err))
	}
	return err
}

// waitNode writes marker and WAITs for it on one connection of c.
func (a *RedisAdmin) waitNode(ctx context.Context, c connClient, marker string) error {
	conn := c.Conn()
	defer conn.Close()
	var info *redis.StringCmd
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, marker, "1", 0)
		info = p.Info(ctx, "replication")
		return nil
	})
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	n := min(a.WaitReplicas, connectedReplicas(info.Val()))
	if n <= 0 {
		return nil
	}
	got, err := conn.Wait(ctx, n, a.waitTimeout()).Result()
	if err != nil {
		return fmt.Errorf("keystore: WAIT: %w", err)
	}
	if int(got) < n {
		return fmt.Errorf("%w: %d of %d replicas of %s within %s", ErrNotDurable, got, n, conn.String(), a.waitTimeout())
	}
	return nil
}

// connectedReplicas reads connected_slaves from INFO replication; 0 when
// it is missing or bad.
func connectedReplicas(info string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, err := strconv.Atoi(v)
			if err == nil && n > 0 {
				return n
			}
			return 0
		}
	}
	return 0
}

// ackMarker is the marker key in the Cluster hash tag of key: key up to
// and including its "{...}" tag, then "ack". A key without a tag gives
// its own marker next to it.
func ackMarker(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i:], '}'); j > 1 {
			return key[:i+j+1] + ":ack"
		}
	}
	return key + ":ack"
}

func (a *RedisAdmin) waitTimeout() time.Duration {
	if a.WaitTimeout > 0 {
		return a.WaitTimeout
	}
	return DefaultWaitTimeout
}

func (a *RedisAdmin) logger() *zap.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return zap.NewNop()
}
