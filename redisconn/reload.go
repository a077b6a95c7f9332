package redisconn

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultSlotReloadEvery is the least time between two reloads of a
// Cluster's slot map that errors trigger.
const DefaultSlotReloadEvery = 250 * time.Millisecond

// slotReloader is a go-redis hook on a ClusterClient that reloads the
// slot map when a command fails because its node is unavailable (see
// Unavailable). go-redis by itself reloads the map only on MOVED or ASK,
// or once a minute, and a primary that died never answers MOVED: without
// this, every command for its slots would keep dialling the dead address
// long after the cluster promoted a replica. Reloads are rate-limited
// (every), and each is go-redis's own asynchronous, coalesced reload, so
// a burst of failures costs one CLUSTER SLOTS per interval and never
// blocks a caller.
type slotReloader struct {
	reload func()
	every  time.Duration
	now    func() time.Time
	last   atomic.Int64 // unix nanoseconds of the last reload
}

func (h *slotReloader) failed(err error) {
	if err == nil || !Unavailable(err) {
		return
	}
	now := h.now().UnixNano()
	last := h.last.Load()
	if now-last < int64(h.every) || !h.last.CompareAndSwap(last, now) {
		return
	}
	h.reload()
}

func (h *slotReloader) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		h.failed(err)
		return c, err
	}
}

func (h *slotReloader) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.failed(err)
		return err
	}
}

func (h *slotReloader) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			// One unavailable node fails only its own commands: look at
			// each, not at the first error alone.
			for _, c := range cmds {
				if Unavailable(c.Err()) {
					h.failed(c.Err())
					break
				}
			}
		}
		return err
	}
}

// newCluster builds a ClusterClient that follows a failover promptly
// (see slotReloader).
func newCluster(opts *redis.ClusterOptions) *redis.ClusterClient {
	c := redis.NewClusterClient(opts)
	h := &slotReloader{every: DefaultSlotReloadEvery, now: time.Now}
	h.reload = func() { c.ReloadState(context.Background()) }
	c.AddHook(h)
	// Each node's own client dials through here too, so that a refused
	// connection to a dead primary (which never reaches a command) also
	// counts.
	c.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(h) })
	return c
}
