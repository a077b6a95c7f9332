package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// The rate-limit response fields. Two forms, either or both
// (ratelimit.headers):
//
//   - draft: RateLimit-Policy and RateLimit, as
//     draft-ietf-httpapi-ratelimit-headers defines them, RFC 9651
//     structured-field Lists. The token bucket and the quota are two
//     policies, "rate" and "quota":
//
//     RateLimit-Policy: "rate";q=10;w=2, "quota";q=1000;w=86400
//     RateLimit: "rate";r=7;t=1, "quota";r=998;t=86311
//
//     The bucket's q is its burst and w the seconds it takes to refill
//     from empty (burst ÷ rate); its r is what it holds now and t the
//     seconds until it is full. The quota's q and w are its requests and
//     period; r is what is left of the period, t the seconds until it
//     ends. A part the limiter did not look at (the bucket of a request
//     the quota refused in Redis) is left out of RateLimit.
//   - legacy: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset,
//     the older drafts' three fields, for the tighter of the two parts
//     (the quota when it is as tight as the bucket, so that it shows
//     before it refuses).

// rateHeaders says which forms are sent.
type rateHeaders struct{ draft, legacy bool }

// rateHeadersOf reads Config.RateLimitHeaders: nil means both.
func rateHeadersOf(names []string) (rateHeaders, error) {
	if names == nil {
		return rateHeaders{draft: true, legacy: true}, nil
	}
	var rh rateHeaders
	for _, n := range names {
		switch n {
		case ratelimit.HeadersDraft:
			rh.draft = true
		case ratelimit.HeadersLegacy:
			rh.legacy = true
		default:
			return rateHeaders{}, fmt.Errorf("gateway: Config.RateLimitHeaders: %q is neither %q nor %q", n, ratelimit.HeadersDraft, ratelimit.HeadersLegacy)
		}
	}
	return rh, nil
}

// Policy names in the draft fields.
const (
	policyRate  = `"rate"`
	policyQuota = `"quota"`
)

func setRateHeaders(h http.Header, rh rateHeaders, lim policy.Limit, d ratelimit.Decision) {
	if rh.legacy {
		setLegacyRateHeaders(h, d)
	}
	if rh.draft {
		setDraftRateHeaders(h, lim, d)
	}
}

// setDraftRateHeaders sets RateLimit-Policy and RateLimit.
func setDraftRateHeaders(h http.Header, lim policy.Limit, d ratelimit.Decision) {
	var buf [128]byte
	b := append(buf[:0], policyRate+";q="...)
	b = strconv.AppendInt(b, int64(lim.Burst), 10)
	b = append(b, ";w="...)
	refill := time.Duration(0)
	if lim.Rate > 0 {
		refill = time.Duration(float64(lim.Burst) * float64(lim.Per) / lim.Rate)
	}
	b = strconv.AppendInt(b, ceilSeconds(refill, 1), 10)
	if lim.Quota.Enabled() {
		b = append(b, ", "+policyQuota+";q="...)
		b = strconv.AppendInt(b, lim.Quota.Requests, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, ceilSeconds(lim.Quota.Per, 1), 10)
	}
	h["Ratelimit-Policy"] = []string{string(b)}

	b = buf[:0]
	window := func(name string, w ratelimit.Window) {
		if !w.Known {
			return
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(w.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(w.Reset, 0), 10)
	}
	window(policyRate, d.Bucket)
	if lim.Quota.Enabled() {
		window(policyQuota, d.Quota)
	}
	if len(b) > 0 {
		h["Ratelimit"] = []string{string(b)}
	}
}

// setLegacyRateHeaders sets RateLimit-Limit, -Remaining and -Reset.
func setLegacyRateHeaders(h http.Header, d ratelimit.Decision) {
	h["Ratelimit-Limit"] = []string{strconv.FormatInt(d.Limit, 10)}
	h["Ratelimit-Remaining"] = []string{strconv.FormatInt(max(d.Remaining, 0), 10)}
	h["Ratelimit-Reset"] = []string{strconv.FormatInt(ceilSeconds(d.Reset, 0), 10)}
}
