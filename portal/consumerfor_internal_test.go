package portal

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// TestConsumerFor: a sign-in claim names a consumer by id first, then by
// the configured metadata entry; a value two consumers share names none.
// With the Redis keystore the lookup reads one consumer by id, or the
// replica's copy: no scan of every consumer, which a sign-in (open to
// anyone the provider knows) would otherwise cost at each attempt.
func TestConsumerFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res, err := ratelimit.DefaultConfig().Resolver()
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	store, err := keystore.OpenRedis(keystore.RedisConfig{Client: rs.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	backends := []struct {
		name  string
		admin keyops.Store
		where keyops.ConsumersWhere
	}{
		{"file", &keystore.FileAdmin{Path: filepath.Join(t.TempDir(), "keys.yaml")}, nil},
		{"redis", &keystore.RedisAdmin{Client: rs.Client(t)}, store.ConsumersWhere},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ops, err := keyops.New(keyops.Config{Store: b.admin, Limits: res, ConsumersWhere: b.where})
			if err != nil {
				t.Fatal(err)
			}
			actor := keyops.Actor{ID: "test"}
			create := func(name string, md map[string]string) string {
				c, err := ops.CreateConsumer(ctx, actor, keyops.ConsumerSpec{Name: name, Metadata: md})
				if err != nil {
					t.Fatal(err)
				}
				return c.ID
			}
			acme := create("Acme", map[string]string{"oidc_email": "alice@acme.example"})
			bolt := create("Bolt", map[string]string{"oidc_email": "bob@bolt.example", "crm": "7"})
			create("Twin 1", map[string]string{"oidc_email": "ops@twins.example"})
			create("Twin 2", map[string]string{"oidc_email": "ops@twins.example"})
			if b.where != nil {
				testkit.Eventually(t, testkit.HangCheck, "the replica's copy holds the consumers", func() error {
					cons, _ := b.where(func(*keystore.Consumer) bool { return true })
					return testkit.Equal(len(cons), 4)
				})
			}
			p := &Portal{ops: ops, log: zap.NewNop(), cfg: Config{ConsumerMetadataKey: "oidc_email"}}
			cases := []struct {
				name  string
				claim any
				want  string
			}{
				{"an id", acme, acme},
				{"an email in the metadata", "bob@bolt.example", bolt},
				{"a list: the first value that names one", []any{"nobody@x.example", 7, "alice@acme.example", bolt}, bolt},
				{"an email two consumers share", "ops@twins.example", ""},
				{"a list with a shared email, then one", []any{"ops@twins.example", "alice@acme.example"}, acme},
				{"another metadata entry", "7", ""},
				{"no consumer", "carol@nowhere.example", ""},
				{"a number", 42, ""},
				{"empty", "", ""},
				{"none", nil, ""},
			}
			scans := func() int { c := rs.Calls(t); return c["hscan"] + c["hgetall"] }
			n0 := scans()
			for _, c := range cases {
				got, err := p.consumerFor(ctx, c.claim)
				if err != nil || got != c.want {
					t.Errorf("%s: consumerFor(%v) = %q, %v; want %q", c.name, c.claim, got, err, c.want)
				}
			}
			if n := scans() - n0; b.where != nil && n != 0 {
				t.Errorf("the sign-ins scanned the consumers %d times, want none", n)
			}
		})
	}
}
