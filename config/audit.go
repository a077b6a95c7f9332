package config

import (
	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/audit"
)

// AuditConfig is the audit.Config to open the audit log with: audit.file,
// or audit.jsonl in the directory of keystore.file when it is empty; and,
// with the Redis keystore, client (required then) and redis.key_prefix,
// so that every change also goes to the shared stream.
func (c Config) AuditConfig(client redis.UniversalClient) audit.Config {
	a := c.Audit
	if a.File == "" {
		a.File = audit.DefaultFile(c.Keystore.File)
	}
	if c.Keystore.Backend == "redis" {
		a.Redis, a.Prefix = client, c.Redis.KeyPrefix
	}
	return a
}
