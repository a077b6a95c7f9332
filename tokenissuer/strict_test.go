package tokenissuer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/testsupport/jwstest"
)

// signingKey is the issuer's real signing key, read from its Store as an
// attacker who stole it would.
func signingKey(t *testing.T, f *fixture) (kid string, priv *ecdsa.PrivateKey) {
	t.Helper()
	st, err := f.store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.Keys {
		if !k.Retiring.IsZero() {
			continue
		}
		raw, err := x509.ParsePKCS8PrivateKey(k.Private)
		if err != nil {
			t.Fatal(err)
		}
		return k.Kid, raw.(*ecdsa.PrivateKey)
	}
	t.Fatal("no signing key")
	return "", nil
}

// TestStrictTokens: a token signed with the issuer's real key is refused
// (401, invalid_token) when it names a crit extension, writes a
// NumericDate as anything but a number, lives longer than the configured
// ttl, carries the high-S twin of its ECDSA signature, or spells any
// segment in other than canonical base64url: one token, one spelling.
// The same key and claims, spelled canonically, are accepted (so each
// refusal is the one thing changed).
func TestStrictTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "ES256")
	f.token(t) // the issuer learns the key behind the id, as on any token
	kid, priv := signingKey(t, f)
	now := time.Now().Unix()
	header := func(extra string) string {
		return fmt.Sprintf(`{"alg":"ES256","kid":%q,"typ":"at+jwt"%s}`, kid, extra)
	}
	claims := func(iat, nbf, exp string) string {
		c := fmt.Sprintf(`{"iss":"https://keygate.test","sub":%q,"aud":["https://keygate.test"],"jti":"j1","client_id":%q,"scope":"extraction:sync","env":"live","context":%q`, f.id, f.id, ctxA)
		for _, kv := range [][2]string{{"iat", iat}, {"nbf", nbf}, {"exp", exp}} {
			if kv[1] != "" {
				c += fmt.Sprintf(`,%q:%s`, kv[0], kv[1])
			}
		}
		return c + "}"
	}
	n := func(v int64) string { return fmt.Sprint(v) }
	good := claims(n(now), n(now), n(now+int64(f.cfg.TTL/time.Second)))
	cases := []struct {
		name           string
		header, claims string
		o              jwstest.Options
		ok             bool
	}{
		{"control: canonical, low S", header(""), good, jwstest.Options{}, true},
		{"crit naming an unknown extension", header(`,"crit":["urn:example:ext"],"urn:example:ext":1`), good, jwstest.Options{}, false},
		{"crit empty", header(`,"crit":[]`), good, jwstest.Options{}, false},
		{"crit not an array", header(`,"crit":"exp"`), good, jwstest.Options{}, false},
		{"crit naming a registered header", header(`,"crit":["alg"]`), good, jwstest.Options{}, false},
		{"exp a string", header(""), claims(n(now), n(now), fmt.Sprintf(`"%d"`, now+60)), jwstest.Options{}, false},
		{"exp a boolean", header(""), claims(n(now), n(now), "true"), jwstest.Options{}, false},
		{"exp null", header(""), claims(n(now), n(now), "null"), jwstest.Options{}, false},
		{"nbf a string", header(""), claims(n(now), fmt.Sprintf(`"%d"`, now), n(now+60)), jwstest.Options{}, false},
		{"iat a string", header(""), claims(fmt.Sprintf(`"%d"`, now), n(now), n(now+60)), jwstest.Options{}, false},
		{"iat an array", header(""), claims("[1]", n(now), n(now+60)), jwstest.Options{}, false},
		{"no iat", header(""), claims("", n(now), n(now+60)), jwstest.Options{}, false},
		{"exp ten years after iat", header(""), claims(n(now), n(now), n(now+10*365*86400)), jwstest.Options{}, false},
		{"exp one second past iat plus the ttl", header(""), claims(n(now), n(now), n(now+int64(f.cfg.TTL/time.Second)+1)), jwstest.Options{}, false},
		{"a claim named twice", header(""), good[:len(good)-1] + `,"exp":` + n(now+60) + "}", jwstest.Options{}, false},
		{"high-S signature", header(""), good, jwstest.Options{HighS: true}, false},
	}
	for _, seg := range []struct {
		name string
		s    jwstest.Segment
	}{{"header", jwstest.Header}, {"payload", jwstest.Payload}, {"signature", jwstest.Signature}} {
		for _, sp := range []struct {
			name string
			how  jwstest.Spelling
		}{{"padded", jwstest.Padded}, {"non-zero trailing bits", jwstest.TrailingBits}, {"a line break", jwstest.LineBreak}} {
			cases = append(cases, struct {
				name           string
				header, claims string
				o              jwstest.Options
				ok             bool
			}{seg.name + " " + sp.name, jwstest.Unaligned(header("")), jwstest.Unaligned(good), jwstest.Options{Which: seg.s, How: sp.how}, false})
		}
	}
	cases = append(cases, struct {
		name           string
		header, claims string
		o              jwstest.Options
		ok             bool
	}{"signature in the +/ alphabet", header(""), good, jwstest.Options{Which: jwstest.Signature, How: jwstest.StdAlphabet}, false})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tok := jwstest.SignES(t, priv, c.header, c.claims, c.o)
			v, err := f.iss.Verify(context.Background(), tok)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != c.ok {
				t.Fatalf("accepted %v, want %v (%+v)", v.OK, c.ok, v)
			}
			if !c.ok && (v.Status != 0 && v.Status != http.StatusUnauthorized || v.Challenge != `Bearer error="invalid_token"` || v.Reason == auth.ReasonUnknown) {
				t.Errorf("refusal %+v, want 401 invalid_token", v)
			}
		})
	}
}

// TestIssuedTokensAreLowS: every ES256 token the endpoint issues carries
// the low-S half of its signature (the verifier refuses the other), and
// is accepted. ECDSA picks either half at random, so 40 tokens all low
// by chance would be a 2^-40 event.
func TestIssuedTokensAreLowS(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "ES256")
	_, priv := signingKey(t, f)
	for i := range 40 {
		tok := f.token(t)
		if jwstest.HighS(t, priv, tok) {
			t.Fatalf("token %d has a high-S signature", i)
		}
		if v, err := f.iss.Verify(context.Background(), tok); err != nil || !v.OK {
			t.Fatalf("token %d refused: %+v %v", i, v, err)
		}
	}
}
