package keystore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/keygate/keygate/internal/atomicfile"
)

// FileAdmin changes a keystore file: it issues, lists, revokes and rotates
// keys for the `keygate keys` command. Each change takes an exclusive flock
// on "<Path>.lock", reads the file (absent means empty), changes it and
// replaces it atomically (temp file in the same directory, fsync, rename,
// mode 0600), so that concurrent admins lose no change and a running
// FileStore never reads half a file. The zero value is not usable: Path is
// required. It is safe for concurrent use, also across processes.
type FileAdmin struct {
	// Path is the keystore file; it and its directory are created when
	// needed.
	Path string
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	tokens adminTokenCache // see LookupAdminToken
}

func (a *FileAdmin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// update runs change on the records under the lock and writes the result
// unless change fails.
func (a *FileAdmin) update(ctx context.Context, change func([]Record) ([]Record, error)) error {
	return a.updateDoc(ctx, func(doc *fileDoc) error {
		recs, err := change(doc.Keys)
		doc.Keys = recs
		return err
	})
}

// updateDoc runs change on the keys and consumers under the lock and
// writes the result unless change fails.
func (a *FileAdmin) updateDoc(ctx context.Context, change func(*fileDoc) error) error {
	if a.Path == "" {
		return errors.New("keystore: FileAdmin.Path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(a.Path), 0o700); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	unlock, err := lockFile(ctx, a.Path+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	doc, err := readDoc(a.Path)
	if err != nil {
		return err
	}
	if err := change(&doc); err != nil {
		return err
	}
	if err := ValidateRecords(doc.Keys); err != nil {
		return fmt.Errorf("keystore: refusing to write an invalid keystore: %w", err)
	}
	if err := ValidateConsumers(doc.Consumers); err != nil {
		return fmt.Errorf("keystore: refusing to write an invalid keystore: %w", err)
	}
	if err := validateAdminTokens(doc.AdminTokens); err != nil {
		return fmt.Errorf("keystore: refusing to write an invalid keystore: %w", err)
	}
	data, err := marshalDoc(doc)
	if err != nil {
		return err
	}
	return writeFileAtomic(a.Path, data)
}

// writeFileAtomic replaces path by data (mode 0600), durably: see
// atomicfile.
func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("keystore: write: %w", err)
	}
	return nil
}

func findID(recs []Record, id string) int {
	for i, r := range recs {
		if r.ID == id {
			return i
		}
	}
	return -1
}

// Issue creates a key for req and stores its record. The key is returned
// once and stored nowhere.
func (a *FileAdmin) Issue(ctx context.Context, req IssueRequest) (key string, rec Record, err error) {
	if err := req.Validate(); err != nil {
		return "", Record{}, err
	}
	err = a.updateDoc(ctx, func(doc *fileDoc) error {
		if req.Consumer != "" {
			i := findConsumer(doc.Consumers, req.Consumer)
			if i < 0 {
				return fmt.Errorf("consumer %q: %w", req.Consumer, ErrConsumerNotFound)
			}
			if err := CheckKeyForConsumer(doc.Consumers[i], req.Context); err != nil {
				return err
			}
		}
		for {
			key, rec, err = NewRecord(req, a.now())
			if err != nil {
				return err
			}
			if findID(doc.Keys, rec.ID) < 0 {
				doc.Keys = append(doc.Keys, rec)
				return nil
			}
		}
	})
	if err != nil {
		return "", Record{}, err
	}
	return key, rec, nil
}

// List returns the records in the order they were issued.
func (a *FileAdmin) List(ctx context.Context) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return readFile(a.Path) // writes are atomic renames: no lock needed
}

// Revoke revokes the key with id at once. An unknown id is ErrNotFound, a
// revoked key ErrRevoked.
func (a *FileAdmin) Revoke(ctx context.Context, id string) (Record, error) {
	return a.changeOne(ctx, "revoke", id, func(r Record) (Record, error) { return RevokeRecord(r, a.now()) })
}

// changeOne replaces the record of the key with id by change's result,
// in one atomic update of the file. verb names the change in errors.
func (a *FileAdmin) changeOne(ctx context.Context, verb, id string, change func(Record) (Record, error)) (Record, error) {
	var out Record
	err := a.update(ctx, func(recs []Record) ([]Record, error) {
		i := findID(recs, id)
		if i < 0 {
			return nil, fmt.Errorf("%s %q: %w", verb, id, ErrNotFound)
		}
		r, err := change(recs[i])
		if err != nil {
			return nil, err
		}
		recs[i], out = r, r
		return recs, nil
	})
	if err != nil {
		return Record{}, err
	}
	return out, nil
}

// Rotate issues a replacement for the key with id and returns the new key
// and its record; see RotateRecord for what happens to the old key. An
// unknown id is ErrNotFound.
func (a *FileAdmin) Rotate(ctx context.Context, id string, grace time.Duration) (key string, rec Record, err error) {
	err = a.update(ctx, func(recs []Record) ([]Record, error) {
		i := findID(recs, id)
		if i < 0 {
			return nil, fmt.Errorf("rotate %q: %w", id, ErrNotFound)
		}
		for {
			var old Record
			key, old, rec, err = RotateRecord(recs[i], a.now(), grace)
			if err != nil {
				return nil, err
			}
			if findID(recs, rec.ID) < 0 {
				recs[i] = old
				return append(recs, rec), nil
			}
		}
	})
	if err != nil {
		return "", Record{}, err
	}
	return key, rec, nil
}

// ListMatching returns the records keep accepts, in the order they were
// issued: a read of the file, as List.
func (a *FileAdmin) ListMatching(ctx context.Context, keep func(Record) bool) ([]Record, error) {
	recs, err := a.List(ctx)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Get returns the record of the key with id, or an error wrapping
// ErrNotFound: a read of the file.
func (a *FileAdmin) Get(ctx context.Context, id string) (Record, error) {
	recs, err := a.List(ctx)
	if err != nil {
		return Record{}, err
	}
	for _, r := range recs {
		if r.ID == id {
			return r, nil
		}
	}
	return Record{}, fmt.Errorf("%q: %w", id, ErrNotFound)
}

// GetHashes returns the records of the keys whose hashes are hs, in the
// order they were issued; a hash with no record is left out. It reads
// the file.
func (a *FileAdmin) GetHashes(ctx context.Context, hs []Hash) ([]Record, error) {
	want := make(map[Hash]bool, len(hs))
	for _, h := range hs {
		want[h] = true
	}
	return a.ListMatching(ctx, func(r Record) bool { return want[r.Hash] })
}

// Count returns how many key records the file holds.
func (a *FileAdmin) Count(ctx context.Context) (int, error) {
	recs, err := a.List(ctx)
	return len(recs), err
}
