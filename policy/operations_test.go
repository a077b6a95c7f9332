package policy_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

// TestOperationMatch: a request matches the most specific operation; a
// custom one takes its methods from the built-in one below it.
func TestOperationMatch(t *testing.T) {
	t.Parallel()
	ops, err := policy.NewOperations(policy.OperationsConfig{
		"registry:delete":   {Methods: []string{"DELETE"}, Path: "/registry/"},
		"registry:docs-put": {Methods: []string{"put"}, Path: "/registry/docs"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/sync", "extraction:sync"},
		{"GET", "/registry/x", "registry:read"},
		{"HEAD", "/registry", "registry:read"},
		{"POST", "/registry/x", "registry:write"},
		{"PATCH", "/registry/x", "registry:write"},
		{"DELETE", "/registry/x", "registry:delete"},
		{"PUT", "/registry/docs", "registry:docs-put"},
		{"PUT", "/registry/docs/a", "registry:docs-put"},
		{"PUT", "/registry/docsx", "registry:write"},
		{"GET", "/registry/docs/a", "registry:read"},
		{"PUT", "/registry/DOCS/a", "registry:docs-put"},
		{"PUT", "/registry/Docs", "registry:docs-put"},
		{"PUT", "/REGISTRY/dOcS", "registry:docs-put"},
		{"PUT", "/registry/docs\u212a", "registry:write"},
		{"GET", "/other", ""},
	} {
		if got := ops.Name(ops.Match(c.method, c.path)); got != c.want {
			t.Errorf("%s %s matched %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

// TestOperationsRefused: overlapping or unreachable definitions are
// refused, and the error names the field.
func TestOperationsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  policy.OperationsConfig
		want string
	}{
		{"overlaps read", policy.OperationsConfig{"registry:get": {Methods: []string{"GET"}, Path: "/registry/"}}, "operations.registry:get: overlaps registry:read"},
		{"overlaps write", policy.OperationsConfig{"registry:all": {Path: "/registry"}}, "operations.registry:all: overlaps registry:write"},
		{"overlap between custom", policy.OperationsConfig{"registry:a": {Methods: []string{"DELETE"}, Path: "/registry/x"}, "registry:b": {Methods: []string{"DELETE", "PUT"}, Path: "/registry/x/"}}, "operations.registry:b: overlaps registry:a"},
		{"outside the product", policy.OperationsConfig{"registry:x": {Path: "/sync"}}, "operations.registry:x.path: "},
		{"extraction off /sync", policy.OperationsConfig{"extraction:x": {Methods: []string{"POST"}, Path: "/sync/x"}}, "operations.extraction:x.path: "},
		{"extraction GET", policy.OperationsConfig{"extraction:get": {Methods: []string{"GET"}, Path: "/sync"}}, "operations.extraction:get.methods: "},
		{"unknown method", policy.OperationsConfig{"registry:x": {Methods: []string{"TRACE"}, Path: "/registry/x"}}, "operations.registry:x.methods: "},
		{"no path", policy.OperationsConfig{"registry:x": {Methods: []string{"PUT"}}}, "operations.registry:x.path: required"},
		{"unknown product", policy.OperationsConfig{"billing:x": {Path: "/billing"}}, "operations.billing:x: "},
		{"built-in name", policy.OperationsConfig{"registry:read": {Methods: []string{"GET"}, Path: "/registry/x"}}, "operations.registry:read: "},
		{"not canonical", policy.OperationsConfig{"registry:x": {Methods: []string{"PUT"}, Path: "/registry/../x"}}, "operations.registry:x.path: "},
		{"trailing dot", policy.OperationsConfig{"registry:x": {Path: "/registry/x./y"}}, "operations.registry:x.path: "},
		{"empty segment", policy.OperationsConfig{"registry:x": {Path: "/registry//x"}}, "operations.registry:x.path: "},
		{"escape", policy.OperationsConfig{"registry:x": {Path: "/registry/%61dmin"}}, "operations.registry:x.path: "},
		{"not ASCII", policy.OperationsConfig{"registry:x": {Path: "/registry/\u212a"}}, "operations.registry:x.path: "},
		{"space", policy.OperationsConfig{"registry:x": {Path: "/registry/a b"}}, "operations.registry:x.path: "},
		{"same path in another case", policy.OperationsConfig{"registry:a": {Path: "/registry/admin"}, "registry:b": {Path: "/registry/ADMIN/"}}, "operations.registry:b: overlaps registry:a"},
	} {
		_, err := policy.NewOperations(c.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to start with %q", c.name, err, c.want)
		}
	}
}

// TestAccessDecide: key, consumer and plan all have to include the
// operation; addresses of both key and consumer apply; the messages'
// reasons come in the order.
func TestAccessDecide(t *testing.T) {
	t.Parallel()
	r, err := policy.NewResolver(map[string]policy.Limit{"live": {Rate: 1, Per: 1e9, Burst: 1}, "test": {Rate: 1, Per: 1e9, Burst: 1}},
		map[string]policy.Plan{
			"nosync": {Limit: policy.Limit{Rate: 1, Per: 1e9, Burst: 1}, Features: []string{"registry:read"}},
			"all":    {Limit: policy.Limit{Rate: 1, Per: 1e9, Burst: 1}},
		})
	if err != nil {
		t.Fatal(err)
	}
	ops := r.Operations()
	sync, read, write := ops.Match("POST", "/sync"), ops.Match("GET", "/registry/x"), ops.Match("POST", "/registry/x")
	ten, lo := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("127.0.0.1")
	mapped := netip.MustParseAddr("::ffff:10.1.2.3")
	for _, c := range []struct {
		name   string
		s      policy.Subject
		op     policy.Op
		client netip.Addr
		want   policy.Denial
	}{
		{"default allows its product", policy.Subject{Products: []string{"registry"}}, write, lo, policy.DenyNone},
		{"default leaves the other product out", policy.Subject{Products: []string{"registry"}}, sync, lo, policy.DenyOperation},
		{"read-only key reads", policy.Subject{Products: []string{"registry"}, KeyPermissions: []string{"registry:read"}}, read, lo, policy.DenyNone},
		{"read-only key writes", policy.Subject{Products: []string{"registry"}, KeyPermissions: []string{"registry:read"}}, write, lo, policy.DenyOperation},
		{"consumer narrows", policy.Subject{ConsumerID: "con_1", Products: []string{"registry"}, KeyPermissions: []string{"registry:read", "registry:write"}, ConsumerPermissions: []string{"registry:read"}}, write, lo, policy.DenyOperation},
		{"consumer never widens", policy.Subject{ConsumerID: "con_1", Products: []string{"registry"}, KeyPermissions: []string{"registry:read"}, ConsumerPermissions: []string{"registry:read", "registry:write"}}, write, lo, policy.DenyOperation},
		{"plan lacks the feature", policy.Subject{KeyPlan: "nosync", Products: []string{"extraction"}}, sync, lo, policy.DenyPlan},
		{"consumer's plan lacks it", policy.Subject{ConsumerID: "con_1", ConsumerPlan: "nosync", Products: []string{"extraction"}}, sync, lo, policy.DenyPlan},
		{"plan without features", policy.Subject{KeyPlan: "all", Products: []string{"extraction"}}, sync, lo, policy.DenyNone},
		{"key before plan", policy.Subject{KeyPlan: "nosync", Products: []string{"registry"}, KeyPermissions: []string{"registry:read"}}, write, lo, policy.DenyOperation},
		{"address outside", policy.Subject{Products: []string{"registry"}, KeyCIDRs: []string{"10.0.0.0/8"}}, read, lo, policy.DenyAddress},
		{"address inside", policy.Subject{Products: []string{"registry"}, KeyCIDRs: []string{"10.0.0.0/8"}}, read, ten, policy.DenyNone},
		{"mapped address", policy.Subject{Products: []string{"registry"}, KeyCIDRs: []string{"10.0.0.0/8"}}, read, mapped, policy.DenyNone},
		{"mapped rule", policy.Subject{Products: []string{"registry"}, KeyCIDRs: []string{"::ffff:10.0.0.0/104"}}, read, ten, policy.DenyNone},
		{"consumer address", policy.Subject{ConsumerID: "con_1", Products: []string{"registry"}, ConsumerCIDRs: []string{"192.0.2.0/24"}}, read, ten, policy.DenyAddress},
		{"damaged address fails closed", policy.Subject{Products: []string{"registry"}, KeyCIDRs: []string{"nonsense"}}, read, ten, policy.DenyAddress},
		{"address before operation", policy.Subject{Products: []string{"registry"}, KeyPermissions: []string{"registry:read"}, KeyCIDRs: []string{"10.0.0.0/8"}}, write, lo, policy.DenyAddress},
	} {
		e := r.Resolve(c.s, testNow)
		if got := e.Access.Decide(c.op, c.client); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPermissionSources: keys show's view names where each permission
// came from and what withholds it.
func TestPermissionSources(t *testing.T) {
	t.Parallel()
	r, _ := policy.NewResolver(map[string]policy.Limit{"live": {Rate: 1, Per: 1e9, Burst: 1}, "test": {Rate: 1, Per: 1e9, Burst: 1}},
		map[string]policy.Plan{"ro": {Limit: policy.Limit{Rate: 1, Per: 1e9, Burst: 1}, Features: []string{"registry:read"}}})
	e := r.Resolve(policy.Subject{ConsumerID: "con_1", ConsumerPlan: "ro", Products: []string{"registry"}, ConsumerPermissions: []string{"registry:read", "registry:write"}}, testNow)
	got := e.Access.Permissions("registry")
	want := []policy.Permission{
		{Operation: "registry:read", Allowed: true, Sources: []string{"key default", "consumer", "plan ro"}},
		{Operation: "registry:write", Allowed: false, Sources: []string{"key default", "consumer"}, DeniedBy: []string{"plan ro"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

var testNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func FuzzParseCIDRs(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "::ffff:10.0.0.0/104", "10.1.2.3", "fe80::1%eth0", "::ffff:1.2.3.4/90", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := policy.ParseCIDRs("allowed_cidrs", []string{s})
		if err != nil {
			return
		}
		p := ps[0]
		if p.Addr().Is4In6() || p != p.Masked() {
			t.Fatalf("%q parsed to %v, not normalised", s, p)
		}
	})
}

// BenchmarkDecide is the request path's share of the policy check: the
// operation match and the decision, for a key with permissions, a plan
// with features and an address rule. It must not allocate.
func BenchmarkDecide(b *testing.B) {
	r, err := policy.NewResolver(map[string]policy.Limit{"live": {Rate: 1, Per: 1e9, Burst: 1}, "test": {Rate: 1, Per: 1e9, Burst: 1}},
		map[string]policy.Plan{"p": {Limit: policy.Limit{Rate: 1, Per: 1e9, Burst: 1}, Features: []string{"registry:read", "registry:write"}}})
	if err != nil {
		b.Fatal(err)
	}
	ops, err := policy.NewOperations(policy.OperationsConfig{"registry:delete": {Methods: []string{"DELETE"}, Path: "/registry/"}})
	if err != nil {
		b.Fatal(err)
	}
	r = r.WithOperations(ops)
	a := r.Resolve(policy.Subject{KeyPlan: "p", Products: []string{"registry"}, KeyPermissions: []string{"registry:read"},
		KeyCIDRs: []string{"10.0.0.0/8", "192.0.2.0/24"}}, testNow).Access
	client := netip.MustParseAddr("10.1.2.3")
	b.ReportAllocs()
	for b.Loop() {
		if a.Decide(ops.Match("GET", "/registry/schemas/x"), client) != policy.DenyNone {
			b.Fatal("refused")
		}
	}
}

// TestDefaultAccessShared: keys that no rule narrows share one Access per
// product, so the common key costs no memory for its permissions; a
// narrowed key gets its own.
func TestDefaultAccessShared(t *testing.T) {
	t.Parallel()
	r, err := policy.NewResolver(map[string]policy.Limit{"live": {Rate: 1, Per: 1e9, Burst: 1}, "test": {Rate: 1, Per: 1e9, Burst: 1}},
		map[string]policy.Plan{"all": {Limit: policy.Limit{Rate: 1, Per: 1e9, Burst: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Resolve(policy.Subject{KeyID: "a", Products: []string{"registry"}}, testNow).Access
	b := r.Resolve(policy.Subject{KeyID: "b", KeyPlan: "all", ConsumerID: "con_1", Products: []string{"registry"}}, testNow).Access
	c := r.Resolve(policy.Subject{KeyID: "c", Products: []string{"registry"}, KeyPermissions: []string{"registry:read"}}, testNow).Access
	if a != b {
		t.Error("two default registry keys do not share their Access")
	}
	if a == c || c.Allowed == a.Allowed {
		t.Error("a narrowed key shares the default Access")
	}
}

// TestPathByte holds PathByte's bit sets to the characters it names.
func TestPathByte(t *testing.T) {
	t.Parallel()
	const want = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,=:@"
	for c := 0; c < 256; c++ {
		if got := policy.PathByte(byte(c)); got != strings.ContainsRune(want, rune(c)) || (c >= 0x80 && got) {
			t.Errorf("PathByte(%q) = %v", rune(c), got)
		}
	}
}
