package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/ratelimit"
)

// FailureLimiter throttles the source addresses of failed
// authentications. Blocked is asked before any credential is looked at and
// must be cheap (no I/O); Fail counts one failure and says whether the
// address is now over its limit. Both return how long the address stays
// refused. ratelimit.Failures implements it.
type FailureLimiter interface {
	Blocked(addr netip.Addr) (time.Duration, bool)
	Fail(ctx context.Context, addr netip.Addr) (time.Duration, bool)
}

var _ FailureLimiter = (*ratelimit.Failures)(nil)

// msgThrottled is the refusal of an address over the failure limit. It
// says nothing about the credential: it was not looked at.
const msgThrottled = "Rate Limited: too many failed authentications from this address; back off and retry"

// throttled refuses the request with 429 when its source address is over
// the failure limit, before any credential is looked at.
func (g *Gateway) throttled(w http.ResponseWriter, st *state) refusal {
	retry, blocked := g.failures.Blocked(st.client)
	if !blocked {
		return refusal{}
	}
	return refuseThrottled(w, retry)
}

// failedAuth counts a refused credential against the request's source
// address, and refuses with 429 instead of the credential's refusal when
// that put the address over the limit.
func (g *Gateway) failedAuth(w http.ResponseWriter, r *http.Request, st *state, v auth.Verdict) refusal {
	if !countsAsFailure(v) {
		return refusal{}
	}
	retry, blocked := g.failures.Fail(r.Context(), st.client)
	if !blocked {
		return refusal{}
	}
	return refuseThrottled(w, retry)
}

func refuseThrottled(w http.ResponseWriter, retry time.Duration) refusal {
	w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(retry, 1), 10))
	return refusal{kind: refAuthThrottled}
}

// countsAsFailure says which refusals are guesses: a credential was sent
// and did not hold (401). A request without any credential, or with one of
// a method that is switched off, guesses nothing; nor does a valid
// credential refused for lacking a permission (403, such as a token
// without a product's scope).
func countsAsFailure(v auth.Verdict) bool {
	return (v.Status == 0 || v.Status == http.StatusUnauthorized) &&
		v.Reason != auth.ReasonMissing && v.Reason != auth.ReasonDisabled
}
