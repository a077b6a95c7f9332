package keystore

// The Redis keystore's layout, shared by its read side (redis.go) and
// its write side (redis_admin.go).

import (
	"encoding/json"
	"fmt"
)

// Redis key layout. Both hashes share one Cluster hash tag, so every
// transaction touches a single slot:
//
//	<prefix>keystore:{ks}:records  field "sha256:<hex>" -> record JSON
//	<prefix>keystore:{ks}:ids      field "<key id>"     -> "sha256:<hex>"
//
//	<prefix>keystore:{ks}:consumers field "<consumer id>" -> consumer JSON
//
// Changes are announced on <prefix>keystore:changes with the changed hashes
// and "con:<consumer id>" items (comma-separated), or "*" for "re-read
// everything".
type redisKeys struct {
	records, ids, channel string
	consumers             string // field "<consumer id>" -> consumer JSON
}

func newRedisKeys(prefix string) redisKeys {
	if prefix == "" {
		prefix = "keygate:"
	}
	return redisKeys{
		records:   prefix + "keystore:{ks}:records",
		ids:       prefix + "keystore:{ks}:ids",
		channel:   prefix + "keystore:changes",
		consumers: prefix + "keystore:{ks}:consumers",
	}
}

// storedRecord is a record as kept in Redis: the JSON form plus the hash,
// which the JSON form leaves out.
type storedRecord struct {
	Record
	Hash Hash `json:"hash"`
}

func encodeRecord(r Record) (string, error) {
	b, err := json.Marshal(storedRecord{Record: r, Hash: r.Hash})
	return string(b), err
}

func decodeRecord(field, value string) (Record, error) {
	var s storedRecord
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return Record{}, fmt.Errorf("keystore: record %s: %w", field, err)
	}
	r := s.Record
	r.Hash = s.Hash
	if h, err := ParseHash(field); err != nil || h != r.Hash {
		return Record{}, fmt.Errorf("keystore: record under %q does not match its hash", field)
	}
	return r, ValidateRecord(r)
}
