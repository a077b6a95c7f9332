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
