package policy_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/policy"
)

func testResolver(t *testing.T) *policy.Resolver {
	t.Helper()
	r, err := policy.NewResolver(map[string]policy.Limit{
		"live": {Rate: 50, Per: time.Second, Burst: 100},
		"test": {Rate: 5, Per: time.Second, Burst: 10, Quota: policy.Quota{Requests: 1000, Per: 24 * time.Hour}},
	}, map[string]policy.Plan{
		"pro":  {Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: 24 * time.Hour}}},
		"team": {Limit: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 30, Per: time.Hour}}, Scope: policy.ScopeConsumer},
		"free": {Limit: policy.Limit{Rate: 1, Per: time.Second, Burst: 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestResolve is the resolution order, field by field, over key, consumer,
// plan and env combinations, with expired overrides and consumer scope.
func TestResolve(t *testing.T) {
	t.Parallel()
	r := testResolver(t)
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	q := func(n int64, per time.Duration) *policy.Quota { return &policy.Quota{Requests: n, Per: per} }
	day := 24 * time.Hour
	const (
		ko = policy.FromKeyOverride
		kp = policy.FromKeyPlan
		co = policy.FromConsumerOverride
		cp = policy.FromConsumerPlan
		ed = policy.FromEnvDefault
	)
	cases := []struct {
		name    string
		s       policy.Subject
		want    policy.Limit
		src     policy.FieldSources
		id      string
		plan    string
		until   time.Time
		wantNxt *policy.Limit
	}{
		{
			name: "live key, nothing set: env default",
			s:    policy.Subject{KeyID: "key_a", Env: "live"},
			want: policy.Limit{Rate: 50, Per: time.Second, Burst: 100},
			src:  policy.FieldSources{ed, ed, ed, ed}, id: "key_a",
		},
		{
			name: "test key, nothing set: env default with its quota",
			s:    policy.Subject{KeyID: "key_a", Env: "test"},
			want: policy.Limit{Rate: 5, Per: time.Second, Burst: 10, Quota: policy.Quota{Requests: 1000, Per: day}},
			src:  policy.FieldSources{ed, ed, ed, ed}, id: "key_a",
		},
		{
			name: "unknown env falls back to live",
			s:    policy.Subject{KeyID: "key_a", Env: "staging"},
			want: policy.Limit{Rate: 50, Per: time.Second, Burst: 100},
			src:  policy.FieldSources{ed, ed, ed, ed}, id: "key_a",
		},
		{
			name: "key plan is whole: a plan without quota removes the test quota",
			s:    policy.Subject{KeyID: "key_a", Env: "test", KeyPlan: "free"},
			want: policy.Limit{Rate: 1, Per: time.Second, Burst: 2},
			src:  policy.FieldSources{kp, kp, kp, kp}, id: "key_a", plan: "free",
		},
		{
			name: "key override over key plan, field by field",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyPlan: "pro", KeyOverride: &policy.Override{Burst: 1000}},
			want: policy.Limit{Rate: 200, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 50000, Per: day}},
			src:  policy.FieldSources{kp, kp, ko, kp}, id: "key_a", plan: "pro",
		},
		{
			name: "key override over env default",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyOverride: &policy.Override{Rate: 200, Burst: 400, Quota: q(50000, day)}},
			want: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: day}},
			src:  policy.FieldSources{ko, ed, ko, ko}, id: "key_a",
		},
		{
			name: "key override of quota to none",
			s:    policy.Subject{KeyID: "key_a", Env: "test", KeyOverride: &policy.Override{Quota: &policy.Quota{}}},
			want: policy.Limit{Rate: 5, Per: time.Second, Burst: 10},
			src:  policy.FieldSources{ed, ed, ed, ko}, id: "key_a",
		},
		{
			name: "consumer plan when the key has none",
			s:    policy.Subject{KeyID: "key_a", Env: "live", ConsumerID: "con_c", ConsumerPlan: "pro"},
			want: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: day}},
			src:  policy.FieldSources{cp, cp, cp, cp}, id: "key_a", plan: "pro",
		},
		{
			name: "key plan beats consumer override and plan",
			s: policy.Subject{KeyID: "key_a", Env: "live", KeyPlan: "free",
				ConsumerID: "con_c", ConsumerPlan: "pro", ConsumerOverride: &policy.Override{Rate: 999}},
			want: policy.Limit{Rate: 1, Per: time.Second, Burst: 2},
			src:  policy.FieldSources{kp, kp, kp, kp}, id: "key_a", plan: "free",
		},
		{
			name: "consumer override over consumer plan",
			s: policy.Subject{KeyID: "key_a", Env: "live",
				ConsumerID: "con_c", ConsumerPlan: "pro", ConsumerOverride: &policy.Override{Rate: 300, Per: 2 * time.Second}},
			want: policy.Limit{Rate: 300, Per: 2 * time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: day}},
			src:  policy.FieldSources{co, co, cp, cp}, id: "key_a", plan: "pro",
		},
		{
			name: "all four levels: key override, consumer override, env default",
			s: policy.Subject{KeyID: "key_a", Env: "test", KeyOverride: &policy.Override{Rate: 7},
				ConsumerID: "con_c", ConsumerOverride: &policy.Override{Rate: 8, Burst: 9}},
			want: policy.Limit{Rate: 7, Per: time.Second, Burst: 9, Quota: policy.Quota{Requests: 1000, Per: day}},
			src:  policy.FieldSources{ko, ed, co, ed}, id: "key_a",
		},
		{
			name: "consumer settings without a consumer id are ignored",
			s:    policy.Subject{KeyID: "key_a", Env: "live", ConsumerPlan: "pro", ConsumerOverride: &policy.Override{Rate: 8}},
			want: policy.Limit{Rate: 50, Per: time.Second, Burst: 100},
			src:  policy.FieldSources{ed, ed, ed, ed}, id: "key_a",
		},
		{
			name: "unknown plan is skipped",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyPlan: "gone", ConsumerID: "con_c", ConsumerPlan: "pro"},
			want: policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: day}},
			src:  policy.FieldSources{cp, cp, cp, cp}, id: "key_a", plan: "pro",
		},
		{
			name: "expired key override falls back",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyOverride: &policy.Override{Rate: 500, Until: past}},
			want: policy.Limit{Rate: 50, Per: time.Second, Burst: 100},
			src:  policy.FieldSources{ed, ed, ed, ed}, id: "key_a",
		},
		{
			name: "temporary key override applies until it expires, then the plan",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyPlan: "pro", KeyOverride: &policy.Override{Rate: 500, Until: future}},
			want: policy.Limit{Rate: 500, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: day}},
			src:  policy.FieldSources{ko, kp, kp, kp}, id: "key_a", plan: "pro", until: future,
			wantNxt: &policy.Limit{Rate: 200, Per: time.Second, Burst: 400, Quota: policy.Quota{Requests: 50000, Per: day}},
		},
		{
			name: "expired consumer override falls back to the consumer plan",
			s: policy.Subject{KeyID: "key_a", Env: "live", ConsumerID: "con_c", ConsumerPlan: "free",
				ConsumerOverride: &policy.Override{Burst: 50, Until: past}},
			want: policy.Limit{Rate: 1, Per: time.Second, Burst: 2},
			src:  policy.FieldSources{cp, cp, cp, cp}, id: "key_a", plan: "free",
		},
		{
			name: "scope consumer: the bucket is the consumer's",
			s:    policy.Subject{KeyID: "key_a", Env: "live", ConsumerID: "con_c", ConsumerPlan: "team"},
			want: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 30, Per: time.Hour}},
			src:  policy.FieldSources{cp, cp, cp, cp}, id: "con_c", plan: "team",
		},
		{
			name: "scope consumer with a consumer override: still shared",
			s: policy.Subject{KeyID: "key_a", Env: "live", ConsumerID: "con_c", ConsumerPlan: "team",
				ConsumerOverride: &policy.Override{Quota: q(60, time.Hour)}},
			want: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 60, Per: time.Hour}},
			src:  policy.FieldSources{cp, cp, cp, co}, id: "con_c", plan: "team",
		},
		{
			name: "scope consumer on the key's own plan: shared by the consumer's keys on that plan",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyPlan: "team", ConsumerID: "con_c", ConsumerPlan: "pro"},
			want: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 30, Per: time.Hour}},
			src:  policy.FieldSources{kp, kp, kp, kp}, id: "con_c:team", plan: "team",
		},
		{
			name: "scope consumer, but the key has its own override: its own bucket",
			s: policy.Subject{KeyID: "key_a", Env: "live", KeyOverride: &policy.Override{Rate: 40},
				ConsumerID: "con_c", ConsumerPlan: "team"},
			want: policy.Limit{Rate: 40, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 30, Per: time.Hour}},
			src:  policy.FieldSources{ko, cp, cp, cp}, id: "key_a", plan: "team",
		},
		{
			name: "scope consumer without a consumer: the key's bucket",
			s:    policy.Subject{KeyID: "key_a", Env: "live", KeyPlan: "team"},
			want: policy.Limit{Rate: 20, Per: time.Second, Burst: 20, Quota: policy.Quota{Requests: 30, Per: time.Hour}},
			src:  policy.FieldSources{kp, kp, kp, kp}, id: "key_a", plan: "team",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := r.Resolve(c.s, now)
			if e.Limit != c.want {
				t.Errorf("limit = %+v, want %+v", e.Limit, c.want)
			}
			if e.Sources != c.src {
				t.Errorf("sources = %+v, want %+v", e.Sources, c.src)
			}
			if e.Bucket(c.s.KeyID) != c.id || e.Plan != c.plan {
				t.Errorf("bucket, plan = %q, %q; want %q, %q", e.Bucket(c.s.KeyID), e.Plan, c.id, c.plan)
			}
			if !e.Until.Equal(c.until) {
				t.Errorf("until = %s, want %s", e.Until, c.until)
			}
			if e.At(now) != e {
				t.Error("At(now) is not the head")
			}
			switch {
			case c.wantNxt == nil && e.Next != nil:
				t.Errorf("unexpected successor %+v", e.Next.Limit)
			case c.wantNxt != nil:
				after := e.At(c.until)
				if after == e || after.Limit != *c.wantNxt {
					t.Errorf("after %s: %+v, want %+v", c.until, after.Limit, *c.wantNxt)
				}
				if e.At(c.until.Add(-time.Nanosecond)) != e {
					t.Error("fell back before Until")
				}
			}
		})
	}
}

