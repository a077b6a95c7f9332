package keystore

import (
	"errors"

	"github.com/keygate/keygate/redisconn"
)

// Unavailable reports whether err means the key store cannot answer now
// but may shortly: ErrUnavailable, or a Redis error that redisconn
// classifies as unavailability (a node refusing or dropping connections,
// a timeout, a cluster re-electing a primary, a breaker refusing). The
// admin API answers these with 503 and Retry-After, never 500, so that a
// caller retries instead of reporting a fault.
func Unavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || redisconn.Unavailable(err)
}
