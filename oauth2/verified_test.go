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
		// checked: the uses after the change are all checked in full (in
		// the leeway after its exp a token is accepted, not cached).
		checked bool
	}{
		{"nothing changes, a minute later", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			clock.Add(int64(time.Minute))
		}, "", false},
		{"its lifetime is over but not the leeway", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			clock.Add(int64(10*time.Minute + 20*time.Second))
		}, "", true},
		{"its lifetime and the leeway are over", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			clock.Add(int64(10*time.Minute + 31*time.Second))
		}, auth.ReasonExpired, true},
		{"the key set is fetched again and still holds its key", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			refetch(t, a, is, clock)
		}, "", false},
		{"its key is withdrawn from the issuer's key set", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			is.Withdraw("rsa-1")
			refetch(t, a, is, clock)
		}, auth.ReasonInvalid, true},
		{"another key takes its kid", func(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
			is.Withdraw("rsa-1")
			is.Publish(t, oauth2test.RSA(t, 1, "rsa-1"))
			refetch(t, a, is, clock)
		}, auth.ReasonInvalid, true},
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
			answered := a.CacheStats().Answered
			for use := range 2 {
				v, err := a.Authenticate(bearerRequest(tok))
				if err != nil {
					t.Fatal(err)
				}
				if c.want == "" && (!v.OK || v.Principal.ID != "oauth2:client-123") || c.want != "" && (v.OK || v.Reason != c.want) {
					t.Fatalf("use %d after the change: %+v, want refused %q", use+1, v, c.want)
				}
			}
			// While the token's key stands, its signature is not checked
			// again: both uses are answered from the cache.
			if got, want := a.CacheStats().Answered-answered, map[bool]uint64{false: 2, true: 0}[c.checked]; got != want {
				t.Errorf("%d uses after the change answered from the cache, want %d", got, want)
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

// refetch makes a fetch the issuer's key set again: a token of a kid it
// has not seen does.
func refetch(t *testing.T, a *oauth2.Authenticator, is *oauth2test.Issuer, clock *atomic.Int64) {
	t.Helper()
	other := oauth2test.NewEC(t, "ec-2")
	is.Publish(t, other)
	n := is.Fetches.Load()
	if v, err := a.Authenticate(bearerRequest(oauth2test.Mint(t, other, claimsAt(clock)))); err != nil || !v.OK {
		t.Fatalf("a token of the new key: %+v, %v", v, err)
	}
	if is.Fetches.Load() == n {
		t.Fatal("the key set was not fetched again")
	}
}
