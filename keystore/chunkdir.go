package keystore

import (
	"sync"
	"sync/atomic"
)

// chunkDir is a directory of chunks, numbered from 0, that only grows: a
// reader loads it without a lock, and adding chunks takes one. The zero
// value is an empty directory. (consumerSet and shardSets keep their
// entries in chunks, at numbers of the index's string table.)
type chunkDir[C any] struct {
	grow   sync.Mutex
	chunks atomic.Pointer[[]*C]
}

// all returns the chunks.
func (d *chunkDir[C]) all() []*C {
	if p := d.chunks.Load(); p != nil {
		return *p
	}
	return nil
}

// at returns chunk i, adding chunks up to it when add is set; nil when
// there is none.
func (d *chunkDir[C]) at(i int, add bool) *C {
	if chunks := d.all(); i < len(chunks) {
		return chunks[i]
	}
	if !add {
		return nil
	}
	d.grow.Lock()
	defer d.grow.Unlock()
	chunks := d.all()
	// Readers hold slices no longer than before: appending in place
	// writes past their end.
	for len(chunks) <= i {
		chunks = append(chunks, new(C))
	}
	d.chunks.Store(&chunks)
	return chunks[i]
}
