// Package ratelimit decides whether a key may make another request now.
//
// A Limit describes what a key is allowed (a token bucket with an optional
// request quota per period); a Decision is the answer for one request, with
// everything the gateway needs for the RateLimit-* and Retry-After headers.
// Local keeps its state in process memory; Redis shares it across replicas.
package ratelimit

import "time"

// Quota is a number of requests allowed per period (for example 1000 per
// 24h). The zero value means no quota.
type Quota struct {
	Requests int64         `yaml:"requests"`
	Per      time.Duration `yaml:"per"`
}

// Enabled reports whether the quota limits anything.
func (q Quota) Enabled() bool { return q.Requests > 0 && q.Per > 0 }

// Limit is what one key is allowed: Rate requests per Per on average, in
// bursts of up to Burst, and at most Quota.Requests per Quota.Per.
type Limit struct {
	Rate  float64       `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
	Burst int           `yaml:"burst"`
	Quota Quota         `yaml:"quota"`
}

// Interval is the time one token takes to come back.
func (l Limit) Interval() time.Duration {
	if l.Rate <= 0 || l.Per <= 0 {
		return 0
	}
	return time.Duration(float64(l.Per) / l.Rate)
}

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
}
