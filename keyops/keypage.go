package keyops

import (
	"context"
	"slices"

	"github.com/keygate/keygate/keystore"
)

// KeysPage finds a page of the key list without reading the key set: a
// replica's keystore index (keystore.RedisStore.KeysPage). ok is false
// when it cannot tell (the index is still loading).
type KeysPage func(q keystore.PageQuery) (page []keystore.PageEntry, ok bool)

// KeyPage is one page of the key list.
type KeyPage struct {
	// Keys are in list order (keystore.Position).
	Keys []keystore.Record
	// Next is where the next page starts after; nil on the last page.
	// A page may hold fewer than the keys asked for and still have a
	// next one: a key whose record no longer matched the filter when it
	// was read is left out.
	Next *keystore.Position
}

// ListKeysPage returns the keys that f selects after after (from the
// first when nil), at most limit of them, in list order: by creation
// second, then id.
//
// With Config.KeysPage, it asks the index for the page and reads those records alone (and the keys
// this Service issued in the last few seconds, which the index may not
// hold yet), each checked against f again. Otherwise, or while the index
// is loading, it reads every record (ListKeys) and keeps the page.
func (s *Service) ListKeysPage(ctx context.Context, f KeyFilter, after *keystore.Position, limit int) (KeyPage, error) {
	if limit <= 0 {
		return KeyPage{}, invalid("limit: must be positive, got %d", limit)
	}
	now := s.now()
	var found []keystore.PageEntry
	ok := false
	if s.findPage != nil {
		found, ok = s.findPage(keystore.PageQuery{Consumer: f.Consumer, Product: f.Product, Env: f.Env, Status: f.Status,
			Now: now, After: after, Limit: limit + 1})
	}
	if !ok {
		recs, err := s.ListKeys(ctx, f)
		if err != nil {
			return KeyPage{}, err
		}
		return pageOf(recs, after, limit, nil), nil
	}
	// The index's page ends at its last entry when it is full: keys
	// past that are the next page's, the recent ones included.
	var bound *keystore.Position
	if len(found) > limit {
		bound = &found[len(found)-1].Position
	}
	hs := make([]keystore.Hash, 0, len(found))
	for _, e := range found {
		hs = append(hs, e.Hash)
	}
	recs, err := s.store.GetHashes(ctx, s.recent.join(hs, f.Consumer, after, bound, now))
	if err != nil {
		return KeyPage{}, err
	}
	kept := recs[:0]
	for _, r := range recs {
		if f.match(r, now) && (bound == nil || keystore.PositionOf(r).Compare(*bound) <= 0) {
			kept = append(kept, r)
		}
	}
	return pageOf(kept, after, limit, bound), nil
}

// pageOf is the page of recs after after: at most limit of them, in list
// order. bound, when set, is the last position the records were looked
// for up to: the next page starts after it if recs hold no more than
// limit.
func pageOf(recs []keystore.Record, after *keystore.Position, limit int, bound *keystore.Position) KeyPage {
	keys, next := pageAfter(recs, keystore.PositionOf, after, limit, bound)
	return KeyPage{Keys: keys, Next: next}
}

// pageAfter is the page of items after after, by their place in the list
// (pos): at most limit of them, in list order, and where the next page
// starts after (nil on the last page). bound, when set, is the last
// place the items were looked for up to: the next page starts after it
// if items hold no more than limit.
func pageAfter[T any](items []T, pos func(T) keystore.Position, after *keystore.Position, limit int, bound *keystore.Position) (page []T, next *keystore.Position) {
	slices.SortFunc(items, func(a, b T) int { return pos(a).Compare(pos(b)) })
	if after != nil {
		start, _ := slices.BinarySearchFunc(items, *after, func(x T, p keystore.Position) int {
			if pos(x).Compare(p) <= 0 {
				return -1
			}
			return 1
		})
		items = items[start:]
	}
	switch {
	case len(items) > limit:
		n := pos(items[limit-1])
		return items[:limit], &n
	case bound != nil:
		return items, bound
	}
	return items, nil
}
