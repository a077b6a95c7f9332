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

// FuzzDecodeConsumerFast: whatever the fast decoder of stored consumers
// accepts, encoding/json decodes to the same consumer, and a consumer of
// string fields only, as encodeConsumer writes it, takes the fast path.
func FuzzDecodeConsumerFast(f *testing.F) {
	c := Consumer{ID: "con_0123456789abcdef", Name: "Acme", Plan: "pro", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	v, err := encodeConsumer(c)
	if err != nil {
		f.Fatal(err)
	}
	if got, ok := decodeConsumerFast(v); !ok || !reflect.DeepEqual(got, c) {
		f.Fatalf("a consumer of strings only: %+v, %v from %s", got, ok, v)
	}
	f.Add(v)
	c.UpdatedAt = time.Date(2026, 2, 2, 3, 4, 5, 0, time.FixedZone("", 2*3600))
	v, _ = encodeConsumer(c)
	f.Add(v)
	c.Metadata, c.Contexts = map[string]string{"crm": "7"}, []string{"3fa85f64-5717-4562-b3fc-2c963f66afa6"}
	v, _ = encodeConsumer(c)
	f.Add(v)
	f.Add(`{"id":"con_0123456789abcdef","created_at":"2026-01-02T03:04:05+24:00"}`)
	f.Add(`{"ID":"x","name":"a","name":"b"}`)
	f.Fuzz(func(t *testing.T, v string) {
		fast, ok := decodeConsumerFast(v)
		if !ok {
			return
		}
		var slow Consumer
		if err := json.Unmarshal([]byte(v), &slow); err != nil {
			t.Fatalf("fast decoder accepted what encoding/json refuses (%v): %s", err, v)
		}
		sameTime := func(a, b time.Time) bool {
			_, ao := a.Zone()
			_, bo := b.Zone()
			return a.Equal(b) && ao == bo && a.Location().String() == b.Location().String()
		}
		if !sameTime(fast.CreatedAt, slow.CreatedAt) || !sameTime(fast.UpdatedAt, slow.UpdatedAt) {
			t.Fatalf("times: fast %v %v, slow %v %v\n%s", fast.CreatedAt, fast.UpdatedAt, slow.CreatedAt, slow.UpdatedAt, v)
		}
		fast.CreatedAt, fast.UpdatedAt, slow.CreatedAt, slow.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast %+v\nslow %+v\n%s", fast, slow, v)
		}
	})
}
