package config_test

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/config"
)

// TestExampleIsTheDefault parses config.example.yaml, validates it, and
// checks it documents exactly the built-in defaults.
func TestExampleIsTheDefault(t *testing.T) {
	t.Parallel()
	c, err := config.Load("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := yaml.Marshal(c)
	want, _ := yaml.Marshal(config.Default())
	if string(got) != string(want) {
		t.Errorf("config.example.yaml differs from config.Default():\nexample:\n%s\ndefault:\n%s", got, want)
	}
}

func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	if err := config.Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidConfigNamesTheField: every error names the offending field by
// its YAML path.
func TestInvalidConfigNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, field string }{
		{"unknown top-level key", "sever:\n  listen: x\n", "sever"},
		{"unknown nested key", "server:\n  listne: \":1\"\n", "listne"},
		{"wrong type", "server:\n  max_body_bytes: lots\n", "max_body_bytes"},
		{"negative body cap", "server:\n  max_body_bytes: -5\n", "server.max_body_bytes"},
		{"admin on the API listener", "server:\n  admin_listen: \":8443\"\n", "server.admin_listen"},
		{"no header timeout", "server:\n  read_header_timeout: 0s\n", "server.read_header_timeout"},
		{"min body rate without a grace", "server:\n  min_body_rate: 1KiB/s\n", "server.min_body_rate"},
		{"min body rate unit", "server:\n  min_body_rate: 1GiB/s after 10s\n", "server.min_body_rate"},
		{"min body rate grace", "server:\n  min_body_rate: 1KiB/s after 0s\n", "server.min_body_rate"},
		{"tls mode", "tls:\n  mode: maybe\n", "tls.mode"},
		{"files without cert", "tls:\n  mode: files\n", "tls.cert_file"},
		{"no targets", "upstreams:\n  extraction: { targets: [] }\n", "upstreams.extraction.targets"},
		{"target with a path", "upstreams:\n  registry: { targets: [\"http://127.0.0.1:1/api\"] }\n", "upstreams.registry.targets[0]"},
		{"target scheme", "upstreams:\n  registry: { targets: [\"ftp://h:1\"] }\n", "upstreams.registry.targets[0]"},
		{"keystore backend", "keystore:\n  backend: sql\n", "keystore.backend"},
		{"keystore file", "keystore:\n  file: \"\"\n", "keystore.file"},
		{"audit file none without redis", "audit:\n  file: none\n", "audit.file"},
		{"audit stream cap", "audit:\n  redis_max_len: 0\n", "audit.redis_max_len"},
		{"rate limit status", "ratelimit:\n  status: 500\n", "ratelimit.status"},
		{"failure mode", "ratelimit:\n  failure_mode: maybe\n", "ratelimit.failure_mode"},
		{"burst", "ratelimit:\n  limits:\n    live: { rate: 5, per: 1s, burst: 0 }\n", "ratelimit.limits.live.burst"},
		{"redis password in clear", "ratelimit:\n  backend: redis\nredis:\n  password: hunter2\n", "redis.password: a password must not be written"},
		{"sentinel password in clear", "redis:\n  addrs: [127.0.0.1:6379]\n  sentinel_password: hunter2\n", "redis.sentinel_password: a password must not be written"},
		{"api key products", "auth:\n  api_keys:\n    products: [billing]\n", "auth.api_keys.products[0]"},
		{"oauth2 without jwks", "auth:\n  oauth2:\n    enabled: true\n    issuer: https://i.example/\n", "auth.oauth2.jwks_url"},
		{"oauth2 alg none", "auth:\n  oauth2:\n    enabled: true\n    issuer: https://i.example/\n    jwks_url: https://i.example/jwks\n    algorithms: [none]\n", "auth.oauth2.algorithms"},
		{"nothing enabled", "auth:\n  api_keys:\n    enabled: false\n", "auth"},
		{"log level", "log:\n  level: loud\n", "log.level"},
		{"acme http-01 without a plain listener", "tls:\n  mode: acme\n  domains: [api.example.com]\n", "server.http_listen"},
		{"negative body idle timeout", "server:\n  body_idle_timeout: -1s\n", "server.body_idle_timeout"},
		{"negative max concurrent", "ratelimit:\n  max_concurrent: -1\n", "ratelimit.max_concurrent"},
		{"failure limit rate", "auth:\n  failure_limit: { enabled: true, rate: 0 }\n", "auth.failure_limit.rate"},
		{"failure limit burst", "auth:\n  failure_limit:\n    burst: 0\n", "auth.failure_limit.burst"},
		{"failure limit per", "auth:\n  failure_limit:\n    per: 0s\n", "auth.failure_limit.per"},
		{"failure limit memory", "auth:\n  failure_limit:\n    max_addresses: 0\n", "auth.failure_limit.max_addresses"},
		{"zero quota", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1s, burst: 10, quota: { requests: 0, per: 0s } }\n", "ratelimit.limits.live.quota.requests: must be from 1"},
		{"empty quota", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1s, burst: 10, quota: {} }\n", "ratelimit.limits.live.quota.requests"},
		{"quota of no period", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1s, burst: 10, quota: { requests: 10, per: 0s } }\n", "ratelimit.limits.live.quota.per"},
		{"quota per 1ns", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1s, burst: 10, quota: { requests: 10, per: 1ns } }\n", "ratelimit.limits.live.quota.per"},
		{"huge quota", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1s, burst: 10, quota: { requests: 9223372036854775807, per: 1ms } }\n", "ratelimit.limits.live.quota.requests"},
		{"tiny rate", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 1e-300, per: 1s, burst: 10 }\n", "ratelimit.limits.live.rate"},
		{"huge rate", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 1e308, per: 1s, burst: 10 }\n", "ratelimit.limits.live.rate"},
		{"huge burst", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1s, burst: 9223372036854775807 }\n", "ratelimit.limits.live.burst"},
		{"per 1ns", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 1ns, burst: 1 }\n", "ratelimit.limits.live.per"},
		{"per over 366 days", "ratelimit:\n  limits:\n    test: { rate: 5, per: 1s, burst: 10 }\n    live: { rate: 5, per: 9000h, burst: 1 }\n", "ratelimit.limits.live.per"},
		{"plan zero quota", "ratelimit:\n  plans:\n    pro: { rate: 5, per: 1s, burst: 10, quota: { requests: 0, per: 0s } }\n", "ratelimit.plans.pro.quota.requests"},
		{"plan huge rate", "ratelimit:\n  plans:\n    pro: { rate: 1e9, per: 1s, burst: 10 }\n", "ratelimit.plans.pro.rate"},
		{"failure limit huge rate", "auth:\n  failure_limit: { enabled: true, rate: 1e308 }\n", "auth.failure_limit.rate"},
		{"trusted proxy with host bits", "server:\n  trusted_proxies: [10.0.0.0/8, 10.1.2.3/8]\n", `server.trusted_proxies[1]: "10.1.2.3/8" has host bits set; write the range as 10.0.0.0/8`},
		{"same fixed port twice", "server:\n  listen: \"127.0.0.1:9000\"\n  admin_listen: \"127.0.0.1:9000\"\n", "server.admin_listen"},
	}
	for _, c := range cases {
		expectRefused(t, c.name, c.yaml, func(msg string) bool { return strings.Contains(msg, c.field) }, "name "+c.field)
	}
}

