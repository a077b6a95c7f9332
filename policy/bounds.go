package policy

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Bounds on every field of a limit. Every way a limit comes in (the
// configuration's env defaults and plans, key and consumer overrides in
// the admin API, the CLI and a keystore file, the portal's limit
// requests) is checked by CheckFields against these, so that no path
// takes a limit the limiters cannot honour: a rate so small that a key
// answers 429 for ever, one so large that the token interval rounds to
// nothing, or a count that overflows.
const (
	// MinRate and MaxRate bound Rate, the requests per Per.
	MinRate = 0.01
	MaxRate = 1e6
	// MaxRatePerSecond bounds Rate/Per where both are known: 1e6 per
	// second.
	MaxRatePerSecond = 1e6
	// MinPer and MaxPer bound Per and Quota.Per.
	MinPer = time.Millisecond
	MaxPer = 366 * 24 * time.Hour
	// MaxInterval bounds Per/Rate (the time one token takes to come back)
	// where both are known: a limit lets at least one request through
	// per 366 days.
	MaxInterval = MaxPer
	// MaxBurst bounds Burst.
	MaxBurst = 1_000_000_000
	// MaxQuotaRequests bounds Quota.Requests.
	MaxQuotaRequests = 1_000_000_000_000
)

// ErrOutOfBounds is wrapped by every *FieldError of CheckFields.
var ErrOutOfBounds = errors.New("policy: limit field out of bounds")

// FieldError is a limit field outside its bounds. Field is its name
// within the limit: "rate", "per", "burst", "quota.requests" or
// "quota.per"; callers put their own path in front.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes a FieldError match ErrOutOfBounds.
func (e *FieldError) Unwrap() error { return ErrOutOfBounds }

// Fields are the limit fields to check; nil ones are not set and not
// checked. A Quota of zero value means "no quota" and is valid when
// NoQuotaOK.
type Fields struct {
	Rate      *float64
	Per       *time.Duration
	Burst     *int
	Quota     *Quota
	NoQuotaOK bool
}

// WholeLimit returns the Fields of l, every one set; its zero quota is
// "no quota".
func WholeLimit(l Limit) Fields {
	return Fields{Rate: &l.Rate, Per: &l.Per, Burst: &l.Burst, Quota: &l.Quota, NoQuotaOK: true}
}

// OverrideFields returns the Fields o sets (a zero field is not set; a
// non-nil zero Quota overrides the quota to none).
func OverrideFields(o Override) Fields {
	f := Fields{Quota: o.Quota, NoQuotaOK: true}
	if o.Rate != 0 {
		f.Rate = &o.Rate
	}
	if o.Per != 0 {
		f.Per = &o.Per
	}
	if o.Burst != 0 {
		f.Burst = &o.Burst
	}
	return f
}

// CheckFields is the one check of limit fields against their bounds. It
// returns nil or the first *FieldError, in the order rate, per, burst,
// quota.requests, quota.per; the message says what the bounds are.
func CheckFields(f Fields) error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if f.Rate != nil {
		if r := *f.Rate; !(r >= MinRate && r <= MaxRate) { // NaN fails too
			return bad("rate", "must be from %g to %g requests per period, got %g", float64(MinRate), float64(MaxRate), r)
		}
	}
	if f.Per != nil {
		if err := checkPer(*f.Per); err != "" {
			return bad("per", "%s", err)
		}
	}
	if f.Rate != nil && f.Per != nil {
		perSecond := *f.Rate / f.Per.Seconds()
		if perSecond > MaxRatePerSecond {
			return bad("rate", "%g per %s is %g requests per second; at most %g per second", *f.Rate, *f.Per, perSecond, float64(MaxRatePerSecond))
		}
		if interval := f.Per.Seconds() / *f.Rate; interval > MaxInterval.Seconds() {
			return bad("rate", "%g per %s lets one request through every %s; it must allow at least one per 366 days", *f.Rate, *f.Per, roundDuration(interval))
		}
	}
	if f.Burst != nil {
		if b := *f.Burst; b < 1 || b > MaxBurst {
			return bad("burst", "must be from 1 to %d, got %d", MaxBurst, b)
		}
	}
	if q := f.Quota; q != nil && !(f.NoQuotaOK && *q == (Quota{})) {
		if q.Requests < 1 || q.Requests > MaxQuotaRequests {
			return bad("quota.requests", "must be from 1 to %d, got %d", int64(MaxQuotaRequests), q.Requests)
		}
		if err := checkPer(q.Per); err != "" {
			return bad("quota.per", "%s", err)
		}
	}
	return nil
}

func checkPer(d time.Duration) string {
	if d < MinPer || d > MaxPer {
		return fmt.Sprintf("must be a duration from %s to %s (366 days), got %s", MinPer, MaxPer, d)
	}
	return ""
}

// roundDuration is s seconds as a duration for a message, saturated.
func roundDuration(s float64) string {
	if s >= float64(math.MaxInt64)/1e9 {
		return "more than 292 years"
	}
	return time.Duration(s * 1e9).Round(time.Second).String()
}
