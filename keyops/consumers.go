package keyops

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/keygate/keygate/keystore"
)

// ConsumerSpec is a consumer to create.
type ConsumerSpec struct {
	Name     string
	Metadata map[string]string
	// Contexts, when not empty, are the only contexts its keys may be
	// bound to.
	Contexts []string
	// AnyContext lets the consumer's keys be bound to any context in the
	// self-service portal too; it excludes Contexts.
	AnyContext bool
	// Plan names an entry of ratelimit.plans; "" for none.
	Plan   string
	Limits LimitUpdate // an override to start with; its Plan is ignored
	// Access narrows its keys' permissions and addresses; its
	// ClearAllowedCIDRs is ignored.
	Access AccessUpdate
}

// CreateConsumer creates a consumer with a new id.
func (s *Service) CreateConsumer(ctx context.Context, a Actor, spec ConsumerSpec) (keystore.Consumer, error) {
	if err := checkActor(a); err != nil {
		return keystore.Consumer{}, err
	}
	changes := map[string]string{"name": spec.Name}
	for k, v := range spec.Metadata {
		changes["metadata."+k] = v
	}
	if len(spec.Contexts) > 0 {
		changes["contexts"] = strings.Join(spec.Contexts, ",")
	}
	if spec.AnyContext {
		changes["any_context"] = "true"
	}
	lu := spec.Limits
	lu.Plan = nil
	if spec.Plan != "" {
		lu.Plan = &spec.Plan
	}
	c, err := s.newConsumer(spec, lu, changes)
	if err == nil {
		err = s.store.CreateConsumer(ctx, c)
	}
	if err == nil {
		s.recentConsumers.add("", c.ID, consumerPosition(c), s.now())
	}
	if err := s.audit(ctx, a, "consumer.create", c.ID, changes, err); err != nil {
		return keystore.Consumer{}, err
	}
	return c, nil
}

func (s *Service) newConsumer(spec ConsumerSpec, lu LimitUpdate, changes map[string]string) (keystore.Consumer, error) {
	if err := CheckName("name", spec.Name); err != nil {
		return keystore.Consumer{}, err
	}
	if spec.AnyContext && len(spec.Contexts) > 0 {
		return keystore.Consumer{}, invalid("any_context: a consumer lists its contexts or allows any, not both")
	}
	if err := checkMetadata(spec.Metadata); err != nil {
		return keystore.Consumer{}, err
	}
	if err := s.checkLimits(lu); err != nil {
		return keystore.Consumer{}, err
	}
	acc := spec.Access
	acc.ClearAllowedCIDRs = false
	if err := s.prepareAccess("", &acc); err != nil {
		return keystore.Consumer{}, err
	}
	c := keystore.Consumer{Name: spec.Name, Metadata: spec.Metadata, Contexts: spec.Contexts, AnyContext: spec.AnyContext}
	c.Permissions, c.AllowedCIDRs = acc.apply(nil, nil, changes)
	var err error
	if c.Plan, c.Override, err = lu.apply("", nil, s.now(), changes); err != nil {
		return keystore.Consumer{}, err
	}
	if c, err = keystore.NewConsumer(c, s.now()); err != nil {
		return keystore.Consumer{}, asInvalid(err)
	}
	return c, nil
}

// ListConsumers returns every consumer in the order they were created.
func (s *Service) ListConsumers(ctx context.Context) ([]keystore.Consumer, error) {
	return s.store.ListConsumers(ctx)
}

// GetConsumer returns the consumer with id, or an error wrapping
// keystore.ErrConsumerNotFound.
func (s *Service) GetConsumer(ctx context.Context, id string) (keystore.Consumer, error) {
	return s.store.GetConsumer(ctx, id)
}

// ConsumersWhere finds consumers without reading every one: the ids of
// those match accepts in a replica's copy of them
// (keystore.RedisStore.ConsumersWhere), as current as the change log it
// follows. ok is false when it cannot tell (the copy is still loading).
type ConsumersWhere func(match func(*keystore.Consumer) bool) (ids []string, ok bool)

// ConsumersWhere returns the consumers match accepts. With
// Config.ConsumersWhere, match picks them in the replica's copy, which holds only some of their
// fields (see keystore.RedisStore.ConsumersWhere), and those alone are
// read and matched again; otherwise every consumer is read.
func (s *Service) ConsumersWhere(ctx context.Context, match func(*keystore.Consumer) bool) ([]keystore.Consumer, error) {
	if s.findConsumers != nil {
		if ids, ok := s.findConsumers(match); ok {
			cons, err := s.store.GetConsumers(ctx, ids)
			if err != nil {
				return nil, err
			}
			return slices.DeleteFunc(cons, func(c keystore.Consumer) bool { return !match(&c) }), nil
		}
	}
	all, err := s.store.ListConsumers(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(c keystore.Consumer) bool { return !match(&c) }), nil
}

// ConsumerDetail is a consumer as `consumers show` prints it, with the
// ids of its keys.
type ConsumerDetail struct {
	keystore.Consumer
	// Keys are the ids of its keys, by effective status.
	Keys map[keystore.Status][]string `json:"keys"`
}

