package inputcheck_test

import (
	"errors"
	"mime"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/secure/precis"

	"github.com/keygate/keygate/internal/inputcheck"
)

func TestName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		want     string // "" accepts; otherwise a part of the error
	}{
		{"plain", "Acme Corp", ""},
		{"empty (names are optional)", "", ""},
		{"any script, punctuation and symbols", "Zoë – 東京 ☕ O'Brien & Co.", ""},
		{"a joiner where its script needs it", "क्\u200dष", ""},
		{"zero-width joiner", "al\u200dice", "may not hold"},
		{"zero-width non-joiner", "al\u200cice", "may not hold"},
		{"zero-width space", "a\u200bb", "may not hold"},
		{"word joiner", "\u2060acme", "may not hold"},
		{"soft hyphen", "ac\u00adme", "may not hold"},
		{"byte order mark", "\ufeffacme", "may not hold"},
		{"right-to-left override", "abc\u202edcba", "may not hold"},
		{"variation selector", "acme\ufe0f", "may not hold"},
		{"unassigned code point", "acme\U000e0080", "may not hold"},
		{"private use", "acme\ue000", "may not hold"},
		{"full-width letters", "ａｃｍｅ", `write "acme"`},
		{"ligature", "ﬁnance", `write "finance"`},
		{"no-break space", "Acme\u00a0Corp", `write "Acme Corp"`},
		{"doubled space", "Acme  Corp", `write "Acme Corp"`},
		{"leading space", " Acme", `write "Acme"`},
		{"trailing space", "Acme ", `write "Acme"`},
		{"decomposed accent", "Zoe\u0308", `write "Zoë"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := inputcheck.Name("name", tc.in)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Name(%q) = %v, want accepted", tc.in, err)
			case tc.want != "" && err == nil:
				t.Fatalf("Name(%q) accepted, want an error with %q", tc.in, tc.want)
			case tc.want != "" && (!strings.HasPrefix(err.Error(), "name: ") || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Name(%q) = %q, want the field named and %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestCIDR(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"10.0.0.0/8", ""},
		{"203.0.113.7", ""},
		{"203.0.113.7/32", ""},
		{" 10.0.0.0/8 ", ""},
		{"2001:db8::/32", ""},
		{"2001:db8::1", ""},
		{"0.0.0.0/0", ""},
		{"10.1.2.3/8", "write the range as 10.0.0.0/8, or the one address as 10.1.2.3"},
		{"192.168.1.1/24", "write the range as 192.168.1.0/24"},
		{"2001:db8::1/32", "write the range as 2001:db8::/32"},
		{"::ffff:10.1.2.3/104", "write the range as 10.0.0.0/8"},
		{"10.0.0.0/33", "neither a CIDR"},
		{"example.com", "neither a CIDR"},
		{"fe80::1%eth0", "neither a CIDR"},
	}
	for _, tc := range cases {
		err := inputcheck.CIDR("allowed_cidrs[0]", tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CIDR(%q) = %v, want accepted", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "allowed_cidrs[0]: ")):
			t.Errorf("CIDR(%q) = %v, want the entry named and %q", tc.in, err, tc.want)
		}
	}
	if err := inputcheck.CIDRs("server.trusted_proxies", []string{"10.0.0.0/8", "172.16.5.4/12"}); err == nil || !strings.HasPrefix(err.Error(), "server.trusted_proxies[1]: ") {
		t.Errorf("CIDRs names the entry: %v", err)
	}
}

func TestCharset(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in        string
		ok, is415 bool
	}{
		{"", true, false},
		{"application/json", true, false},
		{"application/json; charset=utf-8", true, false},
		{"application/json; charset=UTF-8", true, false},
		{`application/json; charset="utf-8"`, true, false},
		{"application/json;charset=Utf-8", true, false},
		{"application/x-www-form-urlencoded", true, false},
		{"application/json; charset=utf-16", false, true},
		{"application/json; charset=UTF-16LE", false, true},
		{"application/json; charset=latin1", false, true},
		{"application/json; charset=iso-8859-1", false, true},
		{"application/json; charset=utf8", false, true},
		{`application/json; charset=""`, false, true},
		{"application/json; charset=utf-8; charset=utf-16", false, false},
		{"application/json; charset", false, false},
	}
	for _, tc := range cases {
		err := inputcheck.Charset(tc.in)
		if (err == nil) != tc.ok || errors.Is(err, inputcheck.ErrCharset) != tc.is415 {
			t.Errorf("Charset(%q) = %v; want ok %v, ErrCharset %v", tc.in, err, tc.ok, tc.is415)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "Content-Type: ") {
			t.Errorf("Charset(%q) = %q: the header is not named", tc.in, err)
		}
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"", ""},
		{"limit=10&cursor=abc", ""},
		{"limit=1&limit=1000", "limit: given 2 times"},
		{"limit=1&cursor=a&cursor=b&cursor=c", "cursor: given 3 times"},
		{"since=1h&since=", "since: given 2 times"},
		{"limit=1;limit=1000", "query: cannot be read"},
		{"limit=%zz", "query: cannot be read"},
	}
	for _, tc := range cases {
		q, err := inputcheck.Query(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Query(%q) = %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Query(%q) = %v, want %q", tc.in, err, tc.want)
		case tc.want == "" && q == nil:
			t.Errorf("Query(%q): nil values", tc.in)
		}
	}
}

// FuzzName holds Name to its contract: whatever it accepts is valid
// UTF-8 and is already the Nickname profile's enforced form, so that the
// stored spelling is the one compared; it never panics.
func FuzzName(f *testing.F) {
	for _, s := range []string{"Acme Corp", "al\u200dice", "ａｃｍｅ", "क्\u200dष", " a", "a  b", "\xff", "Zoë"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if inputcheck.Name("name", s) != nil || s == "" {
			return
		}
		if !utf8.ValidString(s) {
			t.Fatalf("accepted invalid UTF-8 %q", s)
		}
		if e, err := precis.Nickname.String(s); err != nil || e != s {
			t.Fatalf("accepted %q, which the profile enforces as %q (%v)", s, e, err)
		}
		for _, r := range s {
			if r == '\u200b' || r == '\u2060' || r == '\ufeff' || r == '\u00ad' || (r >= '\u202a' && r <= '\u202e') {
				t.Fatalf("accepted %q with %U", s, r)
			}
		}
	})
}

// FuzzCIDR: an accepted range is its own canonical form.
func FuzzCIDR(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.1.2.3/8", "::ffff:10.1.2.3/104", "2001:db8::1", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if inputcheck.CIDR("c", s) != nil {
			return
		}
		if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil && p.Masked() != p {
			t.Fatalf("accepted %q with host bits", s)
		}
	})
}

// FuzzCharset: an accepted Content-Type parses, and declares UTF-8 or
// no charset; a refused one that parses declares another charset.
func FuzzCharset(f *testing.F) {
	for _, s := range []string{"application/json", "application/json; charset=utf-16", `text/plain; charset="UTF-8"`, "a/b; charset=x; charset=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := inputcheck.Charset(s)
		if s == "" {
			return
		}
		_, params, perr := mime.ParseMediaType(s)
		cs, has := params["charset"]
		utf8 := !has || strings.EqualFold(cs, "utf-8")
		switch {
		case err == nil && (perr != nil || !utf8):
			t.Fatalf("accepted %q (charset %q, parse error %v)", s, cs, perr)
		case err != nil && perr == nil && utf8:
			t.Fatalf("refused %q: %v", s, err)
		case errors.Is(err, inputcheck.ErrCharset) != (perr == nil && !utf8):
			t.Fatalf("%q: %v, want ErrCharset exactly for another charset", s, err)
		}
	})
}

// FuzzQuery: an accepted query has each parameter once.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"limit=1&limit=2", "a=1&b=2", "a=%zz", "a;b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := inputcheck.Query(s)
		if err != nil {
			return
		}
		for k, v := range q {
			if len(v) != 1 {
				t.Fatalf("%q: %s has %d values", s, k, len(v))
			}
		}
	})
}
