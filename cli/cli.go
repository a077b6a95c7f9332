// Package cli is keygate's command line: serve, keys, consumers,
// admin-tokens, audit, demo, standin and version. Main returns the process
// exit code, so the commands are tested in-process as well as through the
// built binary.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/logline"
	"github.com/keygate/keygate/redact"
	"github.com/keygate/keygate/server"
)

const usage = `keygate: an authenticating reverse proxy for the Document Extraction Service

Usage:
  keygate serve [--config FILE]              run the gateway (embedded defaults without --config)
  keygate keys issue --config FILE --product extraction|registry --env live|test
                     [--context UUID] [--name TEXT] [--expires-in DURATION] [--consumer ID]
                     [--permissions OP,...] [--allow-cidr CIDR]...
  keygate keys list --config FILE [--json] [--consumer ID]
  keygate keys show --config FILE ID [--json]          the key and its effective limit, explained
  keygate keys update --config FILE ID [--name TEXT] [--plan NAME] [--rate N] [--per DURATION]
                     [--burst N] [--quota N/DURATION|none] [--until RFC3339|never] [--clear-override]
                     [--permissions OP,...|default] [--allow-cidr CIDR]... [--clear-allow-cidr]
  keygate keys revoke --config FILE ID
  keygate keys rotate --config FILE ID [--grace DURATION]
  keygate keys import --config FILE --from KEYS.yaml   (into the redis keystore)
  keygate keys purge --config FILE --older-than 90d [--dry-run]
                     delete the keys revoked or expired more than that long ago (ids on stdout)
  keygate consumers create --config FILE --name TEXT [--meta K=V]... [--context UUID]...
                     [--plan NAME] [--rate N] [--per DURATION] [--burst N] [--quota N/DURATION|none] [--until RFC3339]
                     [--permissions OP,...] [--allow-cidr CIDR]...
  keygate consumers list|show --config FILE [ID] [--json]
  keygate consumers update --config FILE ID [--name TEXT] [--meta K=V]... [--context UUID]... [--any-context]
                     [--plan NAME] [--rate N] [--per DURATION] [--burst N] [--quota ...] [--until ...] [--clear-override]
                     [--permissions OP,...|default] [--allow-cidr CIDR]... [--clear-allow-cidr]
  keygate consumers delete --config FILE ID           (refused while it has active keys)
  keygate admin-tokens create --config FILE --name TEXT --scopes SCOPE,... [--expires-in 90d]
                     scopes: keys:read keys:write consumers:read consumers:write usage:read audit:read
  keygate admin-tokens list --config FILE [--json]
  keygate admin-tokens revoke --config FILE ID
  keygate audit --config FILE [--since DURATION] [--json] [--limit N] [--actor ID] [--target ID]
                     the audit log, oldest first (--limit 0: all)
  keygate keys check-format STRING|-          is it a well-formed API key or admin token (prefix, length, checksum)?
  keygate keys usage --config FILE ID [--json] [--since DURATION]        counts (up to 168h) and quota left
  keygate consumers usage --config FILE ID [--json] [--since DURATION]   the same, summed over its keys
  keygate migration --config FILE [--since 30d] [--consumer ID] [--json]   who has moved from keys to tokens, per consumer and key
  keygate token-keys rotate --config FILE [--now]       new token signing key (--now: refuse the old keys' tokens)
  keygate token-keys list --config FILE [--json]        token signing keys: kid, alg, created, retiring
  keygate demo [--config FILE]               serve with stand-in backends and a demo key (make run)
  keygate standin --listen ADDR --name NAME  run a stand-in backend that echoes what it receives
  keygate version
`

// Main runs one command and returns its exit code: 0 on success, 1 on
// failure, 2 on bad usage.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:], stderr)
	case "keys":
		err = keys(args[1:], stdout, stderr)
	case "consumers":
		err = consumers(args[1:], stdout, stderr)
	case "admin-tokens":
		err = adminTokens(args[1:], stdout, stderr)
	case "audit":
		err = auditCmd(args[1:], stdout, stderr)
	case "migration":
		err = migrationCmd(args[1:], stdout, stderr)
	case "token-keys":
		err = tokenKeys(args[1:], stdout, stderr)
	case "demo":
		err = demo(args[1:], stdout, stderr)
	case "standin":
		err = runStandin(args[1:], stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "keygate", version())
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "keygate: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), errors.Is(err, flag.ErrHelp):
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "keygate:", err)
		}
		return 2
	default:
		fmt.Fprintln(stderr, "keygate:", err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// loadConfig reads the file, or the embedded defaults when path is empty.
func loadConfig(path string) (config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

// newLogger returns the process logger and a function that flushes it
// for good (see logbuf.go for what is buffered). With access not nil, the
// access log's request lines go there instead of w (the demo's
// data/access.log); its warnings still go to w.
func newLogger(c config.LogConfig, w, access io.Writer) (*zap.Logger, func(), error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, nil, err
	}
	encCfg := logline.EncoderConfig()
	var enc zapcore.Encoder
	if c.Format == "console" {
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	// Every line is redacted (API keys, bearer tokens, JWTs) before it is
	// encoded, so no call site can log a credential; access lines are
	// buffered (see logbuf.go).
	ws, stop := bufferedSink(w)
	var inner zapcore.Core = flushCore{Core: zapcore.NewCore(enc, ws, lvl), ws: ws}
	if access != nil {
		aws, astop := bufferedSink(access)
		inner = accessSplit{rest: inner, access: flushCore{Core: zapcore.NewCore(enc.Clone(), aws, lvl), ws: aws}}
		stopRest := stop
		stop = func() { stopRest(); astop() }
	}
	core := redact.Core(inner)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), stop, nil
}

// redisLogger adapts zap to go-redis's logging interface.
type redisLogger struct{ l *zap.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Warn(fmt.Sprintf(format, v...))
}

// configFlag parses a command that takes only --config and loads it.
func configFlag(name string, args []string, stderr io.Writer) (config.Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML); embedded defaults when empty")
	if err := fs.Parse(args); err != nil {
		return config.Config{}, err
	}
	return loadConfig(*cfgPath)
}

func serve(args []string, stderr io.Writer) error {
	cfg, err := configFlag("serve", args, stderr)
	if err != nil {
		return err
	}
	return run(cfg, stderr)
}

func run(cfg config.Config, stderr io.Writer) error { return runWith(cfg, stderr, nil, nil) }

// runWith is run with the access log's request lines sent to access
// (when not nil) and a change to the server's dependencies (the demo's
// portal sign-in).
func runWith(cfg config.Config, stderr, access io.Writer, mod func(*server.Deps)) error {
	log, stopLog, err := newLogger(cfg.Log, stderr, access)
	if err != nil {
		return err
	}
	defer stopLog()
	// go-redis logs through a process-wide logger; send it to zap, sampled
	// to one line per message per second so an outage cannot flood stderr.
	redis.SetLogger(redisLogger{log.Named("redis").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 1, 0)
	}))})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := setMemoryLimit(ctx, log); err != nil {
		return err
	}
	if err := setGCFloor(ctx, log); err != nil {
		return err
	}
	deps := server.Deps{Logger: log, Getenv: os.Getenv, Version: Version}
	if mod != nil {
		mod(&deps)
	}
	return server.Run(ctx, cfg, deps)
}
