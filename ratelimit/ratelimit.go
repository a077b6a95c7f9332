// Package ratelimit decides whether a key may make another request now.
//
// A policy.Limit describes what a key is allowed (a token bucket with an
// optional request quota per period); a Decision is the answer for one
// request, with everything the gateway needs for the RateLimit-* and Retry-After headers.
// Local keeps its state in process memory. Redis shares it across
// replicas and answers a decision or an error, nothing else; Resilient
// composes it with a Local fallback, a circuit breaker and a cache of ids
// known to be over their limit, for Redis outages. Config is the
// ratelimit section and builds either (NewLocal, NewRedis); plans and
// overrides are resolved by policy.Resolver; Failures throttles sources
// that fail authentication.
package ratelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/keygate/keygate/policy"
)

// Reason says which part of a Limit refused a request.
type Reason string

const (
	// ReasonRate means the token bucket is empty.
	ReasonRate Reason = "rate"
	// ReasonQuota means the quota for the current period is used up.
	ReasonQuota Reason = "quota"
)

// Decision is the answer for one request.
type Decision struct {
	// Allowed is true when the request may proceed.
	Allowed bool
	// Reason says what refused the request; empty when Allowed.
	Reason Reason
	// Limit is the size of the window reported in RateLimit-Limit: the
	// burst, or the quota when the quota is the tighter constraint.
	Limit int64
	// Remaining is what is left of Limit after this request.
	Remaining int64
	// RetryAfter is how long to wait before a refused request can succeed;
	// zero when Allowed.
	RetryAfter time.Duration
	// Reset is the time until Remaining is back to Limit (or, for a quota,
	// until the period ends).
	Reset time.Duration
	// Bucket and Quota are the two parts of the limit, each on its own,
	// for the RateLimit field (draft-ietf-httpapi-ratelimit-headers),
	// which reports them side by side. Limit, Remaining and Reset above
	// are the tighter of the two (the legacy RateLimit-* fields).
	Bucket, Quota Window
}

// Window is what one part of a limit (the token bucket, or the quota)
// says after a request. The zero value is unknown.
type Window struct {
	// Known is false when the part was not looked at: a limit without a
	// quota, or the bucket of a request the quota refused in Redis.
	Known bool
	// Remaining is how many more requests the part admits now.
	Remaining int64
	// Reset is the time until the part is whole again: the bucket full,
	// or the quota's period over.
	Reset time.Duration
}

// ErrUnavailable is returned (wrapped) by Allow when the limiter cannot
// decide: Redis failed and failure_mode is closed. The gateway answers 503.
var ErrUnavailable = errors.New("ratelimit: limiter unavailable")

// ErrInvalid is returned (wrapped) by Allow for an empty id or a Limit that
// cannot limit anything (rate, per or burst not positive). It is a
// programming or configuration error, not a refusal.
var ErrInvalid = errors.New("ratelimit: invalid request")

// check reports whether id and l can be decided on.
func check(id string, l policy.Limit) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty id", ErrInvalid)
	case l.Rate <= 0 || l.Per <= 0 || l.Burst < 1:
		return fmt.Errorf("%w: limit needs rate > 0, per > 0 and burst >= 1", ErrInvalid)
	case l.Quota.Requests < 0 || l.Quota.Per < 0:
		return fmt.Errorf("%w: negative quota", ErrInvalid)
	}
	return nil
}

// combine builds a Decision from the bucket's and the quota's views. The
// quota is reported in Limit, Remaining and Reset when it is as tight as
// the bucket or tighter: with both used up, the quota is what will refuse
// the next request for longest, and a client must see it before it does.
func combine(l policy.Limit, bucketRemaining int64, bucketReset time.Duration, quotaRemaining int64, quotaReset time.Duration) Decision {
	d := Decision{Allowed: true, Limit: int64(l.Burst), Remaining: bucketRemaining, Reset: bucketReset}
	d.Bucket = Window{Known: true, Remaining: bucketRemaining, Reset: bucketReset}
	if l.Quota.Enabled() {
		d.Quota = Window{Known: true, Remaining: max(quotaRemaining, 0), Reset: quotaReset}
	}
	if l.Quota.Enabled() && quotaRemaining <= bucketRemaining {
		d.Limit, d.Remaining, d.Reset = l.Quota.Requests, quotaRemaining, quotaReset
	}
	return d
}