// TestResolveTwoExpiries: a key grant and a consumer grant expiring at
// different times make a chain of three limits.
func TestResolveTwoExpiries(t *testing.T) {
	t.Parallel()
	r := testResolver(t)
	now := time.Now()
	t1, t2 := now.Add(time.Minute), now.Add(time.Hour)
	e := r.Resolve(policy.Subject{KeyID: "key_a", Env: "live",
		KeyOverride: &policy.Override{Rate: 1000, Until: t2},
		ConsumerID:  "con_c", ConsumerOverride: &policy.Override{Rate: 500, Burst: 500, Until: t1},
	}, now)
	for _, c := range []struct {
		at          time.Time
		rate, burst float64
	}{{now, 1000, 500}, {t1, 1000, 100}, {t2, 50, 100}, {t2.Add(time.Hour), 50, 100}} {
		got := e.At(c.at).Limit
		if got.Rate != c.rate || float64(got.Burst) != c.burst {
			t.Errorf("at %s: rate %g burst %d, want %g %g", c.at.Sub(now), got.Rate, got.Burst, c.rate, c.burst)
		}
	}
}

// TestPlansValidate: plan errors name the field.
func TestPlansValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		plans map[string]policy.Plan
		field string
	}{
		{map[string]policy.Plan{"Pro": {Limit: policy.Limit{Rate: 1, Per: time.Second, Burst: 1}}}, "plans.Pro:"},
		{map[string]policy.Plan{"pro": {Limit: policy.Limit{Per: time.Second, Burst: 1}}}, "plans.pro.rate"},
		{map[string]policy.Plan{"pro": {Limit: policy.Limit{Rate: 1, Burst: 1}}}, "plans.pro.per"},
		{map[string]policy.Plan{"pro": {Limit: policy.Limit{Rate: 1, Per: time.Second}}}, "plans.pro.burst"},
		{map[string]policy.Plan{"pro": {Limit: policy.Limit{Rate: 1, Per: time.Second, Burst: 1, Quota: policy.Quota{Requests: 5}}}}, "plans.pro.quota.per"},
		{map[string]policy.Plan{"pro": {Limit: policy.Limit{Rate: 1, Per: time.Second, Burst: 1}, Scope: "team"}}, "plans.pro.scope"},
	} {
		var v fieldpath.First
		policy.ValidatePlans(c.plans, v.Bad)
		err := v.Err()
		if err == nil || !strings.HasPrefix(err.Error(), c.field) {
			t.Errorf("%v: error %v, want it to start with %s", c.plans, err, c.field)
		}
	}
}

