// Package inputcheck holds the checks every way into keygate applies to
// what a person or a client typed: the admin API, the CLI, the portal
// and the config file call the same functions, so that a value refused on
// one surface is refused on all of them, with an error that names the
// field.
//
//   - Name: a human-entered name (a consumer's, a key's, an admin
//     token's) in the PRECIS Nickname profile's enforced form (RFC 8266),
//     so that no invisible or look-alike spelling passes.
//   - CIDR: an address range written canonically, host bits clear.
//   - Charset: a Content-Type whose charset, if any, is UTF-8.
//   - Query: a URL query that parses, each parameter given once.
package inputcheck

import (
	"errors"
	"fmt"
	"mime"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/text/secure/precis"
)

// Name checks a human-entered name against the PRECIS Nickname profile
// (RFC 8266), the profile for names people choose and show to others:
// letters, digits, symbols and single spaces of any script. The profile's
// class (FreeformClass, RFC 8264) refuses the characters that print as
// nothing or as something else: default-ignorable code points, format
// characters (the zero-width joiner outside the scripts that need it,
// U+200B, U+2060, the bidirectional controls), controls and unassigned
// code points. Its mapping rules turn compatibility forms into their
// plain ones (NFKC: full-width letters, ligatures), other spaces into
// U+0020, and trim and collapse spaces.
//
// A name the mapping would change is refused, not silently rewritten:
// the operator sees the spelling that is stored and compared, and two
// names that look the same are the same bytes. The error says what to
// write instead when the profile has an answer. The empty name is
// accepted (names are optional); field names the field in the error.
func Name(field, s string) error {
	if s == "" {
		return nil
	}
	want, err := precis.Nickname.String(s)
	if err != nil {
		return fmt.Errorf("%s: %q has a character a name may not hold (an invisible, formatting, control or unassigned character); use letters, digits, punctuation and single spaces", field, s)
	}
	if want != s {
		return fmt.Errorf("%s: %q is not in its normal form (look-alike characters, or spaces at the ends or doubled); write %q", field, s, want)
	}
	return nil
}

// CIDR checks one address range as a person wrote it: a CIDR
// ("10.0.0.0/8") or a bare address (one host). A CIDR with host bits set
// ("10.1.2.3/8") is refused, naming the range it means ("10.0.0.0/8"):
// whoever wrote it may have meant the one host or the whole range, and
// keygate will not guess. field names the entry ("allowed_cidrs[0]").
func CIDR(field, s string) error {
	s = strings.TrimSpace(s)
	p, err := netip.ParsePrefix(s)
	if err != nil {
		// A bare address is one host; its canonical form is checked where
		// it is parsed.
		if a, aerr := netip.ParseAddr(s); aerr == nil && a.Zone() == "" {
			return nil
		}
		return fmt.Errorf("%s: %q is neither a CIDR nor an IP address", field, s)
	}
	if m := p.Masked(); m != p {
		// Write the range as it will be read: an IPv4-mapped range as IPv4.
		if m.Addr().Is4In6() && m.Bits() >= 96 {
			m = netip.PrefixFrom(m.Addr().Unmap(), m.Bits()-96)
		}
		return fmt.Errorf("%s: %q has host bits set; write the range as %s, or the one address as %s", field, s, m, p.Addr().Unmap())
	}
	return nil
}

// CIDRs applies CIDR to each entry, naming it field[i].
func CIDRs(field string, cidrs []string) error {
	for i, c := range cidrs {
		if err := CIDR(field+"["+strconv.Itoa(i)+"]", c); err != nil {
			return err
		}
	}
	return nil
}

// ErrCharset is the error of Charset for a charset other than UTF-8; a
// server answers it with 415.
var ErrCharset = errors.New("only UTF-8 is accepted")

// Charset checks the charset parameter of a Content-Type value: absent,
// or utf-8 in any letter case, quoted or not. Any other charset
// (utf-16, latin1, …) wraps ErrCharset: every body keygate reads is
// decoded as UTF-8, so a body declared otherwise would be read as
// something its sender did not mean. An unparsable value is an error
// that does not wrap ErrCharset. The empty value passes (whether a type
// is required is the caller's rule).
func Charset(contentType string) error {
	if contentType == "" {
		return nil
	}
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("Content-Type: %q cannot be read: %v", contentType, err)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Errorf("Content-Type: charset=%s is not accepted; send UTF-8 (charset=utf-8, or no charset): %w", strconv.Quote(cs), ErrCharset)
	}
	return nil
}

// Query parses a raw URL query and refuses what parsers read differently:
// a parameter given more than once (limit=1&limit=1000: some take the
// first, some the last), and a query net/url cannot parse (a bad escape,
// a ';'), which url.Values would silently drop. The error names the
// parameter.
func Query(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("query: cannot be read: %v", err)
	}
	var names []string
	for k, v := range q {
		if len(v) > 1 {
			names = append(names, k)
		}
	}
	if len(names) > 0 {
		slices.Sort(names) // the same error every time
		return nil, fmt.Errorf("%s: given %d times; give each query parameter once", names[0], len(q[names[0]]))
	}
	return q, nil
}
