package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
	"golang.org/x/text/width"
)

// Every table the CLI prints goes through table: it escapes what a
// terminal would act on and fits the columns to the output's width.
//
// Width: the COLUMNS environment variable when it is a positive number
// (so `COLUMNS=80 keygate audit | less` fits 80 columns), else the
// terminal's width when stdout is a terminal, else no limit: piped into a
// file, grep or awk, every cell is whole. Over the width, the widest
// shrinkable columns give up space first and their long cells end in "…";
// --json always keeps everything.
//
// Escaping: control characters (ESC sequences, newlines, tabs, carriage
// returns), other non-printable runes (bidi overrides, zero-width
// characters) and invalid UTF-8 are written as Go-style escapes (\x1b,
// \n, \u202e), so no cell can move the cursor, colour the screen or forge
// a row, whatever the audit log or a record holds.

// column is one column of a table.
type column struct {
	// name is the header; "" for a table without a header row.
	name string
	// keep: the column is never shrunk (ids and time stamps that keygate
	// makes, which are useless cut).
	keep bool
	// first: free text (an error, a list of changes) that gives way
	// before the other columns shrink.
	first bool
}

// cols makes shrinkable columns of the names; a name ending in "!" is
// kept whole, one ending in "~" gives way first (the mark is not
// printed).
func cols(names ...string) []column {
	c := make([]column, len(names))
	for i, n := range names {
		n, keep := strings.CutSuffix(n, "!")
		n, first := strings.CutSuffix(n, "~")
		c[i] = column{name: n, keep: keep, first: first}
	}
	return c
}

// table collects rows, then writes them aligned, two spaces apart.
type table struct {
	w      io.Writer
	cols   []column
	header bool
	// indent starts every line.
	indent string
	rows   [][]string
	// width is the output's width in columns; 0: no limit.
	width int
}

// newTable is a table with a header row, fitted to w's width.
func newTable(w io.Writer, c []column) *table {
	return &table{w: w, cols: c, header: true, width: outputWidth(w)}
}

// row adds a row; missing cells are empty.
func (t *table) row(cells ...string) {
	r := make([]string, len(t.cols))
	for i := range r {
		if i < len(cells) {
			r[i] = escapeCell(cells[i])
		}
	}
	t.rows = append(t.rows, r)
}

// rowf is row with a fmt.Sprint of each value.
func (t *table) rowf(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	t.row(s...)
}

const cellGap = 2

// flush writes the table.
func (t *table) flush() error {
	rows := t.rows
	if t.header {
		h := make([]string, len(t.cols))
		for i, c := range t.cols {
			h[i] = escapeCell(c.name)
		}
		rows = append([][]string{h}, rows...)
	}
	widths := t.fit(rows)
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(t.indent)
		last := len(r) - 1
		for last > 0 && r[last] == "" {
			last--
		}
		for i := 0; i <= last; i++ {
			cell := truncate(r[i], widths[i])
			b.WriteString(cell)
			if i < last {
				b.WriteString(strings.Repeat(" ", widths[i]-displayWidth(cell)+cellGap))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// fit returns each column's width: its widest cell, shrunk to t.width
// when there is one.
func (t *table) fit(rows [][]string) []int {
	natural := make([]int, len(t.cols))
	for _, r := range rows {
		for i, c := range r {
			natural[i] = max(natural[i], displayWidth(c))
		}
	}
	if t.width <= 0 {
		return natural
	}
	budget := t.width - displayWidth(t.indent) - cellGap*(len(t.cols)-1)
	if sum(natural) <= budget {
		return natural
	}
	// A shrunk column keeps its header and a few characters; when even
	// that is too wide, it goes down to two characters and "…".
	floor := make([]int, len(natural))
	floorSum := 0
	for i, c := range t.cols {
		floor[i] = natural[i]
		if !c.keep {
			floor[i] = min(natural[i], max(displayWidth(c.name), 6))
		}
		floorSum += floor[i]
	}
	if floorSum > budget {
		for i, c := range t.cols {
			if !c.keep {
				floor[i] = min(natural[i], 3)
			}
		}
	}
	// Free-text columns give way first; then every shrinkable one.
	w := natural
	for _, sel := range []func(column) bool{
		func(c column) bool { return c.first },
		func(c column) bool { return !c.keep },
	} {
		if sum(w) <= budget {
			break
		}
		w = waterFill(w, floor, budget, func(i int) bool { return sel(t.cols[i]) })
	}
	return w
}

// waterFill cuts the selected columns of cur to max(limit, their floor)
// for the largest limit with which the row fits budget (to their floors
// when none does).
func waterFill(cur, floor []int, budget int, selected func(int) bool) []int {
	sized := func(limit int) []int {
		w := slices.Clone(cur)
		for i, n := range cur {
			if selected(i) && n > limit {
				w[i] = max(limit, floor[i])
			}
		}
		return w
	}
	lo, hi := 0, slices.Max(cur)
	for lo < hi { // the largest limit that fits
		mid := (lo + hi + 1) / 2
		if sum(sized(mid)) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return sized(lo)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// outputWidth is the width tables written to w are fitted to; 0 means no
// limit (see the comment at the top of this file).
func outputWidth(w io.Writer) int {
	if s := os.Getenv("COLUMNS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		fd := int(f.Fd())
		if term.IsTerminal(fd) {
			if cols, _, err := term.GetSize(fd); err == nil && cols > 0 {
				return cols
			}
			return 80 // a terminal that does not say how wide it is
		}
	}
	return 0
}

// escapeCell writes what a terminal would act on as an escape: control
// characters, other non-printable runes and invalid UTF-8 bytes.
func escapeCell(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !printable(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case printable(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

func printable(r rune) bool { return r == ' ' || (r != utf8.RuneError && unicode.IsPrint(r)) }

// displayWidth is how many terminal columns s takes: East Asian wide and
// fullwidth runes take two, combining marks none.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		n += runeWidth(r)
	}
	return n
}

func runeWidth(r rune) int {
	if unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r) {
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// truncate cuts s to w columns, ending it with "…" when cut.
func truncate(s string, w int) string {
	if displayWidth(s) <= w {
		return s
	}
	if w <= 0 {
		return ""
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		rw := runeWidth(r)
		if used+rw > w-1 {
			break
		}
		b.WriteRune(r)
		used += rw
	}
	b.WriteString("…")
	return b.String()
}

// fields is a table of name/value rows with no header (`keys show`):
// by default a kept name column and a shrinkable value column.
func fields(w io.Writer, c ...column) *table {
	if len(c) == 0 {
		c = cols("!", "")
	}
	return &table{w: w, cols: c, width: outputWidth(w)}
}