// TestOverrideJSON: durations as text, a quota of none as "none", and a
// round trip.
func TestOverrideJSON(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		o    policy.Override
		want string
	}{
		{policy.Override{Rate: 200, Per: time.Second, Burst: 400, Quota: &policy.Quota{Requests: 50000, Per: 24 * time.Hour}, Until: until},
			`{"rate":200,"per":"1s","burst":400,"quota":{"requests":50000,"per":"24h0m0s"},"until":"2026-12-31T00:00:00Z"}`},
		{policy.Override{Quota: &policy.Quota{}}, `{"quota":"none"}`},
		{policy.Override{Burst: 3}, `{"burst":3}`},
	} {
		b, err := json.Marshal(c.o)
		if err != nil || string(b) != c.want {
			t.Errorf("marshal: %s %v, want %s", b, err, c.want)
		}
		var back policy.Override
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, c.o) {
			t.Errorf("round trip of %s: %+v %v", b, back, err)
		}
	}
	for _, c := range []struct {
		in   string
		want policy.Quota
		ok   bool
	}{
		{"50000/24h", policy.Quota{Requests: 50000, Per: 24 * time.Hour}, true},
		{"none", policy.Quota{}, true},
		{"0/24h", policy.Quota{}, false},
		{"50000", policy.Quota{}, false},
		{"5/-1h", policy.Quota{}, false},
	} {
		q, err := policy.ParseQuota(c.in)
		if (err == nil) != c.ok || q != c.want {
			t.Errorf("ParseQuota(%q) = %+v, %v", c.in, q, err)
		}
	}
}

