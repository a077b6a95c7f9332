package keyops

import (
	"context"

	"github.com/keygate/keygate/keystore"
)

// ConsumersPage finds a page of the consumer list without reading every
// consumer: a replica's copy of them (keystore.RedisStore.ConsumersPage).
// ok is false when it cannot tell (the copy is still loading).
type ConsumersPage func(after *keystore.Position, limit int) (page []keystore.Position, ok bool)

// ConsumerPage is one page of the consumer list.
type ConsumerPage struct {
	// Consumers are in list order: by creation second, then id.
	Consumers []keystore.Consumer
	// Next is where the next page starts after; nil on the last page. A
	// page may hold fewer consumers than asked for and still have a next
	// one: a consumer deleted while the page was read is left out.
	Next *keystore.Position
}

// consumerPosition is c's place in the consumer list.
func consumerPosition(c keystore.Consumer) keystore.Position { return keystore.ConsumerPosition(&c) }

// ListConsumersPage returns the consumers after after (from the first
// when nil), at most limit of them, in list order: by creation second,
// then id.
//
// With Config.ConsumersPage, it asks the replica's copy for the page and reads those consumers alone
// (and the ones this Service created in the last few seconds, which the
// copy may not hold yet). Otherwise, or while the copy is loading, it
// reads every consumer and keeps the page.
func (s *Service) ListConsumersPage(ctx context.Context, after *keystore.Position, limit int) (ConsumerPage, error) {
	if limit <= 0 {
		return ConsumerPage{}, invalid("limit: must be positive, got %d", limit)
	}
	var found []keystore.Position
	ok := false
	if s.findConsumersPage != nil {
		found, ok = s.findConsumersPage(after, limit+1)
	}
	if !ok {
		cons, err := s.store.ListConsumers(ctx)
		if err != nil {
			return ConsumerPage{}, err
		}
		page, next := pageAfter(cons, consumerPosition, after, limit, nil)
		return ConsumerPage{Consumers: page, Next: next}, nil
	}
	// The copy's page ends at its last entry when it is full: consumers
	// past that are the next page's, the recent ones included.
	var bound *keystore.Position
	if len(found) > limit {
		bound = &found[len(found)-1]
	}
	ids := make([]string, 0, len(found))
	for _, p := range found {
		ids = append(ids, p.ID)
	}
	cons, err := s.store.GetConsumers(ctx, s.recentConsumers.join(ids, "", after, bound, s.now()))
	if err != nil {
		return ConsumerPage{}, err
	}
	page, next := pageAfter(cons, consumerPosition, after, limit, bound)
	return ConsumerPage{Consumers: page, Next: next}, nil
}
