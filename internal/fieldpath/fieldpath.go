// Package fieldpath marks an error as being about one configuration field,
// named within its section, so that whoever knows where the section is
// mounted can put the section's path in front. Packages that own a
// configuration section (tlsconf, redisconn, ratelimit, oauth2, adminapi,
// portal) return such errors from their constructors; package server adds
// the section's path; errors that are not about a field pass unchanged.
package fieldpath

import (
	"fmt"
)

// Error is an error about the field at Path (within its section).
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf is an Error about path with a formatted cause (%w wraps).
func Errorf(path, format string, args ...any) error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// Within puts section in front of the path of a field error; any other
// error (or nil) is returned unchanged.
func Within(section string, err error) error {
	// Only a field error at the top: one wrapped in other text already
	// has something in front of its path.
	fe, ok := err.(*Error) //nolint:errorlint // deliberately not errors.As, see above
	if !ok {
		return err
	}
	return &Error{Path: section + "." + fe.Path, Err: fe.Err}
}

// First keeps the first problem a Validate method finds, so that every
// section reports one error, its first, alike. The zero value is ready.
type First struct{ err error }

// Bad records a problem with field, unless one is recorded already.
func (f *First) Bad(field, format string, args ...any) {
	if f.err == nil {
		f.err = Errorf(field, format, args...)
	}
}

// Err is the first problem recorded, or nil.
func (f *First) Err() error { return f.err }
