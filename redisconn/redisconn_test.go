package redisconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/redisconn"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

func decode(t *testing.T, doc string) (redisconn.Config, error) {
	t.Helper()
	var file struct {
		Redis redisconn.Config `yaml:"redis"`
	}
	file.Redis = redisconn.DefaultConfig()
	err := yaml.Unmarshal([]byte(doc), &file)
	return file.Redis, err
}

func TestConfigFromYAML(t *testing.T) {
	t.Parallel()
	c, err := decode(t, `
redis:
  addrs: [10.0.0.1:6379, 10.0.0.2:6379]
  username: keygate
  password_env: KEYGATE_REDIS_PASSWORD
  read_timeout: 50ms
  tls: { enabled: true, server_name: redis.internal }
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Addrs) != 2 || c.PasswordEnv != "KEYGATE_REDIS_PASSWORD" || c.ReadTimeout != 50*time.Millisecond ||
		c.WriteTimeout != 100*time.Millisecond || c.DialTimeout != 500*time.Millisecond || c.KeyPrefix != "keygate:" ||
		!c.TLS.Enabled || c.TLS.ServerName != "redis.internal" {
		t.Fatalf("decoded %+v", c)
	}
}

func TestConfigRejectsLiteralPassword(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"password", "sentinel_password"} {
		_, err := decode(t, "redis:\n  addrs: [127.0.0.1:6379]\n  "+key+": hunter2\n")
		if err == nil || !strings.Contains(err.Error(), "line 3: ") || !strings.Contains(err.Error(), key+"_env") {
			t.Fatalf("%s: %v, want an error naming line 3 and pointing to %s_env", key, err, key)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("the error repeats the password: %v", err)
		}
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*redisconn.Config)
		want   string
	}{
		{"no addresses", func(c *redisconn.Config) { c.Addrs = nil }, "addrs: must list at least one host:port"},
		{"address without port", func(c *redisconn.Config) { c.Addrs = []string{"localhost"} }, "addrs[0]: must be host:port"},
		{"port out of range", func(c *redisconn.Config) { c.Addrs = []string{"a:1", "b:70000"} }, "addrs[1]: port must be 1-65535"},
		{"sentinel and cluster", func(c *redisconn.Config) { c.MasterName, c.Cluster = "mymaster", true }, "cluster: cannot be combined"},
		{"password_env not a name", func(c *redisconn.Config) { c.PasswordEnv = "s3cret pass" }, "password_env: must be the name"},
		{"db in a cluster", func(c *redisconn.Config) { c.Cluster, c.DB = true, 2 }, "db: must be 0 with Redis Cluster"},
		{"negative db", func(c *redisconn.Config) { c.DB = -1 }, "db: must be at least 0"},
		{"tls fields without tls", func(c *redisconn.Config) { c.TLS.CAFile = "/ca.pem" }, "tls.enabled: must be true"},
		{"zero read timeout", func(c *redisconn.Config) { c.ReadTimeout = 0 }, "read_timeout: must be positive"},
		{"zero dial timeout", func(c *redisconn.Config) { c.DialTimeout = 0 }, "dial_timeout: must be positive"},
		{"negative pool", func(c *redisconn.Config) { c.PoolSize = -1 }, "pool_size: "},
		{"empty key prefix", func(c *redisconn.Config) { c.KeyPrefix = "" }, "key_prefix: must not be empty"},
		{"hash tag in key prefix", func(c *redisconn.Config) { c.KeyPrefix = "{kg}:" }, "key_prefix: must not contain braces"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redisconn.DefaultConfig()
			tc.change(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to contain %q", err, tc.want)
			}
			if _, err := redisconn.New(c, nil); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestNewConnectsWithPasswordFromEnvironment(t *testing.T) {
	t.Parallel()
	const secret = "correct-horse-battery"
	s := redistest.Start(t)
	if _, err := s.Do("CONFIG", "SET", "requirepass", secret); err != nil {
		t.Fatal(err)
	}
	cfg := redisconn.DefaultConfig()
	cfg.Addrs = []string{s.Addr}
	cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	cfg.PasswordEnv = "KEYGATE_REDIS_PASSWORD"
	env := map[string]string{"KEYGATE_REDIS_PASSWORD": secret}
	c, err := redisconn.New(cfg, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("one address gave %T, want *redis.Client", c)
	}
	if err := c.Set(context.Background(), "k", "v", time.Minute).Err(); err != nil {
		t.Fatalf("with the right password: %v", err)
	}

	env["KEYGATE_REDIS_PASSWORD"] = "wrong-password"
	bad, err := redisconn.New(cfg, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.Ping(context.Background()).Err()
	if err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("the error repeats the password: %v", err)
	}

	delete(env, "KEYGATE_REDIS_PASSWORD")
	if _, err := redisconn.New(cfg, func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(fieldpath.Within("redis", err).Error(), "redis.password_env: environment variable KEYGATE_REDIS_PASSWORD is unset") {
		t.Fatalf("unset variable: %v", err)
	}
}

func TestNewClusterFromSeveralAddresses(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cfg := redisconn.DefaultConfig()
	cfg.Addrs = cl.Addrs
	cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	c, err := redisconn.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("got %T, want *redis.ClusterClient", c)
	}
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} { // several slots
		if err := c.Set(ctx, k, k, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	// One address with cluster: true is also a cluster client.
	cfg.Addrs, cfg.Cluster = cl.Addrs[:1], true
	one, err := redisconn.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if v, err := one.Get(ctx, "f").Result(); err != nil || v != "f" {
		t.Fatalf("GET through one seed: %q %v", v, err)
	}
}

func TestNewReadsTheCAFile(t *testing.T) {
	t.Parallel()
	cfg := redisconn.DefaultConfig()
	cfg.TLS.Enabled, cfg.TLS.CAFile = true, t.TempDir()+"/missing.pem"
	if _, err := redisconn.New(cfg, nil); err == nil || !strings.HasPrefix(fieldpath.Within("redis", err).Error(), "redis.tls.ca_file: ") {
		t.Fatalf("missing CA file: %v", err)
	}
}

// TestClusterFollowsAFailoverPromptly: after a primary is SIGKILLed and
// the cluster promotes its replica (cluster_state:ok), the client serves
// that primary's slots within seconds, not when go-redis's once-a-minute
// reload of the slot map comes round.
func TestClusterFollowsAFailoverPromptly(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWith(t, redistest.ClusterOptions{Primaries: 3, Replicas: 1, NodeTimeout: time.Second})
	cfg := redisconn.DefaultConfig()
	cfg.Addrs = cl.Addrs
	c, err := redisconn.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	set := func() error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return c.Set(ctx, "k", "v", time.Minute).Err()
	}
	if err := set(); err != nil {
		t.Fatal(err)
	}
	old := cl.PrimaryOf(t, "k")
	killed := time.Now()
	old.Kill()
	// Keep using the slot while the cluster recovers, as a loaded
	// gateway does; every error must be one a caller answers with 503.
	var recovered time.Time
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not recover within 30s")
		}
		err := set()
		if err != nil && !redisconn.Unavailable(err) {
			t.Fatalf("error during the failover is not classified unavailable: %v", err)
		}
		if p := cl.ServingPrimary("k"); recovered.IsZero() && cl.StateOK() && p != nil && p != old {
			recovered = time.Now()
		}
		if !recovered.IsZero() && err == nil {
			break
		}
	}
	// The loop's 30 s deadline above is the hang check; how soon is
	// logged, not asserted.
	t.Logf("cluster_state:ok %s after the kill; the client served the slot's new primary %s after that",
		recovered.Sub(killed).Round(time.Millisecond), time.Since(recovered).Round(time.Millisecond))
}
