// Package deps pins modules while the tree is built up; removed before release.
package deps

import (
	_ "github.com/caddyserver/certmagic"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/hashicorp/golang-lru/v2"
	_ "github.com/lestrrat-go/jwx/v3/jwt"
	_ "github.com/letsencrypt/pebble/v2/wfe"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/sony/gobreaker/v2"
	_ "go.uber.org/zap"
	_ "golang.org/x/sync/singleflight"
	_ "golang.org/x/time/rate"
	_ "gopkg.in/yaml.v3"
)
