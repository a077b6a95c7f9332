package ratelimit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Decisions that arrive together go to Redis together: on a single Redis
// as one call of the script that decides them all, in order (one command,
// one atomic step); on a Cluster or a Ring, whose keys may sit in
// different slots, as one pipeline of calls, one per decision. Either
// way requests in flight at the same moment reach Redis in one write and
// come back in one read, instead of a write and a read syscall each, and
// a network round trip each, one after another.
//
// It is a group commit with one pipeline in flight at a time and no
// goroutine of its own under light load: a caller that finds no pipeline
// in flight sends one, taking along every decision queued so far; a
// caller that finds one out queues its decision and waits for a sender
// to take it. When the sender's pipeline returns and decisions are
// queued, a goroutine takes over and sends the queue until it is empty,
// so that no caller waits for more than the pipeline in flight and its
// own. Under light load every decision goes alone, at once; under heavy
// load they go in batches, with no timer.
//
// One in flight, not more: a batch then holds every decision that
// arrived during the previous round trip, and where a write to Redis
// costs more CPU than the script's work for a decision (loopback, a
// Redis next to the replica) fewer, larger batches cost keygate less CPU
// per request. The price is latency: a decision that arrives while a
// call is out waits for it, up to one more round trip, and a far Redis
// bounds a replica at maxBatch decisions per round trip.
// BenchmarkRedisAllowConcurrent, callers with nothing else to do, is
// bound by round trips rather than CPU and would run faster with two.

// maxBatch bounds the decisions in one pipeline.
const maxBatch = 128

// call is one decision waiting for Redis.
type call struct {
	ctx context.Context // the caller's: a decision whose caller left is not sent
	// deadline is when the decision times out: Redis's answer must be
	// back by then, or the decision fails with errTimeout. The batch's
	// call is bounded by its earliest decision's deadline, so no caller
	// waits for Redis longer than the limiter's timeout, queued or not,
	// without a timer of its own.
	deadline time.Time
	keys     []string
	kbuf     [2]string // keys' array
	args     []any
	res      []int64
	err      error
	done     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1), args: make([]any, nArgs)} }}

// batcher queues decisions and sends them in pipelines. The zero value is
// not usable; NewRedis builds one.
type batcher struct {
	client  Client
	combine bool // one script call for a whole batch (a single Redis)
	mu      sync.Mutex
	queue   []*call // decisions waiting for the pipeline in flight to return
	sending bool    // a pipeline is in flight (its sender takes the queue next)
}

// run decides one call, alone or with others, and returns its reply;
// finished is false when the caller's ctx ended first, and c then still
// belongs to the sender that will fill it (its done channel has room for
// that) and must not be reused. The caller's ctx bounds its own wait, and a
// decision whose caller's ctx has ended before it is sent is dropped (it
// would spend a token and quota on a request that is never served); a
// pipeline once sent is finished for every call in it, by the earliest
// deadline among them.
func (b *batcher) run(ctx context.Context, c *call) (res []int64, finished bool, err error) {
	c.ctx = ctx
	b.mu.Lock()
	if b.sending {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		select {
		case <-c.done:
			return c.res, true, c.err
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	b.sending = true
	batch := b.take(append(make([]*call, 0, 8), c))
	b.mu.Unlock()
	b.send(batch)
	// c is decided. Decisions queued meanwhile go in the next pipeline,
	// sent by a goroutine rather than by this caller, whose request would
	// otherwise wait for other requests' round trips. The goroutine's
	// batch is not batch's array: that stays on this stack.
	if next := b.next(nil); next != nil {
		go b.drain(next)
	}
	<-c.done
	return c.res, true, c.err
}

// drain sends batch, then the queue, until it is empty; it is the
// batcher's sender until then.
func (b *batcher) drain(batch []*call) {
	for batch != nil {
		b.send(batch)
		batch = b.next(batch[:0])
	}
}

// next is the queue's next batch, in batch's array, for a sender whose
// pipeline has returned; nil when the queue is empty, and the sender then
// stops being one.
func (b *batcher) next(batch []*call) []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.sending = false
		return nil
	}
	return b.take(batch)
}

// take moves up to maxBatch queued calls into batch. b.mu is held.
func (b *batcher) take(batch []*call) []*call {
	n := min(len(b.queue), maxBatch-len(batch))
	batch = append(batch, b.queue[:n]...)
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = b.queue[:0:0]
	}
	return batch
}

// errTimeout is a decision whose deadline passed before Redis answered
// it, or before it could be sent (the pipeline ahead of it took the
// time). It is a context.DeadlineExceeded, as a timed-out call is.
var errTimeout = fmt.Errorf("ratelimit: Redis did not answer in time: %w", context.DeadlineExceeded)

// send runs a batch. A lone decision, or a whole batch when the batcher
// combines, is one plain script call (EVALSHA, or EVAL when Redis lost
// the script); otherwise the batch is one pipeline of EVALSHAs, each
// retried alone (with EVAL) when Redis lost the script.
func (b *batcher) send(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	now := time.Now()
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil { // the caller left: not sent
			c.err = err
			c.done <- struct{}{}
			continue
		}
		if !now.Before(c.deadline) { // its time went on the pipeline ahead
			c.err = errTimeout
			c.done <- struct{}{}
			continue
		}
		if deadline.IsZero() || c.deadline.Before(deadline) {
			deadline = c.deadline
		}
		live = append(live, c)
	}
	batch = live
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithDeadlineCause(context.Background(), deadline, errTimeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		c.res, c.err = gcra.Run(ctx, b.client, c.keys, c.args...).Int64Slice()
		c.done <- struct{}{}
		return
	}
	if b.combine {
		// An id's requests next to each other (any order of requests
		// that arrived together is a fair one): the script reads and
		// writes each id's keys once.
		slices.SortStableFunc(batch, func(x, y *call) int { return strings.Compare(x.keys[0], y.keys[0]) })
		keys, args := groups(batch)
		res, err := gcra.Run(ctx, b.client, keys, args...).Int64Slice()
		if err == nil && len(res) != replyLen*len(batch) {
			err = fmt.Errorf("%w: %d values for %d decisions", errReply, len(res), len(batch))
		}
		for i, c := range batch {
			if c.err = err; err == nil {
				c.res = res[replyLen*i : replyLen*(i+1) : replyLen*(i+1)]
			}
			c.done <- struct{}{}
		}
		return
	}
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		cmds[i] = gcra.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	for i, c := range batch {
		c.res, c.err = cmds[i].Int64Slice()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			c.res, c.err = gcra.Run(ctx, b.client, c.keys, c.args...).Int64Slice()
		}
		c.done <- struct{}{}
	}
}

// groups are the script's keys and arguments for batch, whose calls of
// one id are next to each other: each run of calls of one id with the
// same limit and cells wanted is one group, its keys and limit sent once
// and its last argument the number of calls in it.
func groups(batch []*call) ([]string, []any) {
	keys := make([]string, 0, 2*len(batch))
	args := make([]any, 0, nArgs*len(batch))
	n := 0 // calls in the last group
	for i, c := range batch {
		if i > 0 && c.keys[0] == batch[i-1].keys[0] && slices.Equal(c.args[:nArgs-1], batch[i-1].args[:nArgs-1]) {
			n++
			args[len(args)-1] = n
			continue
		}
		keys = append(keys, c.keys...)
		args = append(args, c.args[:nArgs-1]...)
		args = append(args, 1)
		n = 1
	}
	return keys, args
}
