// Package audit is keygate's audit log: every change to keys, consumers
// and admin tokens, from the CLI or the admin API, with who made it, from
// where, what changed and whether it worked.
//
// Log implements keyops.Auditor. It appends each event as one JSON line
// to a file (audit.file; default audit.jsonl next to keystore.file, mode
// 0600, fsync per event) and, with the Redis keystore, to a capped Redis
// stream <redis.key_prefix>audit:events (XADD MAXLEN ~ audit.redis_max_len).
// The file is per machine; the stream is what every machine shares, so
// with Redis the Reader reads the stream and otherwise the file.
//
// No event holds a key, a hash or a token: every text field is scrubbed
// with package redact (API keys, admin tokens, bearer tokens, JWTs) and
// of "sha256:<hex>" hashes, and a changed field named like a secret
// (key, hash, token, secret, password) is masked whatever its value.
//
// For the admin API:
//
//	log, err := audit.Open(cfg.AuditConfig(redisClientOrNil)) // package config
//	defer log.Close()
//	ops, _ := keyops.New(keyops.Config{..., Auditor: log})
//	events, next, err := log.Events(ctx, audit.Query{Since: t, Actor: "tok_…", Cursor: c, Limit: 50})
package audit

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/redact"
)

// Config configures a Log. File and RedisMaxLen are the audit section of
// keygate's configuration file.
type Config struct {
	// File is the JSON-lines audit file; required. keygate's config
	// defaults it to audit.jsonl in the directory of keystore.file. "none"
	// writes no file, only the Redis stream (Redis is then required): for
	// replicas whose filesystem is read-only or ephemeral.
	File string `yaml:"file"`
	// RedisMaxLen caps the Redis stream, approximately (MAXLEN ~): older
	// events are trimmed. Default 100000.
	RedisMaxLen int64 `yaml:"redis_max_len"`

	// Redis, when set (the Redis keystore), receives every event on the
	// stream too, and Events reads the stream.
	Redis redis.UniversalClient `yaml:"-"`
	// Prefix starts the stream's key (redis.key_prefix); default
	// "keygate:".
	Prefix string `yaml:"-"`
}

// DefaultRedisMaxLen is Config.RedisMaxLen by default.
const DefaultRedisMaxLen = 100000

// DefaultConfig returns the defaults: no file (the caller sets one) and
// a stream of about 100000 events.
func DefaultConfig() Config { return Config{RedisMaxLen: DefaultRedisMaxLen} }

// NoFile as Config.File turns the audit file off (Redis stream only).
const NoFile = "none"

// DefaultFile is the audit file beside a keystore file.
func DefaultFile(keystoreFile string) string {
	return filepath.Join(filepath.Dir(keystoreFile), "audit.jsonl")
}

// Validate checks the audit section.
func (c Config) Validate() error {
	if c.RedisMaxLen <= 0 {
		return fmt.Errorf("redis_max_len: must be positive, got %d", c.RedisMaxLen)
	}
	return nil
}

// StreamKey is the Redis stream of the audit log under prefix.
func StreamKey(prefix string) string {
	if prefix == "" {
		prefix = "keygate:"
	}
	return prefix + "audit:events"
}

// Event is one line of the audit log.
type Event struct {
	// ID is unique per event ("evt_…"); the same in the file and the
	// stream.
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	// Actor is "cli:<os user>", an admin token's id or a certificate
	// subject.
	Actor string `json:"actor"`
	// Source is the client address of an API call; "" for the CLI.
	Source string `json:"source,omitempty"`
	// Action is such as key.issue, consumer.update, admin_token.revoke.
	Action string `json:"action"`
	// Target is the id acted on; "" when a create failed early.
	Target string `json:"target,omitempty"`
	// Changes are the fields set, in text form (never a secret).
	Changes map[string]string `json:"changes,omitempty"`
	// Outcome is "ok" or "error".
	Outcome string `json:"outcome"`
	// Error is the error's text when Outcome is "error".
	Error string `json:"error,omitempty"`
}

// Log is the audit log: a keyops.Auditor and a Reader. It is safe for
// concurrent use; several processes may append to one file (each event
// is one O_APPEND write).
type Log struct {
	cfg  Config
	mu   sync.Mutex
	f    *os.File
	key  string
	once sync.Once
}

var (
	_ keyops.BatchAuditor = (*Log)(nil)
	_ Reader              = (*Log)(nil)
)

