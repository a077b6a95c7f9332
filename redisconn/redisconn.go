// Package redisconn builds the one Redis client keygate shares among its
// packages, from the `redis:` section of the configuration: a single node,
// a Sentinel-managed primary or a Cluster. Passwords never appear in the
// configuration file: it names an environment variable that holds them.
// Breaker is the circuit breaker that the Redis keystore and the Redis rate
// limiter put around their calls, with one rule for what counts as Redis
// failing.
package redisconn

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/internal/capool"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// TLS configures TLS to Redis. The zero value means plain TCP.
type TLS struct {
	// Enabled turns TLS on.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the CAs to trust; "" means the system pool.
	CAFile string `yaml:"ca_file"`
	// ServerName overrides the name checked in the server's certificate.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify turns certificate checks off. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Config is the `redis:` section of the configuration file. Get the
// defaults from DefaultConfig; check it with Validate.
type Config struct {
	// Addrs are host:port addresses: the server, the Sentinels (with
	// MasterName) or Cluster seed nodes.
	Addrs []string `yaml:"addrs"`
	// MasterName selects Sentinel: the name of the monitored primary.
	MasterName string `yaml:"master_name"`
	// Cluster selects Redis Cluster even with one address. Several Addrs
	// without MasterName also mean Cluster.
	Cluster bool `yaml:"cluster"`
	// Username is the ACL user; "" means the default user.
	Username string `yaml:"username"`
	// PasswordEnv is the NAME of the environment variable holding the
	// password; "" means no password.
	PasswordEnv string `yaml:"password_env"`
	// SentinelPasswordEnv is the NAME of the environment variable holding
	// the Sentinels' password; "" means none.
	SentinelPasswordEnv string `yaml:"sentinel_password_env"`
	// DB is the database number; Cluster only has 0.
	DB int `yaml:"db"`
	// TLS configures TLS.
	TLS TLS `yaml:"tls"`
	// DialTimeout bounds connecting.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ReadTimeout bounds waiting for a reply.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds sending a command.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// PoolSize is the number of connections per node; 0 means 10 per CPU.
	PoolSize int `yaml:"pool_size"`
	// MaxRetries is how often a failed command is retried; 0 means never
	// (the callers have their own short timeouts and fallbacks).
	MaxRetries int `yaml:"max_retries"`
	// KeyPrefix starts every key and pub/sub channel keygate uses: rate
	// limits, quotas, key records and their change channel, certificates
	// and their locks. Deployments that share a Redis need different
	// prefixes.
	KeyPrefix string `yaml:"key_prefix"`
}

// DefaultConfig returns the defaults: localhost:6379, short timeouts
// (500ms dial, 100ms read and write), no retries, key prefix "keygate:".
func DefaultConfig() Config {
	return Config{
		Addrs:        []string{"127.0.0.1:6379"},
		DialTimeout:  500 * time.Millisecond,
		ReadTimeout:  100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond,
		KeyPrefix:    "keygate:",
	}
}

// UnmarshalYAML decodes the section, rejecting a literal `password:` or
// `sentinel_password:` key. The refusal names the line, as yaml's own
// errors do, so that whoever decodes the whole file can name the key's
// path (package config does). Fields absent from the YAML keep their value
// (so decode onto DefaultConfig()).
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch k := n.Content[i]; k.Value {
			case "password", "sentinel_password":
				return fmt.Errorf("line %d: a password must not be written in the configuration; put it in an environment variable and set %s_env to that variable's name", k.Line, k.Value)
			}
		}
	}
	type plain Config
	return n.Decode((*plain)(c))
}

