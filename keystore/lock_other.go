//go:build !unix

package keystore

import (
	"context"
	"errors"
)

// lockFile is not implemented outside Unix: FileAdmin needs flock.
func lockFile(context.Context, string) (func(), error) {
	return nil, errors.New("keystore: file locking is supported on Unix only")
}
