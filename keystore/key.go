// Package keystore answers "who is this key?" and manages key records.
//
// An API key is a prefix naming its environment (svc_live_ or svc_test_)
// followed by 36 base62 characters: 30 random characters from crypto/rand
// and a 6-character checksum, so that a mistyped or made-up key is refused by
// Parse before any store is asked. Stores never hold keys, only their SHA-256
// Hash, and a Record describes what a key may do.
//
// Two stores, each with a read side for the request path and a write side
// (an Admin, admin.go) for package keyops:
//   - file: FileStore (file.go) serves lookups from a YAML keystore file
//     that it reloads when the file changes (package filewatch);
//     FileAdmin (file_admin.go) changes that file atomically; the format
//     is in file_format.go, and file_scan.go reads it fast;
//   - Redis: RedisStore (redis.go) serves lookups from an in-process copy
//     loaded in pages and kept current from a change log (a stream that
//     pub/sub wakes it to read), behind a redisconn.Breaker;
//     RedisAdmin (redis_admin.go) changes records in transactions and
//     announces each change; the key layout is in redis_layout.go.
//
// ValidateRecords, NewRecord, RevokeRecord and RotateRecord hold the rules
// that do not depend on where records are kept, for both stores to share.
//
// A Consumer (a customer team or application) owns keys and is kept in the
// same store. Keys and consumers may name a rate-limit plan and carry an
// override; given a policy.Resolver, both stores resolve each key's
// effective limit whenever records or consumers load or change, so the
// request path finds it in Record.Limits without a lookup. Package keyops
// holds the operations on top of the admins.
//
// Both stores serve lookups from an index (index.go): a sharded map of
// compact records that a lookup reads without allocating and a change
// updates in O(1).
package keystore

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/keygate/keygate/product"
)

// Env is the environment a key belongs to; it is named by the key's prefix.
type Env string

const (
	// Live keys (prefix svc_live_) are for production.
	Live Env = "live"
	// Test keys (prefix svc_test_) are for development and testing.
	Test Env = "test"
)

// Valid reports whether e is a known environment.
func (e Env) Valid() bool { return e == Live || e == Test }

// Prefix is the key prefix of the environment, such as "svc_live_"; it is
// empty for an unknown environment.
func (e Env) Prefix() string {
	switch e {
	case Live:
		return prefixLive
	case Test:
		return prefixTest
	}
	return ""
}

// Product is the product area a key opens.
type Product string

const (
	// Extraction keys call the document extraction product ({base_url}).
	Extraction Product = product.Extraction
	// Registry keys call the schema management product ({registry_url}).
	Registry Product = product.Registry
)

// Valid reports whether p is a known product.
func (p Product) Valid() bool { return product.Valid(string(p)) }