// Open checks cfg and returns its Log. The file is created (mode 0600,
// its directory 0700) with the first event.
func Open(cfg Config) (*Log, error) {
	if cfg.File == "" {
		return nil, errors.New("audit: Config.File: required")
	}
	if cfg.File == NoFile && cfg.Redis == nil {
		return nil, errors.New("audit: audit.file none needs the Redis keystore, whose stream is then the only audit log")
	}
	if cfg.RedisMaxLen == 0 {
		cfg.RedisMaxLen = DefaultRedisMaxLen
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Log{cfg: cfg, key: StreamKey(cfg.Prefix)}, nil
}

// openFile opens (creating it, mode 0600, and its directory, 0700) the
// audit file, on the first event: a command that changes nothing
// creates nothing. Called with l.mu held.
func (l *Log) openFile() error {
	if l.f != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(l.cfg.File), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(l.cfg.File, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := endLine(f); err != nil {
		f.Close()
		return err
	}
	l.f = f
	return nil
}

// endLine ends a torn last line (a writer that died mid-write), so that
// the next event starts a line of its own and stays readable.
func endLine(f *os.File) error {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], fi.Size()-1); err != nil {
		return err
	}
	if last[0] != '\n' {
		_, err = f.Write([]byte{'\n'})
	}
	return err
}

// Close closes the file. It is safe to call more than once.
func (l *Log) Close() error {
	var err error
	l.once.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.f != nil {
			err = l.f.Close()
		}
	})
	return err
}

// Audit appends e to the file (fsync'ed) and, with Redis, to the stream.
// An error means the event may be missing from one of them.
func (l *Log) Audit(ctx context.Context, e keyops.Event) error {
	return l.AuditAll(ctx, []keyops.Event{e})
}

// streamBatch is how many events one round trip of AuditAll adds to the
// stream.
const streamBatch = 1000

