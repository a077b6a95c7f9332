// Package jwstest signs compact JWSs by hand, byte for byte, as an
// attacker holding the real signing key would: any header, any claims
// (JSON written as is), any spelling of each segment, and either half of
// an ECDSA signature. The verifiers' strictness tests use it.
package jwstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"math/big"
	"strings"
	"testing"
)

// Spelling is how one segment is written.
type Spelling int

const (
	// Canonical is unpadded base64url with zero trailing bits.
	Canonical Spelling = iota
	// Padded appends '=' padding (or one '=' to a full group).
	Padded
	// StdAlphabet writes '+' and '/' for '-' and '_' (the segment must
	// hold one of them; Sign retries a signature until it does).
	StdAlphabet
	// TrailingBits sets the lowest unused bit of the last character (the
	// segment's length must not be a multiple of 4).
	TrailingBits
	// LineBreak puts a "\n" in the middle.
	LineBreak
)

// Segment is which of the three segments a Spelling applies to.
type Segment int

const (
	Header Segment = iota
	Payload
	Signature
)

// Options shape one token.
type Options struct {
	// HighS signs with s above half the curve order (n−s of a low one).
	HighS bool
	// Spell writes Segment Which with Spelling How (Canonical: none).
	Which Segment
	How   Spelling
}

// Encode writes b as base64url in spelling how.
func Encode(b []byte, how Spelling) string {
	s := base64.RawURLEncoding.EncodeToString(b)
	switch how {
	case Padded:
		if len(s)%4 == 0 {
			return s + "="
		}
		return base64.URLEncoding.EncodeToString(b)
	case StdAlphabet:
		return strings.NewReplacer("-", "+", "_", "/").Replace(s)
	case TrailingBits:
		const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := strings.IndexByte(alpha, s[len(s)-1])
		return s[:len(s)-1] + string(alpha[last|1])
	case LineBreak:
		return s[:len(s)/2] + "\n" + s[len(s)/2:]
	}
	return s
}

// SignES signs header and claims (JSON, as they are) with priv (P-256,
// P-384 or P-521, alg ES256, ES384 or ES512 by its size) as o says. The
// signing input is the segments as spelled, so a token with a
// non-canonical header or payload still carries a good signature.
func SignES(tb testing.TB, priv *ecdsa.PrivateKey, header, claims string, o Options) string {
	tb.Helper()
	spell := func(seg Segment, b []byte) string {
		if o.Which == seg {
			return Encode(b, o.How)
		}
		return Encode(b, Canonical)
	}
	input := spell(Header, []byte(header)) + "." + spell(Payload, []byte(claims))
	size := (priv.Curve.Params().BitSize + 7) / 8
	var h crypto.Hash
	switch size {
	case 32:
		h = crypto.SHA256
	case 48:
		h = crypto.SHA384
	default:
		h = crypto.SHA512
	}
	for range 200 {
		var digest []byte
		switch h {
		case crypto.SHA256:
			d := sha256.Sum256([]byte(input))
			digest = d[:]
		case crypto.SHA384:
			d := sha512.Sum384([]byte(input))
			digest = d[:]
		default:
			d := sha512.Sum512([]byte(input))
			digest = d[:]
		}
		r, s, err := ecdsa.Sign(rand.Reader, priv, digest)
		if err != nil {
			tb.Fatal(err)
		}
		n := priv.Curve.Params().N
		half := new(big.Int).Rsh(n, 1)
		if (s.Cmp(half) > 0) != o.HighS {
			s.Sub(n, s)
		}
		sig := make([]byte, 2*size)
		r.FillBytes(sig[:size])
		s.FillBytes(sig[size:])
		enc := spell(Signature, sig)
		if o.Which == Signature && o.How == StdAlphabet && !strings.ContainsAny(enc, "+/") {
			continue // this one has no '-' or '_' to respell: sign again
		}
		return input + "." + enc
	}
	tb.Fatal("jwstest: no signature with a '-' or '_' in 200 tries")
	return ""
}

// HighS reports whether the ECDSA signature of tok (ES256) has s above
// half the P-256 order.
func HighS(tb testing.TB, priv *ecdsa.PrivateKey, tok string) bool {
	tb.Helper()
	sig, err := base64.RawURLEncoding.DecodeString(tok[strings.LastIndexByte(tok, '.')+1:])
	if err != nil {
		tb.Fatal(err)
	}
	size := len(sig) / 2
	s := new(big.Int).SetBytes(sig[size:])
	return s.Cmp(new(big.Int).Rsh(priv.Curve.Params().N, 1)) > 0
}

// Unaligned pads the JSON object js with spaces before its closing brace
// until its base64url is not a whole number of groups, so that its last
// character has unused bits (for TrailingBits).
func Unaligned(js string) string {
	for len(base64.RawURLEncoding.EncodeToString([]byte(js)))%4 == 0 {
		js = js[:len(js)-1] + " }"
	}
	return js
}