func TestPortZeroNeverClashes(t *testing.T) {
	t.Parallel()
	if _, err := config.Parse([]byte("server:\n  listen: \"127.0.0.1:0\"\n  admin_listen: \"127.0.0.1:0\"\n")); err != nil {
		t.Fatal(err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := config.Load("/nonexistent/keygate.yaml")
	if err == nil || !strings.Contains(err.Error(), "keygate.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// TestEmptyFileIsAnError: a --config file that holds nothing (empty,
// whitespace, only comments) is refused rather than run as the defaults:
// it is a truncated or wrongly mounted file far more often than a wish.
func TestEmptyFileIsAnError(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{"empty": "", "whitespace": " \n\t\n  \n", "comments only": "# keygate\n\n# nothing here\n"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := t.TempDir() + "/keygate.yaml"
			_ = os.WriteFile(path, []byte(content), 0o600)
			_, err := config.Load(path)
			if err == nil || !strings.Contains(err.Error(), "empty") || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v; want an error naming the file as empty", err)
			}
		})
	}
}

// TestOverflowingDurationNamesItsField: a duration too large for Go's
// time.Duration is reported under its own field name, also when several
// fields share one line.
func TestOverflowingDurationNamesItsField(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, field string }{
		{"hours", "server:\n  read_timeout: 9999999999h\n", "server.read_timeout"},
		{"just over", "server:\n  idle_timeout: 2562048h\n", "server.idle_timeout"},
		{"nanoseconds", "server:\n  write_timeout: 9223372036854775808\n", "server.write_timeout"},
		{"flow mapping", "ratelimit:\n  limits:\n    live: { rate: 5, per: 99999999999h, burst: 1 }\n", "ratelimit.limits.live.per"},
		{"second on a line", "server: { read_timeout: 1s, body_idle_timeout: 99999999999999s }\n", "server.body_idle_timeout"},
	}
	for _, c := range cases {
		expectRefused(t, c.name, c.yaml, func(msg string) bool {
			return strings.HasPrefix(msg, c.field+": ") && strings.Contains(msg, "out of range")
		}, "start with "+c.field+" and say out of range")
	}
	// The largest duration still parses.
	if _, err := config.Parse([]byte("server:\n  read_timeout: 2562047h\n")); err != nil {
		t.Errorf("2562047h: %v", err)
	}
}

