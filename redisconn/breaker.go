package redisconn

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// BreakerConfig configures a Breaker.
type BreakerConfig struct {
	// Name appears in the breaker's errors.
	Name string
	// Failures is how many consecutive failed Redis calls open the
	// breaker; default 3.
	Failures int
	// Backoff is how long the breaker stays open before one call may try
	// Redis again; default 1s.
	Backoff time.Duration
	// OnStateChange, when set, is told each change: "closed", "open" or
	// "half-open".
	OnStateChange func(from, to string)
}

// Breaker is a circuit breaker around Redis calls, shared by the Redis
// keystore and the Redis rate limiter so that both judge Redis's health
// by one rule:
//   - a call that returns nil or redis.Nil succeeded;
//   - a call whose caller gave up (its context was canceled or passed its
//     deadline while the call ran) says nothing about Redis: it is counted
//     neither way, and Do returns the context's error;
//   - any other error is a Redis failure; Failures of them in a row open
//     the breaker, which then refuses calls at once (Rejected) for
//     Backoff, then lets one through to probe.
//
// T is the call's result, so that no result is boxed on the hot path.
type Breaker[T any] struct {
	cb *gobreaker.CircuitBreaker[T]
}

// callerGone marks a failure caused by the caller's context.
type callerGone struct{ err error }

func (c *callerGone) Error() string { return "redisconn: caller gave up: " + c.err.Error() }
func (c *callerGone) Unwrap() error { return c.err }

// NewBreaker builds a Breaker.
func NewBreaker[T any](cfg BreakerConfig) *Breaker[T] {
	if cfg.Failures <= 0 {
		cfg.Failures = 3
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	failures := uint32(cfg.Failures)
	return &Breaker[T]{cb: gobreaker.NewCircuitBreaker[T](gobreaker.Settings{
		Name:        cfg.Name,
		MaxRequests: 1,
		Timeout:     cfg.Backoff,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, redis.Nil)
		},
		IsExcluded: isCallerGone,
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if cfg.OnStateChange != nil {
				cfg.OnStateChange(from.String(), to.String())
			}
		},
	})}
}

// Do runs call with ctx through the breaker. See Breaker for what counts
// as a failure; when the caller gave up, the error is ctx's.
func (b *Breaker[T]) Do(ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	return DoWith(b, ctx, call, func(ctx context.Context, call func(context.Context) (T, error)) (T, error) { return call(ctx) })
}

// DoWith is Do for a call that takes an argument: with a static call
// (a function or method expression, no closure), it allocates nothing
// beyond what the breaker itself does, for the request path.
func DoWith[T, A any](b *Breaker[T], ctx context.Context, arg A, call func(context.Context, A) (T, error)) (T, error) {
	v, err := b.cb.Execute(func() (T, error) {
		v, err := call(ctx, arg)
		if err != nil && ctx.Err() != nil {
			err = &callerGone{ctx.Err()}
		}
		return v, err
	})
	if isCallerGone(err) {
		var zero T
		return zero, errors.Unwrap(err)
	}
	return v, err
}

// isCallerGone reports whether err is a callerGone (the breaker wraps
// none of its own around it). It allocates nothing: it runs on every
// call.
func isCallerGone(err error) bool {
	_, ok := err.(*callerGone) //nolint:errorlint // the breaker returns the call's error as is; errors.As would allocate on every call
	return ok
}

// Closed reports whether the breaker lets calls through normally; false
// while it is open or probing.
func (b *Breaker[T]) Closed() bool { return b.cb.State() == gobreaker.StateClosed }

// State is "closed", "half-open" or "open".
func (b *Breaker[T]) State() string { return b.cb.State().String() }

// Rejected reports whether err is the breaker refusing a call without
// trying Redis (open, or a probe already under way).
func Rejected(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}
