package gateway_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/keygate/keygate/policy"
)

// draftPolicy is one member of a RateLimit-Policy or RateLimit field, as
// an RFC 9651 parser reads it: its name and integer parameters.
type draftPolicy struct {
	name   string
	params map[string]int64
}

// parseDraft parses a draft rate-limit field (a structured List of
// String items with Integer parameters) with httpsfv, failing the test on
// anything else.
func parseDraft(t *testing.T, h http.Header, field string) []draftPolicy {
	t.Helper()
	vals := h.Values(field)
	if len(vals) == 0 {
		t.Fatalf("no %s field", field)
	}
	list, err := httpsfv.UnmarshalList(vals)
	if err != nil {
		t.Fatalf("%s %q: not an RFC 9651 List: %v", field, vals, err)
	}
	var out []draftPolicy
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %T is not an Item", field, m)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s: item value %#v is not a String", field, it.Value)
		}
		p := draftPolicy{name: name, params: map[string]int64{}}
		for _, k := range it.Params.Names() {
			v, _ := it.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: %s;%s=%#v is not an Integer", field, name, k, v)
			}
			p.params[k] = n
		}
		out = append(out, p)
	}
	return out
}

func find(t *testing.T, ps []draftPolicy, name string) map[string]int64 {
	t.Helper()
	for _, p := range ps {
		if p.name == name {
			return p.params
		}
	}
	t.Fatalf("no policy %q in %+v", name, ps)
	return nil
}

// TestDraftRateLimitHeaders: RateLimit-Policy and RateLimit (read with an
// RFC 9651 parser) give the bucket and the quota as two policies with
// their own remaining and reset. With the bucket and the quota both used
// up by a success, that success already shows the quota at 0, and the
// legacy fields name the quota (Limit 3, Reset its hour), which is what
// refuses the next request.
func TestDraftRateLimitHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{limits: map[string]policy.Limit{
		"live": {Rate: 1, Per: time.Hour, Burst: 3, Quota: policy.Quota{Requests: 3, Per: time.Hour}},
		"test": {Rate: 1000, Per: time.Second, Burst: 1000},
	}})
	for i := range 3 {
		r := e.sync(e.LiveKey, ctxA)
		if r.Status != 200 {
			t.Fatalf("request %d: %d", i, r.Status)
		}
		pol := parseDraft(t, r.Header, "RateLimit-Policy")
		if rate := find(t, pol, "rate"); rate["q"] != 3 || rate["w"] != 3*3600 {
			t.Errorf("rate policy %v, want q=3 w=10800", rate)
		}
		if q := find(t, pol, "quota"); q["q"] != 3 || q["w"] != 3600 {
			t.Errorf("quota policy %v, want q=3 w=3600", q)
		}
		rl := parseDraft(t, r.Header, "RateLimit")
		rate, quota := find(t, rl, "rate"), find(t, rl, "quota")
		if want := int64(2 - i); rate["r"] != want || quota["r"] != want {
			t.Errorf("request %d: rate r=%d quota r=%d, want %d each", i, rate["r"], quota["r"], want)
		}
		if quota["t"] < 3500 || quota["t"] > 3600 || rate["t"] < 1 {
			t.Errorf("request %d: rate t=%d quota t=%d", i, rate["t"], quota["t"])
		}
		if i == 2 {
			if l, rem, reset := r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"), r.Header.Get("RateLimit-Reset"); l != "3" || rem != "0" || reset != strconv.FormatInt(quota["t"], 10) {
				t.Errorf("legacy fields %s/%s/%s, want the quota's 3/0/%d", l, rem, reset, quota["t"])
			}
		}
	}
	r := e.sync(e.LiveKey, ctxA)
	assertError(t, r, 429, "quota")
	if q := find(t, parseDraft(t, r.Header, "RateLimit"), "quota"); q["r"] != 0 || q["t"] < 3500 {
		t.Errorf("refused: quota %v", q)
	}
}

// TestRateLimitHeaderChoice: ratelimit.headers sends the draft form, the
// legacy form, both (the default) or neither.
func TestRateLimitHeaderChoice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		headers       []string
		draft, legacy bool
	}{
		{"default", nil, true, true},
		{"draft", []string{"draft"}, true, false},
		{"legacy", []string{"legacy"}, false, true},
		{"none", []string{}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{rateHeaders: c.headers})
			r := e.sync(e.LiveKey, ctxA)
			if r.Status != 200 {
				t.Fatalf("%d", r.Status)
			}
			if got := r.Header.Get("RateLimit-Policy") != "" && r.Header.Get("RateLimit") != ""; got != c.draft {
				t.Errorf("draft fields sent %v, want %v", got, c.draft)
			}
			if got := r.Header.Get("RateLimit-Limit") != ""; got != c.legacy {
				t.Errorf("legacy fields sent %v, want %v", got, c.legacy)
			}
			if c.draft {
				rate := find(t, parseDraft(t, r.Header, "RateLimit"), "rate")
				if rate["r"] != 999 {
					t.Errorf("rate r=%d, want 999", rate["r"])
				}
			}
		})
	}
}
