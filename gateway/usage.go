package gateway

import (
	"time"

	"github.com/keygate/keygate/auth"

	"github.com/keygate/keygate/usage"
)

// UsageRecorder counts each key's requests by how they authenticated and
// by outcome; *usage.Counters fits. Deps.Usage nil means usage is not
// counted.
type UsageRecorder interface {
	Record(id string, m usage.Method, o usage.Outcome, bytesIn int64, now time.Time)
}

var _ UsageRecorder = (*usage.Counters)(nil)

// recordUsage counts a finished request of an authenticated credential
// by the usage outcome of its refusal kind (see refusals): refused by the
// rate limit, the quota, the context binding, the product or the
// concurrency cap, or else admitted when the limiter admitted it
// (whatever happened next: a too-large body or an upstream error still
// used the key's quota). Requests refused before the limiter for another
// reason (no such endpoint, method) are not counted; unknown keys have no
// id and are counted only by keygate_auth_failures_total.
func (g *Gateway) recordUsage(st *state, now time.Time) {
	o := usage.Admitted
	if st.refusal != refNone {
		spec := &refusals[st.refusal]
		if !spec.counted {
			return
		}
		o = spec.outcome
	} else if !st.admitted {
		return
	}
	m := usage.ByAPIKey
	if st.principal.Method != auth.MethodAPIKey {
		m = usage.ByToken
	}
	g.usage.Record(st.principal.ID, m, o, st.bytesIn(), now)
}
