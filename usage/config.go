package usage

import (
	"errors"
	"time"
)

// Config is the `usage` section of the configuration.
type Config struct {
	// FlushInterval is how often each replica writes its counts (to Redis
	// when keystore.backend or ratelimit.backend is redis, else to the
	// file keystore's companion file KEYS_FILE.usage.json). A crash loses
	// at most this much of the counts.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxKeys caps the keys tracked between two flushes (memory bound);
	// requests of further keys go uncounted (keygate_usage_dropped_total).
	MaxKeys int `yaml:"max_keys"`
}

// DefaultConfig flushes every second and tracks up to 100000 keys.
func DefaultConfig() Config { return Config{FlushInterval: time.Second, MaxKeys: 100000} }

// Validate checks the section.
func (c Config) Validate() error {
	if c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute {
		return errors.New("flush_interval: must be between 10ms and 1m")
	}
	if c.MaxKeys <= 0 {
		return errors.New("max_keys: must be positive")
	}
	return nil
}
