package tokenissuer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/atomicfile"
)

// Store keeps the issuer's state where the keystore keeps its keys, so
// that every replica signs and validates with the same keys: the signing
// key set, and the key id → key hash references that let a token find its
// key. Implementations are safe for concurrent use.
type Store interface {
	// Update reads the state, lets f change it and writes it back
	// atomically; f returning false writes nothing.
	Update(ctx context.Context, f func(*State) (bool, error)) (State, error)
	// Load reads the state.
	Load(ctx context.Context) (State, error)
	// PutRef records which key hash a key id stands for (it never
	// changes); GetRef reads it back.
	PutRef(ctx context.Context, id, hash string) error
	GetRef(ctx context.Context, id string) (string, bool, error)
}

// State is what a Store holds besides the references.
type State struct {
	Keys []StoredKey `json:"keys"`
}

var (
	_ Store = (*FileStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// FileStore keeps the state in one 0600 JSON file (token-keys.json beside
// the keys file of the file keystore). Writes take an exclusive lock on
// the file's .lock companion, so the CLI and a running keygate can both
// write it.
type FileStore struct {
	path string
	mu   sync.Mutex
}

type fileDoc struct {
	State
	Refs map[string]string `json:"refs,omitempty"`
}

// NewFileStore stores in path.
func NewFileStore(path string) *FileStore { return &FileStore{path: path} }

// FilePathBeside is the signing-key file beside a keystore file.
func FilePathBeside(keysFile string) string {
	return filepath.Join(filepath.Dir(keysFile), "token-keys.json")
}

func (s *FileStore) read() (fileDoc, error) {
	var d fileDoc
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("tokenissuer: %w", err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("tokenissuer: %s: %w", s.path, err)
	}
	return d, nil
}

func (s *FileStore) write(d fileDoc) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("tokenissuer: %w", err)
	}
	return nil
}

func (s *FileStore) modify(f func(*fileDoc) (bool, error)) (fileDoc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := lockFile(s.path + ".lock")
	if err != nil {
		return fileDoc{}, err
	}
	defer unlock()
	d, err := s.read()
	if err != nil {
		return d, err
	}
	changed, err := f(&d)
	if err != nil || !changed {
		return d, err
	}
	return d, s.write(d)
}

// Update implements Store.
func (s *FileStore) Update(_ context.Context, f func(*State) (bool, error)) (State, error) {
	d, err := s.modify(func(d *fileDoc) (bool, error) { return f(&d.State) })
	return d.State, err
}

// Load implements Store.
func (s *FileStore) Load(context.Context) (State, error) {
	d, err := s.read()
	return d.State, err
}

// PutRef implements Store.
func (s *FileStore) PutRef(_ context.Context, id, hash string) error {
	_, err := s.modify(func(d *fileDoc) (bool, error) {
		if d.Refs[id] == hash {
			return false, nil
		}
		if d.Refs == nil {
			d.Refs = map[string]string{}
		}
		d.Refs[id] = hash
		return true, nil
	})
	return err
}

// GetRef implements Store.
func (s *FileStore) GetRef(_ context.Context, id string) (string, bool, error) {
	d, err := s.read()
	h, ok := d.Refs[id]
	return h, ok, err
}

// RedisStore keeps the state under the Redis key prefix, shared by every
// replica:
//
//	<prefix>tokenissuer:signing-keys         string, the State as JSON
//	<prefix>tokenissuer:{kr:<bb>}:key-refs   hash, key id -> key hash
//	    (bb: CRC-32 of the key id modulo refBuckets, in hex)
//
// The references are spread over refBuckets hashes, each its own
// Cluster hash tag, so that a fleet's million keys with tokens do not
// sit in one hash on one Cluster slot.
type RedisStore struct {
	c       redis.UniversalClient
	keys    string
	buckets [refBuckets]string
}

// refBuckets is how many hashes the key references are spread over.
const refBuckets = 64

// NewRedisStore stores under prefix.
func NewRedisStore(c redis.UniversalClient, prefix string) *RedisStore {
	if prefix == "" {
		prefix = "keygate:"
	}
	s := &RedisStore{c: c, keys: prefix + "tokenissuer:signing-keys"}
	for b := range s.buckets {
		s.buckets[b] = fmt.Sprintf("%stokenissuer:{kr:%02x}:key-refs", prefix, b)
	}
	return s
}

// refsOf is the hash that holds the reference of key id.
func (s *RedisStore) refsOf(id string) string {
	return s.buckets[crc32.ChecksumIEEE([]byte(id))%refBuckets]
}

func decodeState(b string) (State, error) {
	var st State
	if b == "" {
		return st, nil
	}
	if err := json.Unmarshal([]byte(b), &st); err != nil {
		return st, fmt.Errorf("tokenissuer: stored signing keys: %w", err)
	}
	return st, nil
}

// Load implements Store.
func (s *RedisStore) Load(ctx context.Context) (State, error) {
	b, err := s.c.Get(ctx, s.keys).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return State{}, fmt.Errorf("tokenissuer: %w", err)
	}
	return decodeState(b)
}

// Update implements Store with WATCH/MULTI, retried on a concurrent
// change.
func (s *RedisStore) Update(ctx context.Context, f func(*State) (bool, error)) (State, error) {
	var out State
	for range 10 {
		err := s.c.Watch(ctx, func(tx *redis.Tx) error {
			b, err := tx.Get(ctx, s.keys).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			st, err := decodeState(b)
			if err != nil {
				return err
			}
			changed, err := f(&st)
			if err != nil {
				return err
			}
			out = st
			if !changed {
				return nil
			}
			nb, err := json.Marshal(st)
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, s.keys, nb, 0)
				return nil
			})
			return err
		}, s.keys)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		if err != nil {
			return State{}, fmt.Errorf("tokenissuer: %w", err)
		}
		return out, nil
	}
	return State{}, errors.New("tokenissuer: signing keys changed concurrently too often")
}

// PutRef implements Store.
func (s *RedisStore) PutRef(ctx context.Context, id, hash string) error {
	if err := s.c.HSet(ctx, s.refsOf(id), id, hash).Err(); err != nil {
		return fmt.Errorf("tokenissuer: %w", err)
	}
	return nil
}

// GetRef implements Store.
func (s *RedisStore) GetRef(ctx context.Context, id string) (string, bool, error) {
	h, err := s.c.HGet(ctx, s.refsOf(id), id).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("tokenissuer: %w", err)
	}
	return h, true, nil
}
