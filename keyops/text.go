package keyops

import (
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"
)

// CheckText refuses text that would print as something else: invalid
// UTF-8, control characters (C0, DEL and C1, so no newline and no ESC
// sequence), the line and paragraph separators, and the bidirectional
// formatting characters that reorder what a terminal or a page shows.
// Names, metadata and a portal session's subject are stored, written to
// the audit log and printed in tables and pages; none of them needs any
// of these. The error names field and wraps ErrInvalid.
func CheckText(field, s string) error {
	if !utf8.ValidString(s) {
		return invalid("%s: must be valid UTF-8", field)
	}
	for i, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) {
			return invalid("%s: must not contain control or formatting characters (found %U at byte %d)", field, r, i)
		}
	}
	return nil
}

// checkMetadata applies CheckText to every key and value of m, in key
// order so that the error is the same every time.
func checkMetadata(m map[string]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := CheckText("metadata key", k); err != nil {
			return err
		}
		if err := CheckText(fmt.Sprintf("metadata.%s", k), m[k]); err != nil {
			return err
		}
	}
	return nil
}
