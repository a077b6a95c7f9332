package keyops

import "github.com/keygate/keygate/internal/inputcheck"

// CheckName is the check of every human-entered name (a consumer's, a
// key's, an admin token's), whichever way it comes in: CheckText, then
// the PRECIS Nickname profile (inputcheck.Name), which refuses invisible
// and format characters (a zero-width joiner, U+200B) and a spelling
// the profile would rewrite (full-width letters, a ligature, doubled or
// outer spaces) rather than store one name that looks like another. The
// empty name passes. The error names field and wraps ErrInvalid.
func CheckName(field, s string) error {
	if err := CheckText(field, s); err != nil {
		return err
	}
	if err := inputcheck.Name(field, s); err != nil {
		return asInvalid(err)
	}
	return nil
}

// CheckCIDRs refuses an allowed_cidrs entry with host bits set
// ("10.1.2.3/8"), naming the range it would mean, before it is put in
// canonical form: storing 10.0.0.0/8 for it would widen, without a word,
// what the writer may have meant as one host. field names the list
// ("allowed_cidrs"); the error names the entry and wraps ErrInvalid.
func CheckCIDRs(field string, cidrs []string) error {
	if err := inputcheck.CIDRs(field, cidrs); err != nil {
		return asInvalid(err)
	}
	return nil
}
