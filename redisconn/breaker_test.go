package redisconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/redisconn"
)

// The one rule: redis.Nil is a success, a caller that gave up counts
// neither way, other errors open the breaker after Failures in a row,
// and an open breaker refuses at once until Backoff has passed.
func TestBreakerRule(t *testing.T) {
	var changes []string
	b := redisconn.NewBreaker[string](redisconn.BreakerConfig{Name: "test", Failures: 2, Backoff: 50 * time.Millisecond,
		OnStateChange: func(from, to string) { changes = append(changes, from+">"+to) }})
	ctx := context.Background()
	fail := func(context.Context) (string, error) { return "", errors.New("connection refused") }
	ok := func(context.Context) (string, error) { return "v", nil }
	missing := func(context.Context) (string, error) { return "", redis.Nil }

	if _, err := b.Do(ctx, missing); !errors.Is(err, redis.Nil) || !b.Closed() {
		t.Fatalf("redis.Nil: %v, closed %v", err, b.Closed())
	}
	_, _ = b.Do(ctx, fail)
	// A caller that gave up between two failures does not reset the
	// count, nor add to it.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Do(gone, fail); !errors.Is(err, context.Canceled) {
		t.Fatalf("caller gone: %v, want context.Canceled", err)
	}
	if !b.Closed() {
		t.Fatal("a caller that gave up opened the breaker")
	}
	_, _ = b.Do(ctx, fail)
	if b.Closed() {
		t.Fatal("two failures in a row did not open the breaker")
	}
	called := false
	if _, err := b.Do(ctx, func(context.Context) (string, error) { called = true; return "", nil }); !redisconn.Rejected(err) || called {
		t.Fatalf("open breaker: %v, called %v", err, called)
	}
	time.Sleep(60 * time.Millisecond) // the backoff passes
	if v, err := b.Do(ctx, ok); err != nil || v != "v" || !b.Closed() {
		t.Fatalf("probe after backoff: %q %v, closed %v", v, err, b.Closed())
	}
	if want := "[closed>open open>half-open half-open>closed]"; fmtList(changes) != want {
		t.Fatalf("state changes %v, want %s", changes, want)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
