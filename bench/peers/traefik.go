package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keygate/keygate/bench/internal/benchproc"
)

// Target traefik-redis is Traefik v3, a Go reverse proxy in wide use,
// with its rateLimit middleware keeping its token buckets in a Redis of
// its own (one Lua script a request), keyed by the request's x-api-key:
// a Go peer that shares an exact limit through Redis, as keygate-redis
// does, and is loaded side by side with it (sidePairs). Like bare-redis
// it checks no key against a keystore. Its configuration is the one
// Traefik's docs give for the Redis rate limiter, in Traefik's file
// provider (configs/traefik.yml.tmpl, configs/traefik-dynamic.yml.tmpl),
// at the limit of bare-redis and keygate-redis (bareRedisLimit). Debian
// packages no Traefik: `make deps` builds it from its Go module
// (scripts/deps.txt).

var (
	//go:embed configs/traefik.yml.tmpl
	traefikStaticTmpl string
	//go:embed configs/traefik-dynamic.yml.tmpl
	traefikDynamicTmpl string
)

// traefikConf is what Traefik's two config templates need.
type traefikConf struct {
	// Listen is the entry point's address; Upstream the plain upstream's
	// host:port; Redis the host:port of the limiter's redis-server.
	Listen, Upstream, Redis string
	// Dynamic is the path of the dynamic configuration.
	Dynamic string
	// Pool is the idle keep-alive pool to the upstream (keygate's).
	Pool int
	// Average, Period and Burst are rateLimit's: the rate is Average a
	// Period.
	Average int
	Period  string
	Burst   int
	// CertFile and KeyFile are TLS mode's certificate (empty in plain
	// mode).
	CertFile, KeyFile string
}

// traefikBin is the traefik that `make deps` built, in Go's bin
// directory (go env GOBIN, else the first GOPATH's bin), or else one on
// PATH; "" when there is none.
func traefikBin() string {
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(string(out), "\n")
		dir := lines[0]
		if dir == "" && len(lines) > 1 && lines[1] != "" {
			dir = filepath.Join(filepath.SplitList(lines[1])[0], "bin")
		}
		if p := filepath.Join(dir, "traefik"); dir != "" && benchproc.FileExists(p) {
			return p
		}
	}
	return benchproc.LookPath("traefik")
}

// traefikVersion is what `traefik version` says its version is.
func traefikVersion(exe string) string {
	out, err := exec.Command(exe, "version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// traefikConfig writes name's static and dynamic configurations into the
// bench's dir and returns Traefik's command line: exe on listen, to
// upstream, its rate limiter in the Redis at redisAddr with limit (the
// bench's: bareRedisLimit).
func (b *bench) traefikConfig(name, exe, listen, upstream, redisAddr string, limit redis_rate.Limit) ([]string, error) {
	static := filepath.Join(b.dir, name+".yml")
	d := traefikConf{
		Listen:   listen,
		Upstream: upstream,
		Redis:    redisAddr,
		Dynamic:  filepath.Join(b.dir, name+"-dynamic.yml"),
		Pool:     pool,
		Average:  limit.Rate,
		Period:   limit.Period.String(),
		Burst:    limit.Burst,
	}
	if b.cert != nil {
		d.CertFile, d.KeyFile = b.cert.certFile, b.cert.keyFile
	}
	for _, f := range []struct{ path, tmpl string }{{static, traefikStaticTmpl}, {d.Dynamic, traefikDynamicTmpl}} {
		t, err := template.New(filepath.Base(f.path)).Option("missingkey=error").Parse(f.tmpl)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, d); err != nil {
			return nil, err
		}
		if err := os.WriteFile(f.path, buf.Bytes(), 0o600); err != nil {
			return nil, err
		}
	}
	return []string{exe, "--configFile=" + static}, nil
}

// startTraefik starts target traefik-redis, with a redis-server of its
// own whose CPU is counted beside it, as bare-redis's is; add is
// startAll's. Without traefik installed, smoke mode skips it and a
// measuring run fails.
func (b *bench) startTraefik(add func(string, func(string) ([]string, error)) error, upstream string) error {
	const name = "traefik-redis"
	exe := traefikBin()
	if exe == "" {
		if b.o.Smoke {
			return add(name, func(string) ([]string, error) { return nil, nil })
		}
		return errors.New("traefik is not installed: run make deps (scripts/deps.txt builds it from its Go module)")
	}
	b.logf("%s: Traefik %s (%s)", name, traefikVersion(exe), exe)
	redisAddr, redisProc, err := b.startRedis()
	if err != nil {
		return err
	}
	n := len(b.targets)
	if err := add(name, func(addr string) ([]string, error) {
		return b.traefikConfig(name, exe, addr, upstream, redisAddr, bareRedisLimit)
	}); err != nil {
		return err
	}
	if len(b.targets) == n {
		return fmt.Errorf("%s did not start", name)
	}
	b.targets[n].redis = redisProc
	return nil
}