// AuditAll appends es in order, as Audit appends one: each event is one
// O_APPEND write of its line, and the file is fsync'ed once after the
// last (a purge of a thousand keys: one fsync, not a thousand); the
// stream gets them a pipeline of streamBatch XADDs at a time. An error
// means some of them may be missing from one of the two.
func (l *Log) AuditAll(ctx context.Context, es []keyops.Event) error {
	lines := make([][]byte, len(es))
	for i, e := range es {
		line, err := json.Marshal(FromKeyops(e))
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		lines[i] = line
	}
	var errs []error
	if l.cfg.File != NoFile {
		if err := l.appendFile(lines); err != nil {
			errs = append(errs, fmt.Errorf("audit: file: %w", err))
		}
	}
	if l.cfg.Redis != nil {
		for batch := range slices.Chunk(lines, streamBatch) {
			_, err := l.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, line := range batch {
					p.XAdd(ctx, &redis.XAddArgs{
						Stream: l.key, MaxLen: l.cfg.RedisMaxLen, Approx: true,
						Values: []string{"event", string(line)},
					})
				}
				return nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("audit: redis stream: %w", err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// appendFile writes each line with its newline in one write, then
// fsyncs.
func (l *Log) appendFile(lines [][]byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.openFile(); err != nil {
		return err
	}
	for _, line := range lines {
		if _, err := l.f.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	return l.f.Sync()
}

// FromKeyops turns a keyops event into an audit event, scrubbed of
// secrets, with a new ID.
func FromKeyops(e keyops.Event) Event {
	ev := Event{
		ID: newID(e.Time), Time: e.Time.UTC(), Actor: Scrub(e.Actor.ID), Source: Scrub(e.Actor.Addr),
		Action: Scrub(e.Action), Target: Scrub(e.Target), Outcome: e.Outcome(),
	}
	if e.Err != nil {
		ev.Error = Scrub(e.Err.Error())
	}
	if len(e.Changes) > 0 {
		ev.Changes = make(map[string]string, len(e.Changes))
		for k, v := range e.Changes {
			if secretName(k) {
				v = redact.Mask
			}
			ev.Changes[Scrub(k)] = Scrub(v)
		}
	}
	return ev
}

func newID(t time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "evt_" + strconv.FormatInt(t.UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// secretName reports whether a changed field's name says it holds a
// secret.
func secretName(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"key", "hash", "token", "secret", "password"} {
		if k == w || strings.HasSuffix(k, "."+w) || strings.HasSuffix(k, "_"+w) {
			return true
		}
	}
	return false
}

// Scrub returns s without credentials (see package redact) and without
// "sha256:<64 hex>" hashes.
func Scrub(s string) string {
	s = redact.String(s)
	for i := 0; ; {
		j := strings.Index(s[i:], "sha256:")
		if j < 0 {
			return s
		}
		st := i + j + len("sha256:")
		en := st
		for en < len(s) && isHex(s[en]) {
			en++
		}
		if en-st >= 16 { // a hash, or enough of one to matter
			s = s[:st] + redact.Mask + s[en:]
			en = st + len(redact.Mask)
		}
		i = en
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Query selects events. Zero fields select all.
type Query struct {
	// Since and Until bound the event time: Since <= time < Until.
	Since, Until time.Time
	// Actor and Target select events of one actor or one target id.
	Actor, Target string
	// Cursor continues a previous call: its nextCursor.
	Cursor string
	// Limit caps the events returned; 0 means 100, and at most 1000.
	Limit int
}

// Reader reads the audit log, newest event first, a page at a time.
type Reader interface {
	// Events returns up to q.Limit events matching q, newest first, and
	// the cursor of the next (older) page; "" when there is none. A
	// cursor that is not one of Events' wraps ErrInvalidCursor.
	Events(ctx context.Context, q Query) (events []Event, nextCursor string, err error)
}

// ErrInvalidCursor is wrapped by Events for a cursor it did not make
// (the admin API answers 400).
var ErrInvalidCursor = errors.New("audit: invalid cursor")

// MaxLimit is the most events one Events call returns.
const MaxLimit = 1000

func (q Query) limit() int {
	switch {
	case q.Limit <= 0:
		return 100
	case q.Limit > MaxLimit:
		return MaxLimit
	}
	return q.Limit
}

func (q Query) match(e Event) bool {
	return (q.Since.IsZero() || !e.Time.Before(q.Since)) && (q.Until.IsZero() || e.Time.Before(q.Until)) &&
		(q.Actor == "" || e.Actor == q.Actor) && (q.Target == "" || e.Target == q.Target)
}

// Events reads the stream with Redis, the file otherwise.
func (l *Log) Events(ctx context.Context, q Query) ([]Event, string, error) {
	if l.cfg.Redis != nil {
		return StreamEvents(ctx, l.cfg.Redis, l.key, q)
	}
	return FileEvents(ctx, l.cfg.File, q)
}

// FileEvents reads the audit file at path. It scans the whole file
// (older than the cursor) at each call: the file is the single-machine
// log; a large installation uses the Redis stream. A line that does not
// parse (a torn last line) is skipped.
func FileEvents(ctx context.Context, path string, q Query) ([]Event, string, error) {
	end := int64(-1)
	if q.Cursor != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(q.Cursor, "f"), 10, 64)
		if !strings.HasPrefix(q.Cursor, "f") || err != nil || n < 0 {
			return nil, "", ErrInvalidCursor
		}
		end = n
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return []Event{}, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	type hit struct {
		off int64
		ev  Event
	}
	limit := q.limit()
	var hits []hit
	more := false
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for n := 0; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		line, err := r.ReadBytes('\n')
		start := off
		off += int64(len(line))
		if end >= 0 && start >= end {
			break
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var ev Event
			if json.Unmarshal(line, &ev) == nil && q.match(ev) {
				hits = append(hits, hit{start, ev})
				if len(hits) > limit {
					hits = hits[1:]
					more = true
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("audit: %w", err)
		}
	}
	out := make([]Event, 0, len(hits))
	for i := len(hits) - 1; i >= 0; i-- {
		out = append(out, hits[i].ev)
	}
	next := ""
	if more && len(hits) > 0 {
		next = "f" + strconv.FormatInt(hits[0].off, 10)
	}
	return out, next, nil
}

// StreamEvents reads the audit stream key with XREVRANGE.
func StreamEvents(ctx context.Context, c redis.UniversalClient, key string, q Query) ([]Event, string, error) {
	// Stream ids are Redis's clock at XADD, event times the writer's: the
	// ids bound the scan with a margin for skew, the times select.
	hi, lo := "+", "-"
	if !q.Until.IsZero() {
		hi = "(" + strconv.FormatInt(q.Until.Add(clockSkew).UnixMilli(), 10) + "-0"
	}
	if q.Cursor != "" {
		id, ok := strings.CutPrefix(q.Cursor, "s")
		if !ok || !validStreamID(id) {
			return nil, "", ErrInvalidCursor
		}
		hi = "(" + id
	}
	if !q.Since.IsZero() && q.Since.Add(-clockSkew).UnixMilli() > 0 {
		lo = strconv.FormatInt(q.Since.Add(-clockSkew).UnixMilli(), 10) + "-0"
	}
	limit := q.limit()
	batch := int64(limit + 1)
	if batch < 100 {
		batch = 100
	}
	out := make([]Event, 0, limit)
	var lastID string
	for {
		msgs, err := c.XRevRangeN(ctx, key, hi, lo, batch).Result()
		if err != nil {
			return nil, "", fmt.Errorf("audit: %w", err)
		}
		for _, m := range msgs {
			var ev Event
			s, _ := m.Values["event"].(string)
			if json.Unmarshal([]byte(s), &ev) != nil || !q.match(ev) {
				hi = "(" + m.ID
				continue
			}
			if len(out) == limit {
				return out, "s" + lastID, nil
			}
			out = append(out, ev)
			lastID = m.ID
			hi = "(" + m.ID
		}
		if int64(len(msgs)) < batch {
			return out, "", nil
		}
	}
}

// clockSkew is how far the clocks of Redis and of a writer are assumed
// to differ at most.
const clockSkew = time.Hour

func validStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}

// File is the audit file's path, or NoFile.
func (l *Log) File() string { return l.cfg.File }
