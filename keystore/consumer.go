package keystore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/keygate/keygate/policy"
)

// Errors of the consumer operations, for errors.Is.
var (
	// ErrConsumerNotFound means no consumer has the id.
	ErrConsumerNotFound = errors.New("keystore: no consumer with that id")
	// ErrConsumerInUse means the consumer still has active keys (delete)
	// or active keys outside the contexts it is being narrowed to.
	ErrConsumerInUse = errors.New("keystore: consumer has active keys")
	// ErrContextNotAllowed means a key's context is not among its
	// consumer's allowed contexts.
	ErrContextNotAllowed = errors.New("keystore: context not allowed for the consumer")
)

// Consumer is a customer team or application that owns keys. Keys name
// it by ID (Record.Consumer); its plan and override set the limits of
// its keys that set none of their own (see policy.Resolver). A
// Consumer is a plain value; its map and slices are not to be changed
// once it is shared.
type Consumer struct {
	// ID is "con_" and 16 hex digits; safe to log.
	ID string `yaml:"id" json:"id"`
	// Name is a human label, such as the customer's name.
	Name string `yaml:"name,omitempty" json:"name"`
	// Metadata is free-form labels (a CRM id, a contact); never secrets.
	Metadata map[string]string `yaml:"metadata,omitempty" json:"metadata,omitempty"`
	// Contexts, when not empty, are the only contexts (lower-case UUIDs)
	// the consumer's keys may be bound to.
	Contexts []string `yaml:"contexts,omitempty" json:"contexts,omitempty"`
	// AnyContext marks a consumer without Contexts whose keys may be
	// bound to any context in the self-service portal too. Without it,
	// the portal issues such a consumer no extraction key (an operator
	// still can). It is never set together with Contexts.
	AnyContext bool `yaml:"any_context,omitempty" json:"any_context,omitempty"`
	// Plan names an entry of ratelimit.plans; "" means the env default.
	Plan string `yaml:"plan,omitempty" json:"plan,omitempty"`
	// Override replaces some of the plan's fields, possibly until a time.
	Override *policy.Override `yaml:"override,omitempty" json:"override,omitempty"`
	// Permissions, when not nil, narrow the operations its keys may
	// perform (never widen them).
	Permissions []string `yaml:"permissions,omitempty" json:"permissions,omitempty"`
	// AllowedCIDRs are the client addresses its keys may be used from, in
	// canonical form; empty means any.
	AllowedCIDRs []string `yaml:"allowed_cidrs,omitempty" json:"allowed_cidrs,omitempty"`
	// CreatedAt and UpdatedAt are when it was created and last changed.
	CreatedAt time.Time `yaml:"created_at" json:"created_at"`
	UpdatedAt time.Time `yaml:"updated_at,omitempty" json:"updated_at,omitzero"`
}

// NewConsumerID returns a new consumer id: "con_" and 16 hex digits from
// crypto/rand.
func NewConsumerID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("keystore: new consumer id: %w", err)
	}
	return "con_" + hex.EncodeToString(b[:]), nil
}

// ValidConsumerID reports whether id has the shape of a consumer id.
func ValidConsumerID(id string) bool { return strings.HasPrefix(id, "con_") && validID(id) }

// Limits on consumer metadata, so that a record stays small.
const (
	maxMetadata    = 32
	maxMetadataKey = 64
	maxMetadataVal = 512
)

// ValidateConsumer checks one consumer; messages name the field.
func ValidateConsumer(c Consumer) error {
	if !ValidConsumerID(c.ID) {
		return fmt.Errorf("id: must be con_ and up to 60 characters of [0-9A-Za-z_-], got %q", c.ID)
	}
	if err := checkName(c.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if len(c.Metadata) > maxMetadata {
		return fmt.Errorf("metadata: at most %d entries", maxMetadata)
	}
	for k, v := range c.Metadata {
		if k == "" || len(k) > maxMetadataKey || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("metadata: key %q must be 1 to %d bytes without '='", k, maxMetadataKey)
		}
		if len(v) > maxMetadataVal {
			return fmt.Errorf("metadata.%s: at most %d bytes", k, maxMetadataVal)
		}
		if err := checkName(v); err != nil {
			return fmt.Errorf("metadata.%s: %w", k, err)
		}
	}
	for i, ctx := range c.Contexts {
		if !isUUID(ctx) || ctx != strings.ToLower(ctx) {
			return fmt.Errorf("contexts[%d]: must be a lower-case UUID, got %q", i, ctx)
		}
	}
	if err := checkPlanOverride(c.Plan, c.Override); err != nil {
		return err
	}
	return checkAccess(c.Permissions, c.AllowedCIDRs)
}

// maxAccessEntries bounds permissions and allowed_cidrs, so that a record
// stays small.
const maxAccessEntries = 64

// checkAccess checks the shape of permissions (product:name, no repeat)
// and allowed_cidrs (each a CIDR or address). That the operations are
// configured is checked where the configuration is known (keyops).
func checkAccess(perms, cidrs []string) error {
	if len(perms) > maxAccessEntries || len(cidrs) > maxAccessEntries {
		return fmt.Errorf("permissions, allowed_cidrs: at most %d entries each", maxAccessEntries)
	}
	seen := make(map[string]bool, len(perms))
	for i, p := range perms {
		if !policy.ValidOperationName(p) || seen[p] {
			return fmt.Errorf("permissions[%d]: must be an operation such as registry:read, each once, got %q", i, p)
		}
		seen[p] = true
	}
	_, err := policy.ParseCIDRs("allowed_cidrs", cidrs)
	return err
}

