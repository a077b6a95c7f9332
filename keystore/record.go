package keystore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keygate/keygate/policy"
)

// Status is the state of a key. Active, Revoked and Rotated are stored;
// Expired is only ever derived by Record.StateAt.
type Status string

const (
	// Active keys are accepted (until their ExpiresAt, if any).
	Active Status = "active"
	// Revoked keys are refused.
	Revoked Status = "revoked"
	// Rotated keys were replaced by another key and are accepted until the
	// grace period (their ExpiresAt) ends.
	Rotated Status = "rotated"
	// Expired is derived: the key is past its ExpiresAt, or was rotated and
	// its grace period has ended. It is never stored.
	Expired Status = "expired"
)

// Errors of the admin operations, for errors.Is.
var (
	// ErrNotFound means no record has the id.
	ErrNotFound = errors.New("keystore: no key with that id")
	// ErrRevoked means the key is already revoked.
	ErrRevoked = errors.New("keystore: key is revoked")
	// ErrRotated means the key was already rotated; rotate its replacement
	// instead.
	ErrRotated = errors.New("keystore: key was already rotated")
	// ErrExpired means the key has expired and can no longer be rotated;
	// issue a new one.
	ErrExpired = errors.New("keystore: key has expired")
)

// Record is what a store knows about one key. It never holds the key, only
// its Hash. A Record is a plain value: safe to copy and to share read-only.
type Record struct {
	// ID is the public id of the key ("key_" and 16 hex digits); it is safe
	// to log and to send upstream.
	ID string `yaml:"id" json:"id"`
	// Name is a human label, such as the team or application.
	Name string `yaml:"name,omitempty" json:"name"`
	// Hash is the SHA-256 of the key. It is kept out of JSON so that list
	// output never shows it.
	Hash Hash `yaml:"hash" json:"-"`
	// Product is what the key opens.
	Product Product `yaml:"product" json:"product"`
	// Env is the environment named by the key's prefix.
	Env Env `yaml:"env" json:"env"`
	// Context is the UUID of the processing configuration the key is bound
	// to, in lower case. Required for extraction keys; optional for registry
	// keys.
	Context string `yaml:"context,omitempty" json:"context"`
	// CreatedAt is when the key was issued.
	CreatedAt time.Time `yaml:"created_at" json:"created_at"`
	// ExpiresAt is when the key stops working; zero means never.
	ExpiresAt time.Time `yaml:"expires_at,omitempty" json:"expires_at,omitzero"`
	// Status is the stored status: active, revoked or rotated.
	Status Status `yaml:"status" json:"status"`
	// RevokedAt is when the key was revoked; zero unless it was.
	RevokedAt time.Time `yaml:"revoked_at,omitempty" json:"revoked_at,omitzero"`
	// ReplacedBy is the id of the key that replaced this one by rotation.
	ReplacedBy string `yaml:"replaced_by,omitempty" json:"replaced_by,omitempty"`
	// Consumer is the id of the consumer that owns the key; "" for none.
	Consumer string `yaml:"consumer,omitempty" json:"consumer,omitempty"`
	// Plan names an entry of ratelimit.plans; "" means none of its own.
	Plan string `yaml:"plan,omitempty" json:"plan,omitempty"`
	// Override replaces some fields of the key's limit, possibly until a
	// time; nil for none.
	Override *policy.Override `yaml:"override,omitempty" json:"override,omitempty"`
	// Permissions are the operations the key may perform (see
	// policy.Operations); nil means every operation of its product.
	Permissions []string `yaml:"permissions,omitempty" json:"permissions,omitempty"`
	// AllowedCIDRs are the client addresses the key may be used from, in
	// canonical form (policy.NormalizeCIDRs); empty means any.
	AllowedCIDRs []string `yaml:"allowed_cidrs,omitempty" json:"allowed_cidrs,omitempty"`

	// Leak is where a secret scanner found the key in public, and what
	// was done about it; nil if it never was (package secretscan).
	Leak *Leak `yaml:"leak,omitempty" json:"leak,omitempty"`

	// Limits is the key's effective limit, resolved by the store that
	// serves the record (when it was given a policy.Resolver) from the
	// key's and its consumer's plan and override. It is never stored; nil
	// means the env default.
	Limits *policy.Effective `yaml:"-" json:"-"`
}

