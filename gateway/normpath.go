package gateway

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/keygate/keygate/policy"
)

// normalisePath reads an escaped request path below /registry the way an
// upstream will, so that the operation is matched on what the upstream
// acts on. It returns the path to forward (fwd), the decoded path to
// match operations on (dec), and ok=false when the path is ambiguous and
// must be refused.
//
// The path is forwarded in its normal form (RFC 3986 §6.2.2): a
// percent-encoded unreserved character (ALPHA, DIGIT, "-", "_", "~") is
// decoded, and every other escape is kept with upper-case hex digits, so
// /registry/%61dmin reaches the upstream as /registry/admin and is
// matched as that. Refused, because upstreams read them differently
// (one decodes once, another twice, another splits on it first):
//   - an encoded "/", "\", "%" (double encoding), ".", ";", "?" or "#",
//     or control character, and any escape that is not "%" and two hex
//     digits;
//   - an empty segment (a trailing "/" aside), and a segment ending in a
//     dot or a space, "." and ".." among them: Windows, IIS and others
//     strip a trailing dot or space, so /registry/admin./x is their
//     /registry/admin/x;
//   - a byte outside RFC 3986's pchar (";" included: Tomcat and Spring
//     read /..;/ as /../), decoded text that is not UTF-8, and a
//     character that case mapping or compatibility normalisation turns
//     into ASCII (the Kelvin sign, "ſ", "ı", fullwidth letters): an
//     upstream that ignores case or normalises Unicode would read it as
//     a letter of a protected path.
//
// Letter case is left as sent; operations are matched without regard to
// it (policy.Operations.Match). A path with no escape is forwarded byte
// for byte, and then fwd and dec are p itself: the common path allocates
// nothing.
func normalisePath(p string) (fwd, dec string, ok bool) {
	escaped := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			escaped = true
			break
		}
		if c != '/' && !policy.PathByte(c) {
			return "", "", false
		}
	}
	if !escaped {
		return p, p, segmentsOK(p)
	}
	// An escape changes at most its own three bytes: both forms fit in p's
	// length.
	f := make([]byte, 0, len(p))
	d := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			if c != '/' && !policy.PathByte(c) {
				return "", "", false
			}
			f, d = append(f, c), append(d, c)
			continue
		}
		if i+2 >= len(p) {
			return "", "", false
		}
		b, valid := unhex2(p[i+1], p[i+2])
		i += 2
		switch {
		case !valid:
			return "", "", false
		case unreservedLetter(b):
			f, d = append(f, b), append(d, b)
		case b < 0x20 || b == 0x7f || b == '/' || b == '\\' || b == '%' || b == '.' || b == ';' || b == '?' || b == '#':
			return "", "", false
		default:
			const hex = "0123456789ABCDEF"
			f, d = append(f, '%', hex[b>>4], hex[b&0xf]), append(d, b)
		}
	}
	dec = string(d)
	if !segmentsOK(dec) || !plainText(dec) {
		return "", "", false
	}
	return string(f), dec, true
}

// unreservedLetter reports whether b is an RFC 3986 unreserved character
// other than ".": one whose escape means the same as b itself, and which
// cannot form a dot-segment.
func unreservedLetter(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return b == '-' || b == '_' || b == '~'
}

// segmentsOK reports whether a path has no empty segment but a trailing
// one, and no segment ending in a dot or a space.
func segmentsOK(p string) bool {
	start := 1 // p[0] is '/'
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		if i == start {
			if i != len(p) {
				return false // "//"
			}
		} else if last := p[i-1]; last == '.' || last == ' ' {
			return false
		}
		start = i + 1
	}
	return true
}

// plainText reports whether a decoded path is UTF-8 in which no
// character outside ASCII can be read as ASCII: by its upper or lower
// case, its case folding, or its compatibility (NFKC) form.
func plainText(p string) bool {
	for i := 0; i < len(p); {
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(p[i:])
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		if readsAsASCII(r, p[i:i+n]) {
			return false
		}
		i += n
	}
	return true
}

func readsAsASCII(r rune, s string) bool {
	if unicode.ToUpper(r) < utf8.RuneSelf || unicode.ToLower(r) < utf8.RuneSelf {
		return true
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < utf8.RuneSelf {
			return true
		}
	}
	k := norm.NFKC.String(s)
	for i := 0; i < len(k); i++ {
		if k[i] < utf8.RuneSelf {
			return true
		}
	}
	return false
}
