package tokenissuer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/tokenissuer"
)

// TestAcceptedTokenIsCheckedAgainOnEveryUse: a token is accepted on every
// use while nothing changes, and refused at its next use once its key is
// revoked, its lifetime (and the leeway) is over, or its signing key is
// withdrawn, exactly as a token never checked before would be. Its
// signature is checked once (the issuer caches what it said), so each
// case first uses the token until that is so.
func TestAcceptedTokenIsCheckedAgainOnEveryUse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// change happens after the token was accepted three times; want
		// is the reason of the refusal after it ("" = still accepted).
		change func(t *testing.T, f *fixture, clock *atomic.Int64)
		want   auth.Reason
		// rechecked: its signature is checked again after the change (a
		// token past its exp, or whose key is gone); otherwise every use
		// after it is answered from the cache, accepted or refused by the
		// key behind it.
		rechecked bool
	}{
		{"nothing changes, a minute later", func(t *testing.T, f *fixture, clock *atomic.Int64) {
			clock.Add(int64(time.Minute))
		}, "", false},
		{"its lifetime is over but not the leeway", func(t *testing.T, f *fixture, clock *atomic.Int64) {
			clock.Add(int64(f.cfg.TTL + 20*time.Second))
		}, "", true},
		{"its lifetime and the leeway are over", func(t *testing.T, f *fixture, clock *atomic.Int64) {
			clock.Add(int64(f.cfg.TTL + 31*time.Second))
		}, auth.ReasonExpired, true},
		{"its key is revoked", func(t *testing.T, f *fixture, clock *atomic.Int64) {
			if _, err := f.admin.Revoke(context.Background(), f.id); err != nil {
				t.Fatal(err)
			}
		}, auth.ReasonRevoked, false},
		{"its signing key is rotated, and stays published", func(t *testing.T, f *fixture, clock *atomic.Int64) {
			rotate(t, f, clock, false)
		}, "", false},
		{"its signing key is withdrawn at once", func(t *testing.T, f *fixture, clock *atomic.Int64) {
			rotate(t, f, clock, true)
		}, auth.ReasonInvalid, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var clock atomic.Int64
			clock.Store(time.Now().UnixNano())
			f := newFixtureWith(t, "ES256", func() time.Time { return time.Unix(0, clock.Load()) })
			tok := f.token(t)
			ctx := context.Background()
			for range 3 {
				if v, err := f.iss.Verify(ctx, tok); err != nil || !v.OK || v.Principal.ID != f.id {
					t.Fatalf("before the change: %+v, %v", v, err)
				}
			}
			checks := f.iss.CacheStats().Checked
			c.change(t, f, &clock)
			// The keystore reloads its file on its own: a revocation is
			// seen when it has (a few ms), so wait for it up to 5 s.
			deadline := time.Now().Add(5 * time.Second)
			for {
				v, err := f.iss.Verify(ctx, tok)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case c.want == "" && v.OK && v.Principal.ID == f.id:
				case c.want != "" && !v.OK && v.Reason == c.want:
					assertRechecked(t, f, checks, c.rechecked)
					return
				case c.want != "" && v.OK && time.Now().Before(deadline):
					time.Sleep(5 * time.Millisecond)
					continue
				default:
					t.Fatalf("after the change: %+v, want refused %q", v, c.want)
				}
				break
			}
			// Still accepted: and on the next use too.
			if v, err := f.iss.Verify(ctx, tok); err != nil || !v.OK {
				t.Fatalf("second use after the change: %+v, %v", v, err)
			}
			assertRechecked(t, f, checks, c.rechecked)
		})
	}
}

// assertRechecked checks whether the issuer checked a token in full since
// it had checked checks of them.
func assertRechecked(t *testing.T, f *fixture, checks uint64, want bool) {
	t.Helper()
	if got := f.iss.CacheStats().Checked > checks; got != want {
		t.Errorf("the token's signature checked again: %v, want %v", got, want)
	}
}

// rotate makes a new signing key, withdrawing the others at once or not,
// and has the issuer read the keys.
func rotate(t *testing.T, f *fixture, clock *atomic.Int64, immediately bool) {
	t.Helper()
	now := time.Unix(0, clock.Load())
	if _, err := tokenissuer.Rotate(context.Background(), f.store, f.cfg, immediately, now); err != nil {
		t.Fatal(err)
	}
	if err := f.iss.RefreshNow(context.Background()); err != nil {
		t.Fatal(err)
	}
}
