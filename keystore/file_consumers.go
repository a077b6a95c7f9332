package keystore

import (
	"context"
	"fmt"
	"slices"
)

// UpdateKey applies f to the record of the key with id and stores the
// result. f may change the name, plan, override and expiry; the id, hash,
// product, env, context and consumer it may not. An unknown id is
// ErrNotFound.
func (a *FileAdmin) UpdateKey(ctx context.Context, id string, f func(Record) (Record, error)) (Record, error) {
	return a.changeOne(ctx, "update", id, func(r Record) (Record, error) { return updateRecord(r, f) })
}

// updateRecord runs f on old and refuses a change of what identifies the
// key or binds it.
func updateRecord(old Record, f func(Record) (Record, error)) (Record, error) {
	r, err := f(old)
	if err != nil {
		return Record{}, err
	}
	if r.ID != old.ID || r.Hash != old.Hash || r.Product != old.Product || r.Env != old.Env || r.Context != old.Context || r.Consumer != old.Consumer {
		return Record{}, fmt.Errorf("update %s: the id, hash, product, env, context and consumer of a key cannot change", old.ID)
	}
	if r.Override != nil && r.Override.IsZero() {
		r.Override = nil
	}
	r.Limits = nil
	return r, ValidateRecord(r)
}

// CreateConsumer stores a new consumer; its id must be unused.
func (a *FileAdmin) CreateConsumer(ctx context.Context, c Consumer) error {
	c = NormalizeConsumer(c)
	if err := ValidateConsumer(c); err != nil {
		return err
	}
	return a.updateDoc(ctx, func(doc *fileDoc) error {
		if findConsumer(doc.Consumers, c.ID) >= 0 {
			return fmt.Errorf("keystore: consumer id %s already in use", c.ID)
		}
		doc.Consumers = append(doc.Consumers, c)
		return nil
	})
}

// ListConsumers returns every consumer in the order they were created.
func (a *FileAdmin) ListConsumers(ctx context.Context) ([]Consumer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	doc, err := readDoc(a.Path)
	return doc.Consumers, err
}

// GetConsumer returns the consumer with id, or ErrConsumerNotFound.
func (a *FileAdmin) GetConsumer(ctx context.Context, id string) (Consumer, error) {
	cons, err := a.ListConsumers(ctx)
	if err != nil {
		return Consumer{}, err
	}
	if i := findConsumer(cons, id); i >= 0 {
		return cons[i], nil
	}
	return Consumer{}, fmt.Errorf("%q: %w", id, ErrConsumerNotFound)
}

// GetConsumers returns the consumers with ids that the file holds, in
// the order of ids, leaving out those it does not: a read of the file.
func (a *FileAdmin) GetConsumers(ctx context.Context, ids []string) ([]Consumer, error) {
	cons, err := a.ListConsumers(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]int, len(cons))
	for i, c := range cons {
		byID[c.ID] = i
	}
	out := make([]Consumer, 0, len(ids))
	for _, id := range ids {
		if i, ok := byID[id]; ok {
			out = append(out, cons[i])
		}
	}
	return out, nil
}

// UpdateConsumer applies f to the consumer with id and stores the result,
// with UpdatedAt now. Narrowing its contexts is refused while an active
// key of the consumer is bound to a context left out (ErrConsumerInUse).
func (a *FileAdmin) UpdateConsumer(ctx context.Context, id string, f func(Consumer) (Consumer, error)) (Consumer, error) {
	var out Consumer
	err := a.updateDoc(ctx, func(doc *fileDoc) error {
		i := findConsumer(doc.Consumers, id)
		if i < 0 {
			return fmt.Errorf("%q: %w", id, ErrConsumerNotFound)
		}
		c, err := updateConsumer(doc.Consumers[i], f, a.now())
		if err != nil {
			return err
		}
		if !slices.Equal(c.Contexts, doc.Consumers[i].Contexts) {
			if err := CheckConsumerKeys(c, doc.Keys, a.now(), false); err != nil {
				return err
			}
		}
		doc.Consumers[i], out = c, c
		return nil
	})
	return out, err
}

// DeleteConsumer removes the consumer with id. It is refused with
// ErrConsumerInUse while the consumer has active keys; its revoked and
// expired keys keep its id.
func (a *FileAdmin) DeleteConsumer(ctx context.Context, id string) (Consumer, error) {
	var out Consumer
	err := a.updateDoc(ctx, func(doc *fileDoc) error {
		i := findConsumer(doc.Consumers, id)
		if i < 0 {
			return fmt.Errorf("%q: %w", id, ErrConsumerNotFound)
		}
		if err := CheckConsumerKeys(doc.Consumers[i], doc.Keys, a.now(), true); err != nil {
			return err
		}
		out = doc.Consumers[i]
		doc.Consumers = slices.Delete(doc.Consumers, i, i+1)
		return nil
	})
	return out, err
}
