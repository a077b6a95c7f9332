package keystore

// The Redis keystore's layout, shared by its read side (redis.go) and
// its write side (redis_admin.go).

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"time"
)

// redisBuckets is the number of hashes the records (and the id index)
// are spread over. It is part of the layout: changing it moves every
// record.
const redisBuckets = 256

// Redis key layout. Records are spread over 256 buckets, each its own
// Cluster hash tag, so that the key set spreads over a Cluster's slots
// and every bucket stays small enough to page with HSCAN:
//
//	<prefix>keystore:{ks:<bb>}:records  field "sha256:<hex>" -> record JSON
//	    (bb: the hash's first byte in hex)
//	<prefix>keystore:{ks:<bb>}:ids      field "<key id>"     -> "sha256:<hex>"
//	    (bb: CRC-32 of the id, low byte, in hex)
//	<prefix>keystore:{ks:<bb>}:consumers field "<consumer id>" -> consumer JSON
//	    (bb: CRC-32 of the consumer id, low byte, in hex)
//	<prefix>keystore:{ks}:log           stream of changes, field "c"
//
// Each change is appended to the log (XADD, trimmed to about
// redisLogLen entries) and published on <prefix>keystore:changes, both
// with the changed hashes and "con:<consumer id>" items
// (comma-separated), or "*" for "re-read everything". A replica catches
// up from the log; the message only wakes it.
type redisKeys struct {
	channel, log string
	// adminTokens and adminTokenIDs are the admin token hashes (see
	// admintoken_stores.go).
	adminTokens, adminTokenIDs string
	// epoch is the keystore's identity (see RedisStore.checkEpoch).
	epoch     string
	records   [redisBuckets]string
	ids       [redisBuckets]string
	consumers [redisBuckets]string
}

// redisLogLen is about how many changes the log keeps. A replica that
// falls further behind (away for longer) re-reads everything.
const redisLogLen = 100_000

func newRedisKeys(prefix string) *redisKeys {
	if prefix == "" {
		prefix = "keygate:"
	}
	base := prefix + "keystore:"
	k := &redisKeys{
		channel:       base + "changes",
		log:           base + "{ks}:log",
		adminTokens:   base + "{ks}:admin_tokens",
		adminTokenIDs: base + "{ks}:admin_token_ids",
		epoch:         base + "{ks}:epoch",
	}
	for b := range redisBuckets {
		tag := fmt.Sprintf("{ks:%02x}:", b)
		k.records[b] = base + tag + "records"
		k.ids[b] = base + tag + "ids"
		k.consumers[b] = base + tag + "consumers"
	}
	return k
}

// recordsOf is the bucket of the record with hash h.
func (k *redisKeys) recordsOf(h Hash) string { return k.records[h[0]] }

// idsOf is the bucket of the id index that holds id.
func (k *redisKeys) idsOf(id string) string { return k.ids[bucketOf(id)] }

// consumersOf is the bucket of the consumer with id.
func (k *redisKeys) consumersOf(id string) string { return k.consumers[bucketOf(id)] }

// bucketOf is the bucket of a key id or a consumer id.
func bucketOf(id string) uint32 { return crc32.ChecksumIEEE([]byte(id)) % redisBuckets }

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
	r, ok := decodeRecordFast(value)
	if !ok {
		var s storedRecord
		if err := json.Unmarshal([]byte(value), &s); err != nil {
			return Record{}, fmt.Errorf("keystore: record %s: %w", field, err)
		}
		r = s.Record
		r.Hash = s.Hash
	}
	if h, err := ParseHash(field); err != nil || h != r.Hash {
		return Record{}, fmt.Errorf("keystore: record under %q does not match its hash", field)
	}
	return r, ValidateRecord(r)
}

// decodeRecordFast decodes the JSON that encodeRecord writes, about four
// times faster than encoding/json for a load of a million records. It
// reads an object of string members only, without escapes; for anything
// else (an override, an escaped string, a member it does not know) it
// reports false and the caller uses encoding/json.
func decodeRecordFast(v string) (Record, bool) {
	var r Record
	ok := stringMembers(v, func(name, val string) bool { return setJSONField(&r, name, val) })
	return r, ok
}

// stringMembers calls set with the name and value of each member of the
// JSON object v, in order, and reports whether v is an object of string
// members only (ASCII, no escapes) and set took every one. It is the
// fast path of the keystore's decoders: for anything else the caller
// decodes v with encoding/json.
func stringMembers(v string, set func(name, val string) bool) bool {
	if len(v) < 2 || v[0] != '{' || v[len(v)-1] != '}' {
		return false
	}
	i := 1
	for {
		if i >= len(v)-1 {
			return i == 1 // "{}" only
		}
		name, next, ok := jsonString(v, i)
		if !ok || next >= len(v) || v[next] != ':' {
			return false
		}
		val, next, ok := jsonString(v, next+1)
		if !ok || !set(name, val) {
			return false
		}
		switch {
		case next == len(v)-1:
			return true
		case v[next] == ',':
			i = next + 1
		default:
			return false
		}
	}
}

// jsonString reads the string that starts at v[i]: ASCII, no escapes
// (encoding/json replaces invalid UTF-8, which this does not).
func jsonString(v string, i int) (s string, next int, ok bool) {
	if i >= len(v) || v[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '"':
			return v[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", j, false
		}
	}
	return "", len(v), false
}

func setJSONField(r *Record, name, v string) bool {
	var err error
	switch name {
	case "hash":
		r.Hash, err = ParseHash(v)
	case "created_at", "expires_at", "revoked_at":
		var t time.Time
		if t, err = time.Parse(time.RFC3339Nano, v); err == nil {
			switch name {
			case "created_at":
				r.CreatedAt = t
			case "expires_at":
				r.ExpiresAt = t
			default:
				r.RevokedAt = t
			}
		}
	default:
		bit := fieldBit([]byte(name))
		if bit == 0 {
			return false // unknown (encoding/json matches names case-insensitively)
		}
		// setField copies v: a slice of it would keep the whole stored
		// value alive as long as the record.
		err = setField(r, bit, []byte(v), nil)
	}
	return err == nil
}