// envName is what a POSIX shell accepts as a variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports the first problem in c, naming its field by YAML path.
func (c Config) Validate() error {
	var v fieldpath.First
	bad := v.Bad
	if len(c.Addrs) == 0 {
		bad("addrs", "must list at least one host:port")
	}
	for i, a := range c.Addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			bad(fmt.Sprintf("addrs[%d]", i), "must be host:port, got %q", a)
			continue
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			bad(fmt.Sprintf("addrs[%d]", i), "port must be 1-65535, got %q", port)
		}
	}
	if c.MasterName != "" && c.Cluster {
		bad("cluster", "cannot be combined with master_name (Sentinel)")
	}
	if c.PasswordEnv != "" && !envName.MatchString(c.PasswordEnv) {
		bad("password_env", "must be the name of an environment variable (letters, digits, _), got %q", c.PasswordEnv)
	}
	if c.SentinelPasswordEnv != "" && !envName.MatchString(c.SentinelPasswordEnv) {
		bad("sentinel_password_env", "must be the name of an environment variable (letters, digits, _), got %q", c.SentinelPasswordEnv)
	}
	if c.DB < 0 {
		bad("db", "must be at least 0, got %d", c.DB)
	}
	if c.DB != 0 && c.isCluster() {
		bad("db", "must be 0 with Redis Cluster, got %d", c.DB)
	}
	if !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.ServerName != "" || c.TLS.InsecureSkipVerify) {
		bad("tls.enabled", "must be true when other tls fields are set")
	}
	for _, d := range []struct {
		path string
		v    time.Duration
	}{{"dial_timeout", c.DialTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}} {
		if d.v <= 0 {
			bad(d.path, "must be positive, got %s", d.v)
		}
	}
	if c.PoolSize < 0 {
		bad("pool_size", "must be at least 0, got %d", c.PoolSize)
	}
	if c.MaxRetries < 0 {
		bad("max_retries", "must be at least 0, got %d", c.MaxRetries)
	}
	if c.KeyPrefix == "" {
		bad("key_prefix", "must not be empty")
	} else if strings.ContainsAny(c.KeyPrefix, "{} \r\n") {
		bad("key_prefix", "must not contain braces or whitespace, got %q", c.KeyPrefix)
	}
	return v.Err()
}

func (c Config) isCluster() bool {
	return c.MasterName == "" && (c.Cluster || len(c.Addrs) > 1)
}

// New returns a client for cfg: a *redis.Client, *redis.ClusterClient or
// Sentinel failover client. getenv reads the password variables (pass
// os.Getenv). The client honours context deadlines, so callers can bound
// each call. It does not connect yet: a Redis that is down at start is
// seen on first use. Errors never contain a password.
func New(cfg Config, getenv func(string) string) (redis.UniversalClient, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := &redis.UniversalOptions{
		Addrs:                 cfg.Addrs,
		MasterName:            cfg.MasterName,
		IsClusterMode:         cfg.Cluster,
		Username:              cfg.Username,
		DB:                    cfg.DB,
		DialTimeout:           cfg.DialTimeout,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		PoolTimeout:           cfg.DialTimeout + cfg.ReadTimeout,
		PoolSize:              cfg.PoolSize,
		MaxRetries:            cfg.MaxRetries,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
	}
	if cfg.MaxRetries == 0 {
		opts.MaxRetries = -1 // go-redis: -1 disables retries, 0 means 3
	}
	for _, p := range []struct {
		path, name string
		dst        *string
	}{{"password_env", cfg.PasswordEnv, &opts.Password}, {"sentinel_password_env", cfg.SentinelPasswordEnv, &opts.SentinelPassword}} {
		if p.name == "" {
			continue
		}
		if getenv == nil {
			getenv = os.Getenv
		}
		v := getenv(p.name)
		if v == "" {
			return nil, fieldpath.Errorf(p.path, "environment variable %s is unset or empty", p.name)
		}
		*p.dst = v
	}
	if cfg.TLS.Enabled {
		tc := &tls.Config{
			MinVersion:         tls.VersionTLS12,
			ServerName:         cfg.TLS.ServerName,
			InsecureSkipVerify: cfg.TLS.InsecureSkipVerify, //nolint:gosec // an explicit, documented test-only option
		}
		if cfg.TLS.CAFile != "" {
			pool, err := capool.Load(cfg.TLS.CAFile)
			if err != nil {
				return nil, fieldpath.Errorf("tls.ca_file", "%w", err)
			}
			tc.RootCAs = pool
		}
		opts.TLSConfig = tc
	}
	if cfg.isCluster() {
		return newCluster(opts.Cluster()), nil
	}
	return redis.NewUniversalClient(opts), nil
}