// Leak is a report that a key was found in public.
type Leak struct {
	// URL and Source say where it was found (a commit's URL; content,
	// commit, gist, …).
	URL    string `yaml:"url" json:"url"`
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
	// FoundAt is when the report arrived.
	FoundAt time.Time `yaml:"found_at" json:"found_at"`
	// Action is what was done: revoke, quarantine or notify.
	Action string `yaml:"action" json:"action"`
}

// StateAt is the effective status of the key at now: Active, Revoked or
// Expired. A key past its ExpiresAt is Expired; a rotated key is Active
// during its grace period and Expired after it. An unknown stored status
// counts as Revoked, so that a damaged record refuses rather than admits.
func (r Record) StateAt(now time.Time) Status {
	switch r.Status {
	case Active:
	case Rotated:
		if r.ExpiresAt.IsZero() {
			return Expired // a rotation always sets the end of grace
		}
	default:
		return Revoked
	}
	if !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt) {
		return Expired
	}
	return Active
}

// RecordView is a Record as `keygate keys list --json` shows it: without the
// hash, and with the effective status at the time of listing.
type RecordView struct {
	ID      string  `json:"id"`
	Name    string  `json:"name"`
	Product Product `json:"product"`
	Env     Env     `json:"env"`
	// Context is "" for a registry key bound to no context.
	Context string `json:"context"`
	// Status is the effective status: active, revoked or expired.
	Status Status `json:"status"`
	// StoredStatus is the stored status: active, revoked or rotated.
	StoredStatus Status    `json:"stored_status"`
	CreatedAt    time.Time `json:"created_at"`
	// ExpiresAt is null when the key never expires, otherwise RFC 3339.
	ExpiresAt *time.Time `json:"expires_at"`
	// RevokedAt is left out unless the key was revoked.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// ReplacedBy is left out unless the key was rotated.
	ReplacedBy string `json:"replaced_by,omitempty"`
	// Consumer, Plan and Override are left out when not set.
	Consumer string           `json:"consumer,omitempty"`
	Plan     string           `json:"plan,omitempty"`
	Override *policy.Override `json:"override,omitempty"`
	// Permissions and AllowedCIDRs are the key's own (nil: every
	// operation of its product, any address).
	Permissions  []string `json:"permissions,omitempty"`
	AllowedCIDRs []string `json:"allowed_cidrs,omitempty"`
	// Leak is left out unless the key was found in public.
	Leak *Leak `json:"leak,omitempty"`
}

// View returns the record as list output shows it at now.
func (r Record) View(now time.Time) RecordView {
	v := RecordView{
		ID:           r.ID,
		Name:         r.Name,
		Product:      r.Product,
		Env:          r.Env,
		Context:      r.Context,
		Status:       r.StateAt(now),
		StoredStatus: r.Status,
		CreatedAt:    r.CreatedAt,
		ReplacedBy:   r.ReplacedBy,
		Consumer:     r.Consumer,
		Plan:         r.Plan,
		Override:     r.Override,
		Permissions:  r.Permissions,
		AllowedCIDRs: r.AllowedCIDRs,
		Leak:         r.Leak,
	}
	if !r.ExpiresAt.IsZero() {
		t := r.ExpiresAt
		v.ExpiresAt = &t
	}
	if !r.RevokedAt.IsZero() {
		t := r.RevokedAt
		v.RevokedAt = &t
	}
	return v
}

// NewID returns a new public key id: "key_" and 16 hex digits from
// crypto/rand.
func NewID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("keystore: new id: %w", err)
	}
	return "key_" + hex.EncodeToString(b[:]), nil
}

// IssueRequest asks for a new key.
type IssueRequest struct {
	// Product is what the key opens.
	Product Product
	// Env selects the key prefix.
	Env Env
	// Context is the processing configuration UUID: required for extraction
	// keys, optional for registry keys. It is stored in lower case.
	Context string
	// Name is a human label; optional.
	Name string
	// ExpiresIn is the lifetime of the key; zero means it never expires.
	ExpiresIn time.Duration
	// Consumer is the id of the consumer that owns the key; optional. The
	// store checks that it exists and allows the context.
	Consumer string
	// Permissions and AllowedCIDRs are the record's; nil means every
	// operation of the product, from any address. They are set at issue,
	// so a restricted key is never briefly unrestricted.
	Permissions  []string
	AllowedCIDRs []string
}

