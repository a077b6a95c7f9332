package oauth2_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/oauth2"
)

// TestAcceptedTokenIsCheckedAgainOnEveryUse: a token is accepted on every
// use while nothing changes, and refused at its next use once its lifetime
// (and the leeway) is over, or once the issuer's key set no longer holds
// the key that signed it, exactly as a token never checked before would
// be. Its signature is checked once (the Authenticator caches what it
// said), so each case first uses the token until that is so.
func TestAcceptedTokenIsCheckedAgainOnEveryUse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64)
		want   auth.Reason // "" = still accepted
	}{
		{"nothing changes, a minute later", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			clock.Add(int64(time.Minute))
		}, ""},
		{"its lifetime is over but not the leeway", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			clock.Add(int64(10*time.Minute + 20*time.Second))
		}, ""},
		{"its lifetime and the leeway are over", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			clock.Add(int64(10*time.Minute + 31*time.Second))
		}, auth.ReasonExpired},
		{"its key is withdrawn from the issuer's key set", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			is.Withdraw("rsa-1")
			// A token of a kid the replica has not seen makes it fetch the
			// key set again.
			other := oauth2test.NewEC(t, "ec-2")
			is.Publish(t, other)
			if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, other, claimsAt(clock)))); err != nil || !v.OK {
				t.Fatalf("a token of the new key: %+v, %v", v, err)
			}
		}, auth.ReasonInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var clock atomic.Int64
			clock.Store(time.Now().UnixNano())
			s := oauth2test.RSA(t, 0, "rsa-1")
			is := oauth2test.NewIssuer(t, s)
			cfg := testConfig(is.JWKSURL())
			cfg.JWKSRefreshMinInterval = 0
			a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{HTTPClient: is.Server.Client(), Now: func() time.Time { return time.Unix(0, clock.Load()) }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Close() })
			tok := oauth2test.Mint(t, s, claimsAt(&clock))
			for range 3 {
				if v, err := a.Authenticate(bearerRequest(tok)); err != nil || !v.OK || v.Principal.ID != "oauth2:client-123" {
					t.Fatalf("before the change: %+v, %v", v, err)
				}
			}
			c.change(t, a, is, &clock)
			for use := range 2 {
				v, err := a.Authenticate(bearerRequest(tok))
				if err != nil {
					t.Fatal(err)
				}
				if c.want == "" && (!v.OK || v.Principal.ID != "oauth2:client-123") || c.want != "" && (v.OK || v.Reason != c.want) {
					t.Fatalf("use %d after the change: %+v, want refused %q", use+1, v, c.want)
				}
			}
		})
	}
}

// claimsAt is claims() on clock's time: a token that expires 10 minutes
// after it.
func claimsAt(clock *atomic.Int64) map[string]any {
	c, now := claims(), time.Unix(0, clock.Load())
	c["iat"], c["nbf"], c["exp"] = now.Add(-time.Minute), now.Add(-time.Minute), now.Add(10*time.Minute)
	return c
}
