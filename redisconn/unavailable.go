package redisconn

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Unavailable reports whether err means that Redis, or the part of it
// that holds the key, cannot answer now but may shortly: the node refuses
// connections, drops them or does not answer in time; the cluster is
// re-electing a primary (CLUSTERDOWN, TRYAGAIN, MASTERDOWN); a replica is
// loading or was just promoted from read-only (LOADING, READONLY); WAIT
// found too few replicas (NOREPLICAS); the pool is exhausted; or a
// Breaker refuses the call. These are what a caller answers with 503 and
// Retry-After, never 500. A wrong command, a script error or redis.Nil
// is not unavailability.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	if Rejected(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true // a dial, read or write on the network failed or timed out
	}
	if redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMasterDownError(err) ||
		redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsNoReplicasError(err) ||
		redis.IsMaxClientsError(err) {
		return true
	}
	// go-redis makes this one itself, as a plain error, when no Sentinel
	// answers.
	return strings.Contains(err.Error(), "all sentinels specified in configuration are unreachable")
}