// maxNameLen bounds Record.Name.
const maxNameLen = 200

// Validate checks the request; its messages name the offending field.
func (r IssueRequest) Validate() error {
	if !r.Product.Valid() {
		return fmt.Errorf("product: must be %s or %s, got %q", Extraction, Registry, r.Product)
	}
	if !r.Env.Valid() {
		return fmt.Errorf("env: must be %s or %s, got %q", Live, Test, r.Env)
	}
	if err := checkContext(r.Product, r.Context); err != nil {
		return fmt.Errorf("context: %w", err)
	}
	if err := checkName(r.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if r.ExpiresIn < 0 {
		return fmt.Errorf("expires_in: must not be negative, got %s", r.ExpiresIn)
	}
	if r.Consumer != "" && !ValidConsumerID(r.Consumer) {
		return fmt.Errorf("consumer: must be a consumer id (con_...), got %q", r.Consumer)
	}
	return checkAccess(r.Permissions, r.AllowedCIDRs)
}

func checkContext(p Product, ctx string) error {
	if ctx == "" {
		if p == Extraction {
			return errors.New("required for extraction keys")
		}
		return nil
	}
	if !isUUID(ctx) {
		return fmt.Errorf("must be a UUID, got %q", ctx)
	}
	return nil
}

func checkName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("must be at most %d bytes long", maxNameLen)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

// isUUID reports whether s has the 8-4-4-4-12 hex digit form of a UUID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// ValidateRecord checks one record on its own: id, hash, product, env,
// context, name, stored status and the fields the status requires.
func ValidateRecord(r Record) error {
	switch {
	case !validID(r.ID):
		return fmt.Errorf("id: must be 1 to 64 characters of [0-9A-Za-z_-], got %q", r.ID)
	case r.Hash.IsZero():
		return errors.New("hash: required")
	case !r.Product.Valid():
		return fmt.Errorf("product: must be %s or %s, got %q", Extraction, Registry, r.Product)
	case !r.Env.Valid():
		return fmt.Errorf("env: must be %s or %s, got %q", Live, Test, r.Env)
	}
	if err := checkContext(r.Product, r.Context); err != nil {
		return fmt.Errorf("context: %w", err)
	}
	if err := checkName(r.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	switch r.Status {
	case Active, Revoked:
	case Rotated:
		if r.ExpiresAt.IsZero() {
			return errors.New("expires_at: required for a rotated key (the end of its grace period)")
		}
	case Expired:
		return errors.New("status: expired is derived, not stored; use active, revoked or rotated")
	default:
		return fmt.Errorf("status: must be active, revoked or rotated, got %q", r.Status)
	}
	if r.ReplacedBy != "" && !validID(r.ReplacedBy) {
		return fmt.Errorf("replaced_by: must be a key id, got %q", r.ReplacedBy)
	}
	if r.Consumer != "" && !ValidConsumerID(r.Consumer) {
		return fmt.Errorf("consumer: must be a consumer id (con_...), got %q", r.Consumer)
	}
	if err := checkAccess(r.Permissions, r.AllowedCIDRs); err != nil {
		return err
	}
	return checkPlanOverride(r.Plan, r.Override)
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isBase62(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidateRecords checks every record and that no two share an id or a
// hash. The error names the entry, as in `keys[3]: duplicate id key_...`.
func ValidateRecords(recs []Record) error {
	ids := make(map[string]int, len(recs))
	hashes := make(map[Hash]int, len(recs))
	for i, r := range recs {
		if err := ValidateRecord(r); err != nil {
			return fmt.Errorf("keys[%d]: %w", i, err)
		}
		if j, dup := ids[r.ID]; dup {
			return fmt.Errorf("keys[%d]: duplicate id %s (also keys[%d])", i, r.ID, j)
		}
		if j, dup := hashes[r.Hash]; dup {
			return fmt.Errorf("keys[%d]: duplicate hash (also keys[%d])", i, j)
		}
		ids[r.ID] = i
		hashes[r.Hash] = i
	}
	return nil
}

// NewRecord generates a key for req and the record that describes it, with
// CreatedAt now (UTC, whole seconds) and the context in lower case. It does
// not check that the id is unused; the caller does.
func NewRecord(req IssueRequest, now time.Time) (key string, rec Record, err error) {
	if err := req.Validate(); err != nil {
		return "", Record{}, err
	}
	key, err = Generate(req.Env)
	if err != nil {
		return "", Record{}, err
	}
	id, err := NewID()
	if err != nil {
		return "", Record{}, err
	}
	now = stamp(now)
	rec = Record{
		ID:        id,
		Name:      req.Name,
		Hash:      HashKey(key),
		Product:   req.Product,
		Env:       req.Env,
		Context:   strings.ToLower(req.Context),
		CreatedAt: now,
		Status:    Active,
		Consumer:  req.Consumer,

		Permissions:  req.Permissions,
		AllowedCIDRs: req.AllowedCIDRs,
	}
	if req.ExpiresIn > 0 {
		rec.ExpiresAt = now.Add(req.ExpiresIn)
	}
	return key, rec, nil
}

// stamp is how times are stored: UTC, whole seconds, no monotonic reading.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// RevokeRecord returns r revoked at now. Revoking a revoked key is
// ErrRevoked; a rotated key in its grace period, or an expired key, may be
// revoked.
func RevokeRecord(r Record, now time.Time) (Record, error) {
	if r.Status == Revoked {
		return r, fmt.Errorf("revoke %s: %w", r.ID, ErrRevoked)
	}
	r.Status = Revoked
	r.RevokedAt = stamp(now)
	return r, nil
}

// RotateRecord replaces old by a new key with the same product, env,
// context, name, consumer, plan, override, permissions and allowed_cidrs. It returns the new key, old as it is after rotation, and
// the replacement's record.
//
// With grace > 0 old becomes Rotated and expires at now+grace, rounded up
// to the second (or at its
// own ExpiresAt, if sooner), so it keeps working until then; with grace == 0
// it is revoked at once. If old had a lifetime (ExpiresAt), the replacement
// gets the same lifetime counted from now; otherwise it never expires.
// Rotating a revoked key is ErrRevoked, an already rotated key ErrRotated,
// and an expired key ErrExpired.
func RotateRecord(old Record, now time.Time, grace time.Duration) (key string, oldAfter, replacement Record, err error) {
	if grace < 0 {
		return "", old, Record{}, fmt.Errorf("grace: must not be negative, got %s", grace)
	}
	switch {
	case old.Status == Revoked:
		return "", old, Record{}, fmt.Errorf("rotate %s: %w", old.ID, ErrRevoked)
	case old.Status == Rotated:
		return "", old, Record{}, fmt.Errorf("rotate %s: %w (replaced by %s)", old.ID, ErrRotated, old.ReplacedBy)
	case old.StateAt(now) != Active:
		return "", old, Record{}, fmt.Errorf("rotate %s: %w", old.ID, ErrExpired)
	}
	req := IssueRequest{Product: old.Product, Env: old.Env, Context: old.Context, Name: old.Name, Consumer: old.Consumer,
		Permissions: old.Permissions, AllowedCIDRs: old.AllowedCIDRs}
	if !old.ExpiresAt.IsZero() && old.ExpiresAt.After(old.CreatedAt) {
		req.ExpiresIn = old.ExpiresAt.Sub(old.CreatedAt)
	}
	key, replacement, err = NewRecord(req, now)
	if err != nil {
		return "", old, Record{}, fmt.Errorf("rotate %s: %w", old.ID, err)
	}
	replacement.Plan, replacement.Override = old.Plan, old.Override
	// Times are stored to the second; the grace period ends at the next
	// whole second, so that the old key works for at least grace.
	end := stamp(now.Add(grace).Add(time.Second - time.Nanosecond))
	now = stamp(now)
	oldAfter = old
	oldAfter.ReplacedBy = replacement.ID
	if grace == 0 {
		oldAfter.Status = Revoked
		oldAfter.RevokedAt = now
	} else {
		oldAfter.Status = Rotated
		if oldAfter.ExpiresAt.IsZero() || end.Before(oldAfter.ExpiresAt) {
			oldAfter.ExpiresAt = end
		}
	}
	return key, oldAfter, replacement, nil
}
