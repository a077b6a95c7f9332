// Package keyops is the one implementation of key and consumer management:
// issue, list, show, update, revoke and rotate keys; create, list, show,
// update and delete consumers; and explain a key's effective rate limit.
// `keygate keys` and `keygate consumers` call it, and the admin API and a
// self-service portal are to call it too, so that every way of changing
// keys applies the same rules (plan names checked against the
// configuration, a consumer's allowed contexts, no deleting a consumer
// that has active keys) and reports every change to the same Auditor.
//
// keyops keeps no state of its own: it works on a Store (the file or
// Redis keystore's admin, from package keystore), which makes each change
// atomic and announces it to the running gateways.
package keyops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// Store is what keyops needs from a keystore backend's admin:
// keystore.FileAdmin and keystore.RedisAdmin. Each method is one atomic
// change, or one consistent read. The reads by id, hash and filter and
// the count are what spare a large Redis keystore a read of every
// record; the file keystore serves them by a read of the file.
type Store interface {
	Issue(ctx context.Context, req keystore.IssueRequest) (string, keystore.Record, error)
	Revoke(ctx context.Context, id string) (keystore.Record, error)
	Rotate(ctx context.Context, id string, grace time.Duration) (string, keystore.Record, error)
	UpdateKey(ctx context.Context, id string, f func(keystore.Record) (keystore.Record, error)) (keystore.Record, error)
	Purge(ctx context.Context, q keystore.PurgeQuery, each func([]keystore.Record) error) (more bool, err error)

	// List returns every record, oldest first.
	List(ctx context.Context) ([]keystore.Record, error)
	// ListMatching returns the records keep accepts, oldest first,
	// holding only those it keeps.
	ListMatching(ctx context.Context, keep func(keystore.Record) bool) ([]keystore.Record, error)
	// Get returns the record of the key with id, or an error wrapping
	// keystore.ErrNotFound.
	Get(ctx context.Context, id string) (keystore.Record, error)
	// GetHashes returns the records of the keys whose hashes are hs,
	// oldest first, leaving out a hash with no record.
	GetHashes(ctx context.Context, hs []keystore.Hash) ([]keystore.Record, error)
	// Count returns how many key records the store holds.
	Count(ctx context.Context) (int, error)

	CreateConsumer(ctx context.Context, c keystore.Consumer) error
	UpdateConsumer(ctx context.Context, id string, f func(keystore.Consumer) (keystore.Consumer, error)) (keystore.Consumer, error)
	DeleteConsumer(ctx context.Context, id string) (keystore.Consumer, error)
	// ListConsumers returns every consumer, oldest first.
	ListConsumers(ctx context.Context) ([]keystore.Consumer, error)
	// GetConsumer returns the consumer with id, or an error wrapping
	// keystore.ErrConsumerNotFound.
	GetConsumer(ctx context.Context, id string) (keystore.Consumer, error)
	// GetConsumers returns the consumers with ids that the store holds,
	// in the order of ids.
	GetConsumers(ctx context.Context, ids []string) ([]keystore.Consumer, error)
}

var (
	_ Store = (*keystore.FileAdmin)(nil)
	_ Store = (*keystore.RedisAdmin)(nil)
)

// Actor is who makes a change and from where, for the audit log.
type Actor struct {
	// ID names who acts: "cli:<os user>", an admin token's id or a client
	// certificate's subject. Required for every write.
	ID string
	// Addr is the client's address for API calls; "" for the CLI.
	Addr string
}

// Event is one change (or refused change) as the Auditor receives it. It
// never holds a key, a hash or a token.
type Event struct {
	Time  time.Time
	Actor Actor
	// Action is "key.issue", "key.update", "key.revoke", "key.rotate",
	// "consumer.create", "consumer.update" or "consumer.delete".
	Action string
	// Target is the id of the key or consumer acted on ("" when a create
	// failed before one was made).
	Target string
	// Changes are the fields set, with their new values in text form.
	// Clearing a field sets it to "".
	Changes map[string]string
	// Err is nil when the change was made.
	Err error
}

// Outcome is "ok" or "error".
func (e Event) Outcome() string {
	if e.Err != nil {
		return "error"
	}
	return "ok"
}

