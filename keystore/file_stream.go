package keystore

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
)

// CheckFile reads the keystore file at path and checks it whole, as
// ParseFile does, without holding its records: it returns the number of
// keys and the consumers. Together with StreamFile it lets an import
// refuse a bad file before it writes anything, with one batch of records
// in memory.
func CheckFile(path string) (keys int, cons []Consumer, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("keystore file: %w", err)
	}
	defer f.Close()
	keys, doc, err := checkFile(f, path)
	return keys, doc.Consumers, err
}

// checkFile is CheckFile on an open file, read from its start. When the
// fast reader does not know the file, it returns the document yaml.v3
// read, with its Keys; otherwise Keys is nil.
func checkFile(f *os.File, path string) (keys int, doc fileDoc, err error) {
	// Ids and hashes seen, by a 64-bit hash of each: a repeat (or two
	// values with one hash) sends the file to the yaml.v3 path, which
	// names both entries.
	seed := maphash.MakeSeed()
	ids := make(map[uint64]struct{})
	hashes := make(map[uint64]struct{})
	doc, err = scanDoc(f, func(r Record) error {
		if err := ValidateRecord(r); err != nil {
			return fmt.Errorf("keystore file: keys[%d]: %w", keys, err)
		}
		id, h := maphash.String(seed, r.ID), maphash.Bytes(seed, r.Hash[:])
		if _, dup := ids[id]; dup {
			return errNotCanonical
		}
		if _, dup := hashes[h]; dup {
			return errNotCanonical
		}
		ids[id], hashes[h] = struct{}{}, struct{}{}
		keys++
		return nil
	})
	if errors.Is(err, errNotCanonical) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, fileDoc{}, fmt.Errorf("keystore file: %w", err)
		}
		data, err := io.ReadAll(f)
		if err != nil {
			return 0, fileDoc{}, fmt.Errorf("keystore file: %w", err)
		}
		doc, err := parseDoc(data)
		if err != nil {
			return 0, fileDoc{}, fmt.Errorf("%s: %w", path, err)
		}
		if doc.Keys == nil {
			doc.Keys = []Record{}
		}
		return len(doc.Keys), doc, nil
	}
	if err != nil {
		return 0, fileDoc{}, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := validateDoc(fileDoc{Consumers: doc.Consumers, AdminTokens: doc.AdminTokens}); err != nil {
		return 0, fileDoc{}, fmt.Errorf("%s: %w", path, err)
	}
	return keys, doc, nil
}

// StreamFile reads the records of the keystore file at path and passes
// them to each in batches of up to size, in file order. It checks each
// record, not the file whole: call CheckFile first.
func StreamFile(path string, size int, each func([]Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("keystore file: %w", err)
	}
	defer f.Close()
	batch := make([]Record, 0, size)
	_, err = scanDoc(f, func(r Record) error {
		if err := ValidateRecord(r); err != nil {
			return fmt.Errorf("keystore file: %w", err)
		}
		batch = append(batch, r)
		if len(batch) < size {
			return nil
		}
		err := each(batch)
		batch = batch[:0]
		return err
	})
	if errors.Is(err, errNotCanonical) {
		// The fast reader gave up: read it with yaml.v3 from the start.
		// Batches already passed are passed again; an import skips what
		// it holds.
		recs, err := readFile(path)
		if err != nil {
			return err
		}
		for start := 0; start < len(recs); start += size {
			if err := each(recs[start:min(start+size, len(recs))]); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	if len(batch) > 0 {
		return each(batch)
	}
	return nil
}