// ShowConsumer returns the consumer with id and its keys.
func (s *Service) ShowConsumer(ctx context.Context, id string) (ConsumerDetail, error) {
	c, err := s.store.GetConsumer(ctx, id)
	if err != nil {
		return ConsumerDetail{}, err
	}
	recs, err := s.ListKeys(ctx, KeyFilter{Consumer: id})
	if err != nil {
		return ConsumerDetail{}, err
	}
	d := ConsumerDetail{Consumer: c, Keys: map[keystore.Status][]string{}}
	now := s.now()
	for _, r := range recs {
		st := r.StateAt(now)
		d.Keys[st] = append(d.Keys[st], r.ID)
	}
	return d, nil
}

// ConsumerUpdate changes a consumer. Nil fields are left as they are.
type ConsumerUpdate struct {
	Name *string
	// Metadata sets entries; an entry set to "" is removed.
	Metadata map[string]string
	// Contexts replaces the allowed contexts; an empty slice allows any.
	// Narrowing them is refused while an active key of the consumer is
	// bound to a context left out. Setting contexts clears AnyContext.
	Contexts *[]string
	// AnyContext sets whether the portal may bind the consumer's keys to
	// any context; true needs no contexts (set Contexts to an empty slice
	// with it to drop them).
	AnyContext *bool
	Limits     LimitUpdate
	// Access narrows its keys' permissions and addresses.
	Access AccessUpdate
}

// UpdateConsumer changes the consumer with id. A change of its plan or
// override reaches every running gateway within a second, for all its
// keys that set no limit of their own.
func (s *Service) UpdateConsumer(ctx context.Context, a Actor, id string, u ConsumerUpdate) (keystore.Consumer, error) {
	if err := checkActor(a); err != nil {
		return keystore.Consumer{}, err
	}
	if u.Name == nil && len(u.Metadata) == 0 && u.Contexts == nil && u.AnyContext == nil && u.Limits.IsZero() && u.Access.IsZero() {
		return keystore.Consumer{}, invalid("nothing to update")
	}
	changes := map[string]string{}
	err := s.checkLimits(u.Limits)
	if err == nil {
		err = s.prepareAccess("", &u.Access)
	}
	if err == nil && u.Name != nil {
		err = CheckName("name", *u.Name)
	}
	if err == nil {
		err = checkMetadata(u.Metadata)
	}
	if err == nil {
		err = s.precheckConsumer(ctx, id, u.Limits, s.now())
	}
	var out keystore.Consumer
	if err == nil {
		now := s.now()
		out, err = s.store.UpdateConsumer(ctx, id, func(c keystore.Consumer) (keystore.Consumer, error) {
			if u.Name != nil {
				c.Name = *u.Name
				changes["name"] = c.Name
			}
			if len(u.Metadata) > 0 {
				m := make(map[string]string, len(c.Metadata)+len(u.Metadata))
				for k, v := range c.Metadata {
					m[k] = v
				}
				for k, v := range u.Metadata {
					if v == "" {
						delete(m, k)
					} else {
						m[k] = v
					}
					changes["metadata."+k] = v
				}
				c.Metadata = m
				if len(m) == 0 {
					c.Metadata = nil
				}
			}
			if u.Contexts != nil {
				c.Contexts = append([]string(nil), (*u.Contexts)...)
				changes["contexts"] = strings.Join(c.Contexts, ",")
				if len(c.Contexts) > 0 && c.AnyContext && u.AnyContext == nil {
					c.AnyContext = false
					changes["any_context"] = "false"
				}
			}
			if u.AnyContext != nil {
				if *u.AnyContext && len(c.Contexts) > 0 {
					return c, invalid("any_context: the consumer lists contexts; drop them (contexts: []) to allow any")
				}
				c.AnyContext = *u.AnyContext
				changes["any_context"] = strconv.FormatBool(c.AnyContext)
			}
			var err error
			c.Plan, c.Override, err = u.Limits.apply(c.Plan, c.Override, now, changes)
			c.Permissions, c.AllowedCIDRs = u.Access.apply(c.Permissions, c.AllowedCIDRs, changes)
			return c, err
		})
	}
	if errors.Is(err, keystore.ErrConsumerInUse) {
		err = asInvalid(err)
	}
	if err := s.audit(ctx, a, "consumer.update", id, changes, err); err != nil {
		return keystore.Consumer{}, err
	}
	return out, nil
}

// DeleteConsumer deletes the consumer with id. It is refused
// (keystore.ErrConsumerInUse) while the consumer has active keys.
func (s *Service) DeleteConsumer(ctx context.Context, a Actor, id string) (keystore.Consumer, error) {
	if err := checkActor(a); err != nil {
		return keystore.Consumer{}, err
	}
	c, err := s.store.DeleteConsumer(ctx, id)
	if err := s.audit(ctx, a, "consumer.delete", id, nil, err); err != nil {
		return keystore.Consumer{}, err
	}
	return c, nil
}
