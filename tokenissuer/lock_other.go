//go:build !unix

package tokenissuer

// lockFile is a no-op where flock is missing: one process per file.
func lockFile(string) (func(), error) { return func() {}, nil }
