package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

type fixedAuth struct{ p auth.Principal }

func (a fixedAuth) Authenticate(*http.Request) (auth.Verdict, error) {
	return auth.Verdict{OK: true, Principal: a.p}, nil
}

// refuser refuses every request and remembers what it was asked.
type refuser struct {
	id  string
	lim policy.Limit
}

func (r *refuser) Allow(_ context.Context, id string, lim policy.Limit) (ratelimit.Decision, error) {
	r.id, r.lim = id, lim
	return ratelimit.Decision{Reason: ratelimit.ReasonRate, Limit: int64(lim.Burst), RetryAfter: time.Second}, nil
}

// TestLimitComesFromThePrincipal: the gateway limits a key by the
// effective limit and bucket its store resolved, falls back by itself
// once an override has expired, and applies the env default under the
// principal's own id when nothing was resolved (OAuth 2.0).
func TestLimitComesFromThePrincipal(t *testing.T) {
	t.Parallel()
	envs := map[string]policy.Limit{
		"live": {Rate: 50, Per: time.Second, Burst: 100},
		"test": {Rate: 5, Per: time.Second, Burst: 10},
	}
	granted := &policy.Effective{Limit: policy.Limit{Rate: 500, Per: time.Second, Burst: 900}, ID: "con_c"}
	expired := &policy.Effective{
		Limit: policy.Limit{Rate: 999, Per: time.Second, Burst: 999}, ID: "key_a", Until: time.Now().Add(-time.Second),
		Next: &policy.Effective{Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400}, ID: "key_a"},
	}
	for _, c := range []struct {
		name   string
		p      auth.Principal
		wantID string
		want   policy.Limit
	}{
		{"resolved, consumer bucket", auth.Principal{ID: "key_a", Env: "live", Limits: granted}, "con_c", granted.Limit},
		{"expired grant falls back", auth.Principal{ID: "key_a", Env: "live", Limits: expired}, "key_a", expired.Next.Limit},
		{"nothing resolved: env default", auth.Principal{ID: "client-1", Env: "test", Method: auth.MethodOAuth2}, "client-1", envs["test"]},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.p.Products = []string{"extraction"}
			lim := &refuser{}
			gw, err := gateway.New(gateway.Config{
				Upstreams:    gateway.UpstreamsConfig{Extraction: gateway.UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}}, Registry: gateway.UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}}},
				MaxBodyBytes: 1 << 20,
				Limits:       envs,
			}, gateway.Deps{Auth: fixedAuth{c.p}, Limiter: lim})
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			gw.ServeHTTP(w, httptest.NewRequest("POST", "/sync", http.NoBody))
			if w.Code != 429 || lim.id != c.wantID || lim.lim != c.want {
				t.Errorf("status %d, limiter asked for %q %+v; want 429, %q %+v", w.Code, lim.id, lim.lim, c.wantID, c.want)
			}
		})
	}
}
