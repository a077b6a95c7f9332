// Package atomicfile replaces a file whole and durably: a reader sees
// the old file or the new one, never part of one, and once WriteFile
// returns a power cut keeps the new one. It is how keygate writes the
// key file, its token-signing keys and its self-signed certificate.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

// WriteFile replaces path by data, with mode perm: a temp file in the
// same directory, written and synced, renamed over path, then the
// directory synced. On an error path is left as it was and no temp file
// is left behind.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes the renames into dir durable. A file system that cannot
// sync a directory (EINVAL: procfs, some network and container mounts)
// makes a rename durable some other way or not at all, and Windows
// journals its renames: neither is an error, or every write there would
// fail.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
