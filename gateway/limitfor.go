package gateway

import (
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/policy"
)

// limitFor is the limit and the limiter id (bucket) of p: the effective
// limit the key store resolved for a key (its plan, overrides and
// consumer), past any override that has expired, or else the env default
// under the principal's own id. It looks nothing up; the clock is read
// only when an override is due to expire.
func (g *Gateway) limitFor(p *auth.Principal) (policy.Limit, string) {
	if e := p.Limits; e != nil {
		if e.Next != nil {
			e = e.At(time.Now())
		}
		return e.Limit, e.Bucket(p.ID)
	}
	lim, ok := g.cfg.Limits[p.Env]
	if !ok {
		lim = g.cfg.Limits["live"]
	}
	return lim, p.ID
}

// quotaHolder says whose quota ran out: the key's own, or the one its
// consumer's keys share.
func quotaHolder(p *auth.Principal, limitID string) string {
	if limitID != p.ID { // only a consumer-scoped plan changes the bucket
		return "consumer (shared by its keys)"
	}
	return "key"
}