// TestValidateReportsTheFirstError: a file with several problems in one
// section gets one error, for the first of them, from every section alike.
func TestValidateReportsTheFirstError(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, first, notAlso string }{
		{"server", "server:\n  max_body_bytes: -1\n  idle_timeout: 0s\n", "server.max_body_bytes", "server.idle_timeout"},
		{"tls", "tls:\n  min_version: \"1.0\"\n  mode: maybe\n", "tls.min_version", "tls.mode"},
		{"upstreams", "upstreams:\n  extraction: { targets: [] }\n  registry: { targets: [] }\n", "upstreams.extraction.targets", "upstreams.registry"},
		{"redis", "ratelimit:\n  backend: redis\nredis:\n  addrs: []\n  db: -1\n", "redis.addrs", "redis.db"},
		{"ratelimit", "ratelimit:\n  backend: sql\n  status: 500\n", "ratelimit.backend", "ratelimit.status"},
		{"auth.oauth2", "auth:\n  oauth2:\n    leeway: 1h\n    jwks_refresh_min_interval: -1s\n", "auth.oauth2.leeway", "auth.oauth2.jwks_refresh_min_interval"},
		{"log", "log:\n  level: loud\n  format: xml\n", "log.level", "log.format"},
	}
	for _, c := range cases {
		expectRefused(t, c.name, c.yaml, func(msg string) bool {
			return strings.HasPrefix(msg, c.first+": ") && !strings.Contains(msg, c.notAlso)
		}, "name only the first problem, "+c.first)
	}
}

// expectRefused runs a parallel subtest in which Parse must refuse yaml
// with an error whose message passes ok; want says what ok looks for.
func expectRefused(t *testing.T, name, yaml string, ok func(msg string) bool, want string) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		_, err := config.Parse([]byte(yaml))
		if err == nil {
			t.Fatalf("accepted:\n%s", yaml)
		}
		if !ok(err.Error()) {
			t.Errorf("error %q: want it to %s", err, want)
		}
	})
}
