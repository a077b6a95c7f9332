package usage

import (
	"errors"
	"time"
)

// Config is the `usage` section of the configuration.
type Config struct {
	// FlushInterval is how often each replica writes its counts (to Redis
	// when keystore.backend or ratelimit.backend is redis, else to the
	// file keystore's companion files KEYS_FILE.usage.json and its
	// .journal). A crash loses at most this much of the counts.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxKeys caps the keys tracked between two flushes (memory bound);
	// requests of further keys go uncounted (keygate_usage_dropped_total).
	MaxKeys int `yaml:"max_keys"`
	// LastUsedResolution is how far behind a key's true last use the
	// Redis usage store's may be: a replica writes a key's last use again
	// once it moved by this much since the replica last wrote it. 0
	// writes every key's last use at every flush, a sorted-set update per
	// key and flush that redis-server pays for (about a quarter of its
	// work per request with many keys each used now and then). The file
	// store keeps last uses in memory and is always exact.
	LastUsedResolution time.Duration `yaml:"last_used_resolution"`
}

// DefaultConfig flushes every second, tracks up to 100000 keys and keeps
// last uses to the minute.
func DefaultConfig() Config {
	return Config{FlushInterval: time.Second, MaxKeys: 100000, LastUsedResolution: time.Minute}
}

// Validate checks the section.
func (c Config) Validate() error {
	if c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute {
		return errors.New("flush_interval: must be between 10ms and 1m")
	}
	if c.LastUsedResolution < 0 || c.LastUsedResolution > time.Hour {
		return errors.New("last_used_resolution: must be between 0 (exact) and 1h")
	}
	if c.MaxKeys <= 0 {
		return errors.New("max_keys: must be positive")
	}
	return nil
}
