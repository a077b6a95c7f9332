package keystore

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const ctxA = "3f2c8a1e-5b7d-4c9a-8e21-0d6f4b3a9c10"

func validRecord(t testing.TB) Record {
	t.Helper()
	_, r, err := NewRecord(IssueRequest{Product: Extraction, Env: Live, Context: ctxA, Name: "team a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestStateAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rec  Record
		at   time.Time
		want Status
	}{
		{"active, no expiry", Record{Status: Active}, t0.Add(1000 * time.Hour), Active},
		{"active before expiry", Record{Status: Active, ExpiresAt: t0}, t0.Add(-time.Second), Active},
		{"active at expiry", Record{Status: Active, ExpiresAt: t0}, t0, Expired},
		{"active after expiry", Record{Status: Active, ExpiresAt: t0}, t0.Add(time.Second), Expired},
		{"revoked", Record{Status: Revoked, RevokedAt: t0}, t0, Revoked},
		{"revoked and past expiry", Record{Status: Revoked, ExpiresAt: t0}, t0.Add(time.Hour), Revoked},
		{"rotated in grace", Record{Status: Rotated, ExpiresAt: t0}, t0.Add(-time.Minute), Active},
		{"rotated after grace", Record{Status: Rotated, ExpiresAt: t0}, t0.Add(time.Minute), Expired},
		{"rotated without end of grace", Record{Status: Rotated}, t0, Expired},
		{"unknown stored status refuses", Record{Status: "bogus"}, t0, Revoked},
		{"empty stored status refuses", Record{}, t0, Revoked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.rec.StateAt(tc.at); got != tc.want {
				t.Errorf("StateAt = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestEndedAt: a purge deletes keys by when they stopped opening
// anything. A key that still opens something, or whose end nobody
// recorded, has no end and is never purged.
func TestEndedAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rec  Record
		want time.Time // zero: no end
	}{
		{"active", Record{Status: Active}, time.Time{}},
		{"active until later", Record{Status: Active, ExpiresAt: t0.Add(time.Hour)}, time.Time{}},
		{"expired", Record{Status: Active, ExpiresAt: t0.Add(-time.Hour)}, t0.Add(-time.Hour)},
		{"revoked", Record{Status: Revoked, RevokedAt: t0.Add(-2 * time.Hour)}, t0.Add(-2 * time.Hour)},
		{"revoked after it expired: its revocation", Record{Status: Revoked, ExpiresAt: t0.Add(-5 * time.Hour), RevokedAt: t0.Add(-2 * time.Hour)}, t0.Add(-2 * time.Hour)},
		{"revoked, no time recorded", Record{Status: Revoked}, time.Time{}},
		{"rotated, in grace", Record{Status: Rotated, ExpiresAt: t0.Add(time.Minute)}, time.Time{}},
		{"rotated, past grace", Record{Status: Rotated, ExpiresAt: t0.Add(-time.Minute)}, t0.Add(-time.Minute)},
		{"rotated without end of grace", Record{Status: Rotated}, time.Time{}},
		{"unknown stored status", Record{Status: "bogus"}, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tc.rec.EndedAt(t0)
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("EndedAt = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

func TestViewJSON(t *testing.T) {
	t.Parallel()
	r := validRecord(t)
	b, err := json.Marshal(r.View(t0))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "name", "product", "env", "context", "status", "created_at", "expires_at"} {
		if _, ok := m[f]; !ok {
			t.Errorf("view JSON lacks %q: %s", f, b)
		}
	}
	if m["expires_at"] != nil {
		t.Errorf("expires_at of a key that never expires = %v, want null", m["expires_at"])
	}
	if strings.Contains(string(b), "sha256") || strings.Contains(string(b), "hash") {
		t.Errorf("view JSON shows the hash: %s", b)
	}
	if _, ok := m["revoked_at"]; ok {
		t.Errorf("active key shows revoked_at: %s", b)
	}

	// The record itself also keeps the hash out of JSON.
	rb, _ := json.Marshal(r)
	if strings.Contains(string(rb), r.Hash.String()[7:]) || strings.Contains(string(rb), "hash") {
		t.Errorf("record JSON shows the hash: %s", rb)
	}

	// Status is derived at the time of listing.
	_, rot, _, err := RotateRecord(r, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(rot.View(t0.Add(2 * time.Hour)))
	var v RecordView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != Expired || v.StoredStatus != Rotated || v.ExpiresAt == nil || !v.ExpiresAt.Equal(t0.Add(time.Hour)) || v.ReplacedBy == "" {
		t.Errorf("view of rotated key after grace = %+v", v)
	}
	if !strings.Contains(string(b), `"expires_at":"2025-06-01T13:00:00Z"`) {
		t.Errorf("expires_at not RFC 3339: %s", b)
	}
}

func TestIssueRequestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		req     IssueRequest
		wantErr string // substring; "" means valid
	}{
		{"extraction with context", IssueRequest{Product: Extraction, Env: Live, Context: ctxA}, ""},
		{"extraction with upper-case context", IssueRequest{Product: Extraction, Env: Test, Context: strings.ToUpper(ctxA)}, ""},
		{"registry without context", IssueRequest{Product: Registry, Env: Live}, ""},
		{"registry with context", IssueRequest{Product: Registry, Env: Live, Context: ctxA, ExpiresIn: time.Hour}, ""},
		{"extraction without context", IssueRequest{Product: Extraction, Env: Live}, "context: required"},
		{"context not a UUID", IssueRequest{Product: Extraction, Env: Live, Context: "ctx-1"}, "context: must be a UUID"},
		{"registry context not a UUID", IssueRequest{Product: Registry, Env: Live, Context: ctxA[:35] + "g"}, "context: must be a UUID"},
		{"context with braces", IssueRequest{Product: Registry, Env: Live, Context: "{" + ctxA[1:35] + "}"}, "context: must be a UUID"},
		{"unknown product", IssueRequest{Product: "billing", Env: Live}, "product: must be"},
		{"empty product", IssueRequest{Env: Live}, "product: must be"},
		{"unknown env", IssueRequest{Product: Registry, Env: "prod"}, "env: must be"},
		{"negative expiry", IssueRequest{Product: Registry, Env: Live, ExpiresIn: -time.Second}, "expires_in: must not be negative"},
		{"name with newline", IssueRequest{Product: Registry, Env: Live, Name: "a\nb"}, "name: must not contain control"},
		{"name too long", IssueRequest{Product: Registry, Env: Live, Name: strings.Repeat("x", 201)}, "name: must be at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.req.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewRecord(t *testing.T) {
	t.Parallel()
	now := t0.Add(1500 * time.Millisecond).In(time.FixedZone("X", 3600))
	key, r, err := NewRecord(IssueRequest{Product: Extraction, Env: Test, Context: strings.ToUpper(ctxA), Name: "n", ExpiresIn: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if env, err := Parse(key); err != nil || env != Test {
		t.Fatalf("issued key: %v, %v", env, err)
	}
	if r.Hash != HashKey(key) || r.Context != ctxA || r.Status != Active || r.Env != Test || r.Product != Extraction || r.Name != "n" {
		t.Errorf("record = %+v", r)
	}
	if !strings.HasPrefix(r.ID, "key_") || len(r.ID) != 20 {
		t.Errorf("id = %q, want key_ and 16 hex digits", r.ID)
	}
	if !r.CreatedAt.Equal(t0.Add(time.Second)) || r.CreatedAt.Location() != time.UTC || !r.ExpiresAt.Equal(r.CreatedAt.Add(24*time.Hour)) {
		t.Errorf("created %v, expires %v", r.CreatedAt, r.ExpiresAt)
	}
	if err := ValidateRecord(r); err != nil {
		t.Error(err)
	}
	if _, _, err := NewRecord(IssueRequest{Product: Extraction, Env: Live}, now); err == nil {
		t.Error("NewRecord accepted an invalid request")
	}
}

func TestValidateRecords(t *testing.T) {
	t.Parallel()
	a, b := validRecord(t), validRecord(t)
	mod := func(f func(r *Record)) []Record {
		x := b
		f(&x)
		return []Record{a, x}
	}
	tests := []struct {
		name    string
		recs    []Record
		wantErr string
	}{
		{"two good records", []Record{a, b}, ""},
		{"none", nil, ""},
		{"duplicate id", mod(func(r *Record) { r.ID = a.ID }), "keys[1]: duplicate id " + a.ID},
		{"duplicate hash", mod(func(r *Record) { r.Hash = a.Hash }), "keys[1]: duplicate hash"},
		{"unknown product", mod(func(r *Record) { r.Product = "x" }), "keys[1]: product"},
		{"unknown env", mod(func(r *Record) { r.Env = "prod" }), "keys[1]: env"},
		{"missing hash", mod(func(r *Record) { r.Hash = Hash{} }), "keys[1]: hash: required"},
		{"missing id", mod(func(r *Record) { r.ID = "" }), "keys[1]: id"},
		{"id with spaces", mod(func(r *Record) { r.ID = "key 1" }), "keys[1]: id"},
		{"extraction without context", mod(func(r *Record) { r.Context = "" }), "keys[1]: context: required"},
		{"stored expired", mod(func(r *Record) { r.Status = Expired }), "keys[1]: status: expired is derived"},
		{"unknown status", mod(func(r *Record) { r.Status = "paused" }), "keys[1]: status"},
		{"rotated without end of grace", mod(func(r *Record) { r.Status = Rotated }), "keys[1]: expires_at: required"},
		{"bad replaced_by", mod(func(r *Record) { r.ReplacedBy = "a b" }), "keys[1]: replaced_by"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateRecords(tc.recs)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateRecords = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateRecords = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRotateRecord(t *testing.T) {
	t.Parallel()
	base := validRecord(t)
	withExpiry := base
	withExpiry.ExpiresAt = t0.Add(30 * time.Minute)
	lifetime := base
	lifetime.ExpiresAt = t0.Add(90 * 24 * time.Hour)
	now := t0.Add(time.Minute)

	tests := []struct {
		name          string
		old           Record
		grace         time.Duration
		wantErr       error
		wantOld       Status // stored
		wantOldEnd    time.Time
		wantNewExpiry time.Time
	}{
		{"grace keeps old key until end", base, time.Hour, nil, Rotated, now.Add(time.Hour), time.Time{}},
		{"grace capped by own expiry", withExpiry, time.Hour, nil, Rotated, withExpiry.ExpiresAt, t0.Add(time.Minute + 30*time.Minute)},
		{"no grace revokes at once", base, 0, nil, Revoked, time.Time{}, time.Time{}},
		{"replacement inherits lifetime", lifetime, time.Hour, nil, Rotated, now.Add(time.Hour), now.Add(90 * 24 * time.Hour)},
		{"revoked key", mustRevoke(t, base), time.Hour, ErrRevoked, "", time.Time{}, time.Time{}},
		{"already rotated key", rotated(t, base), time.Hour, ErrRotated, "", time.Time{}, time.Time{}},
		{"expired key", func() Record { r := base; r.ExpiresAt = t0; return r }(), time.Hour, ErrExpired, "", time.Time{}, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key, old, repl, err := RotateRecord(tc.old, now, tc.grace)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("RotateRecord error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if repl.Hash != HashKey(key) || repl.ID == tc.old.ID || repl.Product != tc.old.Product ||
				repl.Env != tc.old.Env || repl.Context != tc.old.Context || repl.Name != tc.old.Name || repl.Status != Active {
				t.Errorf("replacement = %+v", repl)
			}
			if !repl.ExpiresAt.Equal(tc.wantNewExpiry) {
				t.Errorf("replacement expires %v, want %v", repl.ExpiresAt, tc.wantNewExpiry)
			}
			if old.Status != tc.wantOld || old.ReplacedBy != repl.ID {
				t.Errorf("old = %s replaced by %q", old.Status, old.ReplacedBy)
			}
			if tc.wantOld == Rotated {
				if !old.ExpiresAt.Equal(tc.wantOldEnd) {
					t.Errorf("old expires %v, want %v", old.ExpiresAt, tc.wantOldEnd)
				}
				if old.StateAt(now) != Active || old.StateAt(tc.wantOldEnd) != Expired {
					t.Errorf("old key not active in grace and expired after it")
				}
			} else if old.StateAt(now) != Revoked || !old.RevokedAt.Equal(now) {
				t.Errorf("old key state %s revoked at %v", old.StateAt(now), old.RevokedAt)
			}
			if err := ValidateRecords([]Record{old, repl}); err != nil {
				t.Error(err)
			}
		})
	}
	if _, _, _, err := RotateRecord(base, now, -time.Second); err == nil {
		t.Error("negative grace accepted")
	}
}

func mustRevoke(t *testing.T, r Record) Record {
	t.Helper()
	r, err := RevokeRecord(r, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RevokeRecord(r, t0); !errors.Is(err, ErrRevoked) {
		t.Fatalf("second revoke = %v, want ErrRevoked", err)
	}
	return r
}

func rotated(t *testing.T, r Record) Record {
	t.Helper()
	_, old, _, err := RotateRecord(r, t0, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return old
}

// The old key of a rotation works for at least the whole grace period,
// although times are stored to the second.
func TestRotateGraceIsNeverShort(t *testing.T) {
	old := validRecord(t)
	for _, frac := range []time.Duration{0, time.Millisecond, 900 * time.Millisecond} {
		now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).Add(frac)
		_, after, _, err := RotateRecord(old, now, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if last := now.Add(5*time.Second - time.Nanosecond); after.StateAt(last) != Active {
			t.Errorf("rotated at +%s: the old key stops at %s, before the 5 s grace ends", frac, after.ExpiresAt)
		}
		if after.ExpiresAt.Sub(now) > 6*time.Second {
			t.Errorf("rotated at +%s: grace stretched to %s", frac, after.ExpiresAt.Sub(now))
		}
	}
}