// checkPlanOverride checks the shape of a plan name and an override. That
// the plan is configured is checked where the configuration is known
// (package keyops): a store outlives config changes.
func checkPlanOverride(plan string, o *policy.Override) error {
	if plan != "" && !policy.ValidPlanName(plan) {
		return fmt.Errorf("plan: must be 1 to 63 characters of [a-z0-9_-], got %q", plan)
	}
	if o != nil {
		if err := o.Validate(); err != nil {
			return fmt.Errorf("override.%w", err)
		}
	}
	return nil
}

// ValidateConsumers checks every consumer and that no two share an id.
func ValidateConsumers(cons []Consumer) error {
	ids := make(map[string]int, len(cons))
	for i, c := range cons {
		if err := ValidateConsumer(c); err != nil {
			return fmt.Errorf("consumers[%d]: %w", i, err)
		}
		if j, dup := ids[c.ID]; dup {
			return fmt.Errorf("consumers[%d]: duplicate id %s (also consumers[%d])", i, c.ID, j)
		}
		ids[c.ID] = i
	}
	return nil
}

// NormalizeConsumer lower-cases, sorts and de-duplicates the contexts and
// drops an override that overrides nothing.
func NormalizeConsumer(c Consumer) Consumer {
	if len(c.Contexts) > 0 {
		ctxs := make([]string, len(c.Contexts))
		for i, x := range c.Contexts {
			ctxs[i] = strings.ToLower(x)
		}
		sort.Strings(ctxs)
		c.Contexts = slices.Compact(ctxs)
	}
	if c.Override != nil && c.Override.IsZero() {
		c.Override = nil
	}
	return c
}

// CheckKeyForConsumer checks that a key with context ctx may belong to c:
// when c lists contexts, ctx must be one of them (a key bound to no
// context, a registry key, is refused too).
func CheckKeyForConsumer(c Consumer, ctx string) error {
	if len(c.Contexts) == 0 {
		return nil
	}
	if slices.Contains(c.Contexts, strings.ToLower(ctx)) {
		return nil
	}
	if ctx == "" {
		return fmt.Errorf("%w: consumer %s allows only contexts %s; give the key one with --context", ErrContextNotAllowed, c.ID, strings.Join(c.Contexts, ", "))
	}
	return fmt.Errorf("%w: %s is not among consumer %s's contexts (%s)", ErrContextNotAllowed, ctx, c.ID, strings.Join(c.Contexts, ", "))
}

// CheckConsumerKeys checks that c, as it is about to be stored, fits its
// active keys among recs (at now): each must be bound to an allowed
// context. With deleting, any active key of c is an error.
func CheckConsumerKeys(c Consumer, recs []Record, now time.Time, deleting bool) error {
	var ids []string
	for _, r := range recs {
		if r.Consumer != c.ID || r.StateAt(now) != Active {
			continue
		}
		if deleting || CheckKeyForConsumer(c, r.Context) != nil {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if deleting {
		return fmt.Errorf("%w: %s has %d active keys (%s); revoke them first", ErrConsumerInUse, c.ID, len(ids), strings.Join(ids, ", "))
	}
	return fmt.Errorf("%w: active keys %s are bound to contexts outside %s; revoke them first", ErrConsumerInUse, strings.Join(ids, ", "), strings.Join(c.Contexts, ", "))
}

// findConsumer returns the index of the consumer with id, or -1.
func findConsumer(cons []Consumer, id string) int {
	for i, c := range cons {
		if c.ID == id {
			return i
		}
	}
	return -1
}

// updateConsumer runs f on old, keeps its id and creation time, and
// stamps UpdatedAt.
func updateConsumer(old Consumer, f func(Consumer) (Consumer, error), now time.Time) (Consumer, error) {
	c, err := f(old)
	if err != nil {
		return Consumer{}, err
	}
	if c.ID != old.ID {
		return Consumer{}, fmt.Errorf("update %s: the id of a consumer cannot change", old.ID)
	}
	c.CreatedAt = old.CreatedAt
	c.UpdatedAt = stamp(now)
	c = NormalizeConsumer(c)
	return c, ValidateConsumer(c)
}

// NewConsumer returns a consumer with a new id and CreatedAt now, from
// the fields of c other than its id and times.
func NewConsumer(c Consumer, now time.Time) (Consumer, error) {
	id, err := NewConsumerID()
	if err != nil {
		return Consumer{}, err
	}
	c.ID, c.CreatedAt, c.UpdatedAt = id, stamp(now), time.Time{}
	c = NormalizeConsumer(c)
	return c, ValidateConsumer(c)
}

// ParseFileConsumers parses and validates the bytes of a keystore file, as
// ParseFile does, and returns its consumers.
func ParseFileConsumers(data []byte) ([]Consumer, error) {
	doc, err := parseDoc(data)
	return doc.Consumers, err
}
