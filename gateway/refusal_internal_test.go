package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/usage"
)

type noAuth struct{}

func (noAuth) Authenticate(*http.Request) (auth.Verdict, error) { return auth.Verdict{}, nil }

// outcomeCount is the count of outcome o in c.
func outcomeCount(c usage.Counts, o usage.Outcome) int64 {
	switch o {
	case usage.Admitted:
		return c.Admitted
	case usage.RefusedRate:
		return c.Rate
	case usage.RefusedQuota:
		return c.Quota
	case usage.RefusedContext:
		return c.Context
	case usage.RefusedProduct:
		return c.Product
	case usage.RefusedConcurrency:
		return c.Concurrency
	case usage.ForbiddenOperation:
		return c.ForbiddenOperation
	case usage.ForbiddenPlan:
		return c.ForbiddenPlan
	case usage.ForbiddenAddress:
		return c.ForbiddenAddress
	}
	panic(fmt.Sprintf("outcome %d", o))
}

// TestEveryRefusalKindReachesItsOutcomeAndLabel walks the table of
// refusal kinds, the single source: each kind, written out by the one
// writer, answers with its status and the spec's body, is counted once in
// keygate_refusals_total under its label (and in keygate_ratelimited_total
// for a limit), reaches the key's usage under its outcome (or not at all
// when the kind is not counted), and is logged with its reason. No reason
// string is named here: a kind renamed or added is checked as it stands.
func TestEveryRefusalKindReachesItsOutcomeAndLabel(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	counters := usage.NewCounters(0)
	core, logs := observer.New(zapcore.InfoLevel)
	g, err := New(Config{
		Upstreams: UpstreamsConfig{
			Extraction: UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}},
			Registry:   UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}},
		},
		MaxBodyBytes:    1 << 20,
		Limits:          map[string]policy.Limit{"live": {Rate: 1, Per: time.Second, Burst: 1}, "test": {Rate: 1, Per: time.Second, Burst: 1}},
		RateLimitStatus: http.StatusForbidden, // the configured limit status, not 429
	}, Deps{Auth: noAuth{}, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{}), Metrics: m, Usage: counters, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	for k := refusalKind(1); k < numRefusalKinds; k++ {
		spec := refusals[k]
		name := fmt.Sprintf("kind %d (%s)", k, spec.label)
		if spec.status == 0 || spec.message == "" || spec.label == "" || spec.reason == "" {
			t.Errorf("%s: incomplete row %+v", name, spec)
			continue
		}
		labels[spec.label] = true
		id := fmt.Sprintf("key_kind%02d", k)
		st := &state{trace: newTrace(""), authed: true, principal: auth.Principal{ID: id, Env: "live"}}
		r := httptest.NewRequest(http.MethodPost, "/sync", strings.NewReader("x"))
		hw := httptest.NewRecorder()
		rec := &recorder{ResponseWriter: hw}
		refused := counterValue(t, reg, "keygate_refusals_total", "reason", spec.label)
		limited := counterValue(t, reg, "keygate_ratelimited_total", "reason", spec.label)
		logs.TakeAll()

		g.refuse(rec, r, st, refusal{kind: k})
		g.finish(r, rec, st, time.Now())

		// The answer.
		want := spec.status
		if want == statusRateLimit {
			want = http.StatusForbidden
		}
		if want == StatusClientClosedRequest {
			if hw.Body.Len() != 0 {
				t.Errorf("%s: a body was written to a client that left", name)
			}
		} else if hw.Code != want || !strings.Contains(hw.Body.String(), `"StateText":"ERROR"`) || !strings.Contains(hw.Body.String(), spec.message) {
			t.Errorf("%s: answered %d %s, want %d with %q", name, hw.Code, hw.Body, want, spec.message)
		}
		// The metrics.
		if d := counterValue(t, reg, "keygate_refusals_total", "reason", spec.label) - refused; d != 1 {
			t.Errorf("%s: keygate_refusals_total{reason=%q} rose by %v, want 1", name, spec.label, d)
		}
		wantLimited := 0.0
		if spec.limited {
			wantLimited = 1
		}
		if d := counterValue(t, reg, "keygate_ratelimited_total", "reason", spec.label) - limited; d != wantLimited {
			t.Errorf("%s: keygate_ratelimited_total{reason=%q} rose by %v, want %v", name, spec.label, d, wantLimited)
		}
		// The usage.
		var got []usage.Delta
		for _, d := range counters.Drain() {
			if d.ID == id {
				got = append(got, d)
			}
		}
		switch {
		case !spec.counted && len(got) != 0:
			t.Errorf("%s: counted in usage %+v, want not counted", name, got[0].Counts)
		case spec.counted && len(got) != 1:
			t.Errorf("%s: %d usage entries, want one", name, len(got))
		case spec.counted:
			c := got[0].Counts
			c.BytesIn = 0
			var total int64
			for o := usage.Admitted; o <= usage.ForbiddenAddress; o++ {
				total += outcomeCount(c, o)
			}
			if outcomeCount(c, spec.outcome) != 1 || total != 1 {
				t.Errorf("%s: usage %+v, want exactly one of outcome %d", name, c, spec.outcome)
			}
		}
		// The access log.
		lines := logs.FilterMessage("request").All()
		if len(lines) != 1 {
			t.Errorf("%s: %d access lines", name, len(lines))
			continue
		}
		f := lines[0].ContextMap()
		if f["reason"] != spec.reason || f["status"] != int64(want) {
			t.Errorf("%s: logged reason %v status %v, want %q %d", name, f["reason"], f["status"], spec.reason, want)
		}
	}
	// Every label is a series of its own, exported from the start.
	if n := seriesCount(t, reg, "keygate_refusals_total"); n != len(labels) {
		t.Errorf("keygate_refusals_total has %d series, want one per label (%d)", n, len(labels))
	}
}

// counterValue sums the counter name's series whose label is value, as
// /metrics exports them.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