// TestResolveSharesAlikeKeys: keys that no override, permission or
// address rule sets apart share one resolved limit (a million keys on a
// few plans hold a few), each still with its own bucket; any key that
// has one of those gets its own, and a consumer-scoped plan's bucket is
// the consumer's.
func TestResolveSharesAlikeKeys(t *testing.T) {
	r := testResolver(t)
	now := time.Now()
	ext := []string{"extraction"}
	sub := func(id string, mod func(*policy.Subject)) policy.Subject {
		s := policy.Subject{KeyID: id, Env: "live", KeyPlan: "pro", Products: ext}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	a := r.Resolve(sub("key_a", nil), now)
	b := r.Resolve(sub("key_b", nil), now)
	if a != b {
		t.Error("two keys of one env, plan and product resolve to two limits")
	}
	if a.Bucket("key_a") != "key_a" || b.Bucket("key_b") != "key_b" {
		t.Errorf("buckets %q, %q; want each key's own", a.Bucket("key_a"), b.Bucket("key_b"))
	}
	for _, c := range []struct {
		name   string
		mod    func(*policy.Subject)
		shared bool   // shares a's limit
		alike  bool   // key_y with the same change shares key_x's
		bucket string // of key_x
		rate   float64
	}{
		{"another plan", func(s *policy.Subject) { s.KeyPlan = "free" }, false, true, "key_x", 1},
		{"another env", func(s *policy.Subject) { s.KeyPlan, s.Env = "", "test" }, false, true, "key_x", 5},
		{"another product", func(s *policy.Subject) { s.Products = []string{"registry"} }, false, true, "key_x", 200},
		{"its own override", func(s *policy.Subject) { s.KeyOverride = &policy.Override{Rate: 7} }, false, false, "key_x", 7},
		{"its own permissions", func(s *policy.Subject) { s.KeyPermissions = []string{"extraction:sync"} }, false, false, "key_x", 200},
		{"its own addresses", func(s *policy.Subject) { s.KeyCIDRs = []string{"10.0.0.0/8"} }, false, false, "key_x", 200},
		// A consumer changes nothing when the plan that applies is not of
		// consumer scope: a million consumers' keys share a few limits.
		{"a consumer", func(s *policy.Subject) { s.ConsumerID = "con_c" }, true, true, "key_x", 200},
		{"a consumer on a key-scoped plan", func(s *policy.Subject) { s.KeyPlan, s.ConsumerID, s.ConsumerPlan = "", "con_c", "pro" }, false, true, "key_x", 200},
		{"a consumer on no plan", func(s *policy.Subject) { s.KeyPlan, s.ConsumerID = "", "con_c" }, false, true, "key_x", 50},
		{"a consumer-scoped plan", func(s *policy.Subject) { s.KeyPlan, s.ConsumerID, s.ConsumerPlan = "", "con_c", "team" }, false, true, "con_c", 20},
		{"the consumer's override", func(s *policy.Subject) {
			s.KeyPlan, s.ConsumerID, s.ConsumerPlan, s.ConsumerOverride = "", "con_c", "team", &policy.Override{Rate: 9}
		}, false, false, "con_c", 9},
		{"nothing else", nil, true, true, "key_x", 200},
	} {
		e := r.Resolve(sub("key_x", c.mod), now)
		if (e == a) != c.shared || e.Bucket("key_x") != c.bucket || e.Limit.Rate != c.rate {
			t.Errorf("%s: shared %v, bucket %q, rate %v; want %v, %q, %v", c.name, e == a, e.Bucket("key_x"), e.Limit.Rate, c.shared, c.bucket, c.rate)
		}
		if y := r.Resolve(sub("key_y", c.mod), now); (y == e) != c.alike {
			t.Errorf("%s: key_y shares key_x's limit: %v, want %v", c.name, y == e, c.alike)
		}
	}
	// Keys of two consumers share one limit unless the plan that applies
	// is of consumer scope: then each consumer's keys have their own, with
	// the consumer's bucket.
	for _, c := range []struct {
		plan   string
		shared bool
	}{{"", true}, {"pro", true}, {"team", false}} {
		of := func(key, con string) *policy.Effective {
			return r.Resolve(policy.Subject{KeyID: key, Env: "live", Products: ext, ConsumerID: con, ConsumerPlan: c.plan}, now)
		}
		x, y := of("key_x", "con_x"), of("key_y", "con_y")
		if (x == y) != c.shared || x.Limit != y.Limit {
			t.Errorf("consumer plan %q: the keys of two consumers share a limit: %v (limits %+v, %+v); want %v", c.plan, x == y, x.Limit, y.Limit, c.shared)
		}
		if c.plan == "team" && (x.Bucket("key_x") != "con_x" || y.Bucket("key_y") != "con_y") {
			t.Errorf("consumer-scoped plan: buckets %q, %q; want each consumer's", x.Bucket("key_x"), y.Bucket("key_y"))
		}
	}
	// Operations of another configuration make another resolver: it
	// shares nothing with r.
	if r.WithOperations(policy.BuiltinOperations()).Resolve(sub("key_a", nil), now) == a {
		t.Error("a resolver from WithOperations returned r's shared limit")
	}
}
