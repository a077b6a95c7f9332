package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscapeCell(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"plain", "key_0123 Acme Corp", "key_0123 Acme Corp"},
		{"non-ASCII printable", "Zürich 東京 ✓", "Zürich 東京 ✓"},
		{"ESC sequence", "\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`},
		{"OSC title", "\x1b]0;pwned\x07", `\x1b]0;pwned\a`},
		{"newline and carriage return", "a\nb\rc", `a\nb\rc`},
		{"tab", "a\tb", `a\tb`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1 CSI", "a\u009b31m", `a\u009b31m`},
		{"bidi override and zero width", "\u202eabc\u200b", `\u202eabc\u200b`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"replacement char as text", "a\ufffdb", `a\ufffdb`},
	} {
		if got := escapeCell(c.in); got != c.want {
			t.Errorf("%s: escapeCell(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

func TestTableFit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("abcdefghij", 12)
	for _, c := range []struct {
		name  string
		width int
		rows  [][]string
		want  string
		cols  []column
	}{
		{"no limit", 0, [][]string{{"2026-11-24T19:04:00Z", "cli:alice", long}},
			"TIME                  ACTOR      NOTE\n2026-11-24T19:04:00Z  cli:alice  " + long + "\n", nil},
		{"fits as is", 80, [][]string{{"2026-11-24T19:04:00Z", "cli:alice", "short"}},
			"TIME                  ACTOR      NOTE\n2026-11-24T19:04:00Z  cli:alice  short\n", nil},
		{"widest gives way first", 50, [][]string{{"2026-11-24T19:04:00Z", "cli:alice", long}},
			"TIME                  ACTOR      NOTE\n2026-11-24T19:04:00Z  cli:alice  abcdefghijabcdef…\n", nil},
		{"kept column stays whole, both others cut", 40, [][]string{{"2026-11-24T19:04:00Z", "cli:alice-and-bob", long}},
			"TIME                  ACTOR     NOTE\n2026-11-24T19:04:00Z  cli:ali…  abcdefg…\n", nil},
		{"wide runes count two", 34, [][]string{{"2026-11-24T19:04:00Z", "東京東京東京", "x"}},
			"TIME                  ACTOR   NOTE\n2026-11-24T19:04:00Z  東京…   x\n", nil},
		{"below the headers when it must", 30, [][]string{{"2026-11-24T19:04:00Z", "cli:alice", long}},
			"TIME                  AC…  NO…\n2026-11-24T19:04:00Z  cl…  ab…\n", nil},
		{"free text gives way first", 50, [][]string{{"2026-11-24T19:04:00Z", "cli:alice-and-bob", long}},
			"TIME                  ACTOR              NOTE\n2026-11-24T19:04:00Z  cli:alice-and-bob  abcdefgh…\n",
			cols("TIME!", "ACTOR", "NOTE~")},
		{"then the others", 40, [][]string{{"2026-11-24T19:04:00Z", "cli:alice-and-bob", long}},
			"TIME                  ACTOR       NOTE\n2026-11-24T19:04:00Z  cli:alice…  abcde…\n",
			cols("TIME!", "ACTOR", "NOTE~")},
		{"kept columns alone overflow: floors", 20, [][]string{{"2026-11-24T19:04:00Z", "cli:alice", long}},
			"TIME                  AC…  NO…\n2026-11-24T19:04:00Z  cl…  ab…\n", nil},
	} {
		var b bytes.Buffer
		tb := &table{w: &b, cols: cols("TIME!", "ACTOR", "NOTE"), header: true, width: c.width}
		if c.cols != nil {
			tb.cols = c.cols
		}
		for _, r := range c.rows {
			tb.row(r...)
		}
		if err := tb.flush(); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%s:\ngot\n%s\nwant\n%s", c.name, b.String(), c.want)
		}
	}
}

// FuzzTable: whatever the cells hold, a table prints one line per row, no
// rune a terminal acts on, and, when its floors fit, no line wider than
// the width.
func FuzzTable(f *testing.F) {
	f.Add("key_0123", "\x1b[2J\x1b[31mred", "a\nb\rc\td", 80)
	f.Add("東京東京", "\u202eabc\u200b", "\xff\xc3", 13)
	f.Add("", "", strings.Repeat("x", 300), 20)
	f.Fuzz(func(t *testing.T, a, b, c string, width int) {
		width = 13 + abs(width%200) // three shrunk columns of 3 and two gaps fit
		var out bytes.Buffer
		tb := &table{w: &out, cols: cols("A", "B~", "C"), header: true, width: width}
		tb.row(a, b, c)
		tb.row(c, a, b)
		if err := tb.flush(); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if n := strings.Count(s, "\n"); n != 3 {
			t.Fatalf("%d lines for a header and two rows: %q", n, s)
		}
		for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			if displayWidth(l) > width {
				t.Fatalf("a line of %d columns over %d: %q", displayWidth(l), width, l)
			}
			for _, r := range l {
				if !printable(r) {
					t.Fatalf("raw %U in %q", r, l)
				}
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
