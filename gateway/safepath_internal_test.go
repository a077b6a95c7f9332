package gateway

import (
	"strings"
	"testing"
)

// refSafePath is safePath before its printable-ASCII shortcut.
func refSafePath(p string) string {
	if len(p) > 64 {
		p = p[:64] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, p)
}

// FuzzSafePath holds safePath to the strings.Map version it shortcuts:
// the same text for any path (controls, DEL, UTF-8 valid or not, long).
func FuzzSafePath(f *testing.F) {
	for _, p := range []string{"", "/sync", "/registry/a%2Fb", "/a\x00b\x7f", "/é", "/\xff\xfe", strings.Repeat("/abc", 20), strings.Repeat("é", 40)} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := safePath(p), refSafePath(p); got != want {
			t.Fatalf("safePath(%q) = %q, want %q", p, got, want)
		}
	})
}
