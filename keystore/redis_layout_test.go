package keystore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

// FuzzDecodeRecordFast: whatever the fast decoder of stored records
// accepts, encoding/json decodes to the same record.
func FuzzDecodeRecordFast(f *testing.F) {
	r := randomRecord(f, 1)
	r.ExpiresAt = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	r.RevokedAt, r.Status, r.ReplacedBy = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Revoked, "key_0000000000000002"
	v, err := encodeRecord(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v)
	r.Override = &policy.Override{Rate: 1, Per: time.Second}
	v, _ = encodeRecord(r)
	f.Add(v)
	f.Add(`{"id":"a\u0062","hash":"sha256:00"}`)
	f.Add(`{"ID":"x"}`)
	f.Fuzz(func(t *testing.T, v string) {
		fast, ok := decodeRecordFast(v)
		if !ok {
			return
		}
		var s storedRecord
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			t.Fatalf("fast decoder accepted what encoding/json refuses (%v): %s", err, v)
		}
		slow := s.Record
		slow.Hash = s.Hash
		if !reflect.DeepEqual(fast, slow) && !(recordsEqual(fast, slow) && fast.Consumer == slow.Consumer && fast.Plan == slow.Plan) {
			t.Fatalf("fast %+v\nslow %+v\n%s", fast, slow, v)
		}
	})
}
