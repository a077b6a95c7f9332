// Package policy is keygate's model of what a key may do and how often:
// limits, quotas, plans and overrides and their resolution (Resolver,
// Effective), the bounds every limit is held to (CheckFields), and the
// operations a key, its consumer and its plan permit, with the client
// addresses it may come from (Operations, Access).
//
// It holds values and their resolution only: the engines that enforce a
// limit (package ratelimit) and the stores that keep keys (package
// keystore) import it, so that a package that only names a limit, a plan
// or a permission imports neither Redis nor a circuit breaker.
package policy

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
