package config_test

import (
	"fmt"

	"github.com/keygate/keygate/config"
)

// A config file names only what differs from the defaults; every error
// names the field by its YAML path.
func ExampleParse() {
	c, err := config.Parse([]byte(`
ratelimit:
  backend: redis
  replicas: 3
redis:
  addrs: ["10.0.0.5:6379"]
  password_env: REDIS_PASSWORD
`))
	fmt.Println(c.RateLimit.Backend, c.RateLimit.Replicas, c.Server.Listen, err)

	_, err = config.Parse([]byte("ratelimit:\n  status: 500\n"))
	fmt.Println(err)
	// Output:
	// redis 3 :8443 <nil>
	// ratelimit.status: must be 429 or 403, got 500
}
