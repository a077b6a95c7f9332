package jwscheck_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/jwscheck"
	"github.com/keygate/keygate/internal/testsupport/jwstest"
)

// TestLowS: LowS turns a high-S token into its low-S twin, which Check
// with LowS accepts where it refused the original; a low-S token is left
// as it is.
func TestLowS(t *testing.T) {
	t.Parallel()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o := jwscheck.Options{LowS: true}
	for _, high := range []bool{false, true} {
		tok := jwstest.SignES(t, priv, `{"alg":"ES256"}`, `{"exp":1}`, jwstest.Options{HighS: high})
		if err := jwscheck.Check(tok, o); high != errors.Is(err, jwscheck.ErrHighS) {
			t.Fatalf("high %v: Check = %v", high, err)
		}
		low, err := jwscheck.LowS("ES256", tok)
		if err != nil || jwscheck.Check(low, o) != nil || (!high && low != tok) || (high && low == tok) {
			t.Fatalf("high %v: LowS = %q, %v", high, low, err)
		}
	}
}

// TestLifetimeWithoutIat: a token without iat is capped from now (plus
// the leeway).
func TestLifetimeWithoutIat(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	o := jwscheck.Options{MaxLifetime: time.Hour, Leeway: 30 * time.Second, Now: func() time.Time { return now }}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tok := func(claims string) string { return enc(`{"alg":"RS256"}`) + "." + enc(claims) + ".c2ln" }
	if err := jwscheck.Check(tok(`{"exp":1003620}`), o); err != nil {
		t.Errorf("exp an hour and 20s ahead: %v", err)
	}
	if err := jwscheck.Check(tok(`{"exp":1003640}`), o); !errors.Is(err, jwscheck.ErrLifetime) {
		t.Errorf("exp an hour and 40s ahead: %v", err)
	}
}

// FuzzCheck: Check never panics, and what it accepts has one spelling:
// every segment re-encodes to itself.
func FuzzCheck(f *testing.F) {
	f.Add("eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjF9.c2ln")
	f.Add("eyJhbGciOiJFUzI1NiIsImNyaXQiOltdfQ.e30.c2ln")
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, raw string) {
		if jwscheck.Check(raw, jwscheck.Options{LowS: true, MaxLifetime: time.Hour}) != nil {
			return
		}
		seg := 0
		start := 0
		for i := 0; i <= len(raw); i++ {
			if i < len(raw) && raw[i] != '.' {
				continue
			}
			s := raw[start:i]
			b, err := base64.RawURLEncoding.DecodeString(s)
			if err != nil || base64.RawURLEncoding.EncodeToString(b) != s {
				t.Fatalf("accepted segment %q is not canonical", s)
			}
			seg++
			start = i + 1
		}
		if seg != 3 {
			t.Fatalf("accepted %d segments", seg)
		}
	})
}