const (
	prefixLive = "svc_live_"
	prefixTest = "svc_test_"
	prefixLen  = len(prefixLive) // both prefixes have the same length

	// RandomLen is the number of random base62 characters in a key
	// (about 178 bits).
	RandomLen = 30
	// ChecksumLen is the number of base62 characters of the checksum.
	ChecksumLen = 6
	// KeyLen is the length of a whole key, prefix included.
	KeyLen = prefixLen + RandomLen + ChecksumLen

	base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// Errors returned by Parse. They say what is wrong with a key and never
// contain the key.
var (
	// ErrMalformed means the key is not shaped like a key: empty, wrong
	// prefix, whitespace, characters other than [0-9A-Za-z] or wrong length.
	ErrMalformed = errors.New("keystore: malformed key")
	// ErrChecksum means the key is shaped like a key but its checksum does
	// not match: it was mistyped, truncated and padded, or made up.
	ErrChecksum = errors.New("keystore: key checksum mismatch")
)

// Pre-built so that Parse does not allocate on the request path. They are
// never modified.
var (
	errEmpty      = fmt.Errorf("%w: empty", ErrMalformed)
	errWhitespace = fmt.Errorf("%w: contains whitespace", ErrMalformed)
	errPrefix     = fmt.Errorf("%w: prefix must be %s or %s", ErrMalformed, prefixLive, prefixTest)
	errLength     = fmt.Errorf("%w: must be %d characters long", ErrMalformed, KeyLen)
	errChars      = fmt.Errorf("%w: characters after the prefix must be [0-9A-Za-z]", ErrMalformed)
)

// Generate returns a new random key for env, read from crypto/rand.
func Generate(env Env) (string, error) {
	return generate(env, rand.Reader)
}

func generate(env Env, r io.Reader) (string, error) {
	prefix := env.Prefix()
	if prefix == "" {
		return "", fmt.Errorf("keystore: unknown env %q", env)
	}
	return generatePrefixed(prefix, r)
}

// generatePrefixed returns prefix, RandomLen random base62 characters and
// their checksum: the shape of API keys and admin tokens.
func generatePrefixed(prefix string, r io.Reader) (string, error) {
	n := len(prefix)
	buf := make([]byte, n+RandomLen+ChecksumLen)
	copy(buf, prefix)
	if err := randomBase62(r, buf[n:n+RandomLen]); err != nil {
		return "", fmt.Errorf("keystore: generate key: %w", err)
	}
	putChecksum(buf[n+RandomLen:], crc(buf[:n+RandomLen]))
	return string(buf), nil
}

// checksumOK reports whether the last ChecksumLen characters of s are the
// checksum of the rest. Its callers (Parse, ParseAdminToken) have checked
// that s has the whole length of a key or token.
func checksumOK(s string) bool {
	var want [ChecksumLen]byte
	putChecksum(want[:], crc(s[:len(s)-ChecksumLen]))
	return string(want[:]) == s[len(s)-ChecksumLen:]
}

// randomBase62 fills dst with uniformly distributed base62 characters,
// rejecting bytes >= 248 (4*62) so that no character is more likely.
func randomBase62(r io.Reader, dst []byte) error {
	var pool [64]byte
	n := 0
	for i := 0; i < len(dst); {
		if n == 0 {
			if _, err := io.ReadFull(r, pool[:]); err != nil {
				return err
			}
			n = len(pool)
		}
		n--
		b := pool[n]
		if b >= 248 {
			continue
		}
		dst[i] = base62[b%62]
		i++
	}
	return nil
}

// Parse checks the prefix, length, alphabet and checksum of key and returns
// its environment. Errors wrap ErrMalformed or ErrChecksum and never contain
// the key. Parse does no lookup and does not allocate.
func Parse(key string) (Env, error) {
	if key == "" {
		return "", errEmpty
	}
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			return "", errWhitespace
		}
	}
	var env Env
	switch {
	case len(key) >= prefixLen && key[:prefixLen] == prefixLive:
		env = Live
	case len(key) >= prefixLen && key[:prefixLen] == prefixTest:
		env = Test
	default:
		return "", errPrefix
	}
	for i := prefixLen; i < len(key); i++ {
		if !isBase62(key[i]) {
			return "", errChars
		}
	}
	if len(key) != KeyLen {
		return "", errLength
	}
	if !checksumOK(key) {
		return "", ErrChecksum
	}
	return env, nil
}

func isBase62(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// crc is CRC-32 (IEEE) of s, computed over a string or bytes without a
// conversion that could allocate.
func crc[T string | []byte](s T) uint32 {
	tab := crc32.IEEETable
	c := ^uint32(0)
	for i := 0; i < len(s); i++ {
		c = tab[byte(c)^s[i]] ^ (c >> 8)
	}
	return ^c
}

// putChecksum writes v in base62, left-padded with '0', into dst (6 bytes;
// 62^6 > 2^32).
func putChecksum(dst []byte, v uint32) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = base62[v%62]
		v /= 62
	}
}

// Hash is the SHA-256 of a whole key. Stores keep and look up hashes, never
// keys. Its text form (String, and in YAML and JSON) is "sha256:<64 hex>".
// The zero value is the hash of no key.
type Hash [32]byte

// HashKey returns the SHA-256 of key.
func HashKey(key string) Hash {
	var buf [64]byte // keys fit: hash them without a heap allocation
	if len(key) <= len(buf) {
		return Hash(sha256.Sum256(buf[:copy(buf[:], key)]))
	}
	return Hash(sha256.Sum256([]byte(key)))
}

const hashPrefix = "sha256:"

// String returns "sha256:" followed by the hash in lower-case hex.
func (h Hash) String() string {
	buf := make([]byte, len(hashPrefix)+hex.EncodedLen(len(h)))
	copy(buf, hashPrefix)
	hex.Encode(buf[len(hashPrefix):], h[:])
	return string(buf)
}

// IsZero reports whether h is the zero Hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// Equal reports whether h and o are equal, in constant time.
func (h Hash) Equal(o Hash) bool {
	return subtle.ConstantTimeCompare(h[:], o[:]) == 1
}

// ParseHash parses the String form of a Hash. Hex digits may be in either
// case.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != len(hashPrefix)+hex.EncodedLen(len(h)) || s[:len(hashPrefix)] != hashPrefix {
		return Hash{}, errors.New(`keystore: hash must be "sha256:" and 64 hex digits`)
	}
	if _, err := hex.Decode(h[:], []byte(s[len(hashPrefix):])); err != nil {
		return Hash{}, errors.New(`keystore: hash must be "sha256:" and 64 hex digits`)
	}
	return h, nil
}

// MarshalText implements encoding.TextMarshaler (used by JSON and YAML).
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (used by JSON and YAML).
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}