// Auditor receives every change after it was attempted. An audit log
// plugs in here; it must be safe for concurrent use. An error fails the
// call that made the change (which has been made by then): an audit log
// that must not lose events says so.
type Auditor interface {
	Audit(ctx context.Context, e Event) error
}

// NopAuditor records nothing; it is the default.
type NopAuditor struct{}

// Audit does nothing.
func (NopAuditor) Audit(context.Context, Event) error { return nil }

// Config configures a Service.
type Config struct {
	// Store is the keystore backend's admin. Required.
	Store Store
	// Limits resolves and explains limits; plan names are checked
	// against it. Required.
	Limits *policy.Resolver
	// Auditor receives every change; nil means NopAuditor.
	Auditor Auditor
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Usage reads per-key usage; nil means KeyUsage, the series and the
	// migration report fail with ErrNoUsage.
	Usage UsageReader
	// Quota reads a bucket's quota use (Redis rate limiter); nil means
	// quotas are per replica.
	Quota QuotaReader
	// ConsumerKeys (a Redis keystore replica's index) finds a consumer's keys for the lists by consumer
	// (the portal's pages, consumer show and usage) instead of reading
	// every record; nil reads every record.
	ConsumerKeys ConsumerKeys
	// KeysPage (a replica's index) finds a page of
	// the key list (ListKeysPage: the admin API's GET /v1/keys) instead
	// of reading every record; nil reads every record.
	KeysPage KeysPage
	// ConsumersPage (a replica's copy of the consumers) finds a page
	// of the consumer list (ListConsumersPage: the admin API's GET
	// /v1/consumers) instead of reading every consumer; nil reads every
	// consumer.
	ConsumersPage ConsumersPage
	// ConsumersWhere finds consumers by their fields (the portal's
	// sign-in, by a metadata entry) in a replica's copy instead of
	// reading every consumer; nil reads every consumer.
	ConsumersWhere ConsumersWhere
}

// Service manages keys and consumers. It is safe for concurrent use as
// far as its Store is (both keystore admins are, also across processes).
type Service struct {
	store   Store
	limits  *policy.Resolver
	auditor Auditor
	now     func() time.Time

	usage             UsageReader
	quotaReader       QuotaReader
	findConsumerKeys  ConsumerKeys
	findPage          KeysPage
	findConsumersPage ConsumersPage
	findConsumers     ConsumersWhere
	recent            recent[keystore.Hash]
	recentConsumers   recent[string]
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("keyops: a store is required")
	}
	if cfg.Limits == nil {
		return nil, errors.New("keyops: a limit resolver is required")
	}
	if cfg.Auditor == nil {
		cfg.Auditor = NopAuditor{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: cfg.Store, limits: cfg.Limits, auditor: cfg.Auditor, now: cfg.Now, usage: cfg.Usage, quotaReader: cfg.Quota, findConsumerKeys: cfg.ConsumerKeys, findPage: cfg.KeysPage, findConsumersPage: cfg.ConsumersPage, findConsumers: cfg.ConsumersWhere}, nil
}

// ErrInvalid wraps errors in what the caller asked for (a bad flag or
// field), as opposed to a failure of the store. The CLI exits 2 and the
// admin API answers 400 for it.
var ErrInvalid = errors.New("keyops: invalid request")

// invalidError is an error in the request; its text is the cause's.
type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

func invalid(format string, args ...any) error {
	return invalidError{fmt.Errorf(format, args...)}
}

// asInvalid marks err as an error in the request.
func asInvalid(err error) error { return invalidError{err} }

// audit reports e (stamped now) and returns err, or the auditor's error.
func (s *Service) audit(ctx context.Context, a Actor, action, target string, changes map[string]string, err error) error {
	aerr := s.auditor.Audit(ctx, Event{Time: s.now().UTC(), Actor: a, Action: action, Target: target, Changes: changes, Err: err})
	if err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("keyops: %s %s was made but not audited: %w", action, target, aerr)
	}
	return nil
}

func checkActor(a Actor) error {
	if a.ID == "" {
		return invalid("an actor is required for every change")
	}
	return nil
}
