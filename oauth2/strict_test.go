package oauth2_test

import (
	"crypto/ecdsa"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/jwstest"
	"github.com/keygate/keygate/internal/testsupport/oauth2test"
	"github.com/keygate/keygate/oauth2"
)

// TestStrictExternalTokens: a token signed with the external issuer's
// real key is refused (401 invalid_token) for a crit header, a
// NumericDate that is not a number, a lifetime over max_token_lifetime
// (from iat, or from now without iat), a duplicate claim, or any segment
// spelled in other than canonical base64url. A high-S ECDSA signature is
// accepted: external signers emit either half (see the oauth2 package).
func TestStrictExternalTokens(t *testing.T) {
	t.Parallel()
	ecS := oauth2test.EC(t, 0, "ec-1")
	is := oauth2test.NewIssuer(t, ecS)
	a := newAuthenticator(t, is, func(c *oauth2.Config) { c.MaxTokenLifetime = time.Hour })
	priv := ecS.Raw.(*ecdsa.PrivateKey)
	now := time.Now().Unix()
	header := func(extra string) string { return `{"alg":"ES256","kid":"ec-1","typ":"JWT"` + extra + `}` }
	claims := func(iat, exp string) string {
		c := fmt.Sprintf(`{"iss":%q,"sub":"user-1","client_id":"client-123","aud":[%q],"scope":"extraction:sync","context":%q,"nbf":%d`, testIssuer, testAudience, testContext, now-60)
		if iat != "" {
			c += `,"iat":` + iat
		}
		return c + `,"exp":` + exp + "}"
	}
	n := func(v int64) string { return fmt.Sprint(v) }
	good := claims(n(now-60), n(now+600))
	type tc struct {
		name           string
		header, claims string
		o              jwstest.Options
		ok             bool
	}
	cases := []tc{
		{"control: canonical", header(""), good, jwstest.Options{}, true},
		{"control: high-S, as external signers emit", header(""), good, jwstest.Options{HighS: true}, true},
		{"control: no iat, exp within the cap", header(""), claims("", n(now+600)), jwstest.Options{}, true},
		{"crit naming an unknown extension", header(`,"crit":["urn:example:ext"],"urn:example:ext":1`), good, jwstest.Options{}, false},
		{"crit empty", header(`,"crit":[]`), good, jwstest.Options{}, false},
		{"crit malformed", header(`,"crit":7`), good, jwstest.Options{}, false},
		{"exp a string", header(""), claims(n(now-60), fmt.Sprintf(`"%d"`, now+600)), jwstest.Options{}, false},
		{"exp a boolean", header(""), claims(n(now-60), "true"), jwstest.Options{}, false},
		{"exp null", header(""), claims(n(now-60), "null"), jwstest.Options{}, false},
		{"iat a string", header(""), claims(fmt.Sprintf(`"%d"`, now-60), n(now+600)), jwstest.Options{}, false},
		{"exp ten years after iat", header(""), claims(n(now-60), n(now+10*365*86400)), jwstest.Options{}, false},
		{"no iat, exp past the cap from now", header(""), claims("", n(now+7200)), jwstest.Options{}, false},
		{"a claim named twice", header(""), good[:len(good)-1] + `,"sub":"user-2"}`, jwstest.Options{}, false},
		{"signature in the +/ alphabet", header(""), good, jwstest.Options{Which: jwstest.Signature, How: jwstest.StdAlphabet}, false},
	}
	for _, seg := range []jwstest.Segment{jwstest.Header, jwstest.Payload, jwstest.Signature} {
		for _, how := range []jwstest.Spelling{jwstest.Padded, jwstest.TrailingBits, jwstest.LineBreak} {
			cases = append(cases, tc{fmt.Sprintf("segment %d spelling %d", seg, how), jwstest.Unaligned(header("")), jwstest.Unaligned(good), jwstest.Options{Which: seg, How: how}, false})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tok := jwstest.SignES(t, priv, c.header, c.claims, c.o)
			v, err := a.Authenticate(bearerRequest(tok))
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != c.ok {
				t.Fatalf("accepted %v, want %v (%+v)", v.OK, c.ok, v)
			}
			if !c.ok && (v.Status != 0 && v.Status != http.StatusUnauthorized || v.Challenge != oauth2.ChallengeInvalidToken) {
				t.Errorf("refusal %+v, want 401 invalid_token", v)
			}
		})
	}
}
