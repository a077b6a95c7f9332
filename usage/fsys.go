package usage

import (
	"io"
	"os"

	"github.com/keygate/keygate/internal/atomicfile"
)

// What a FileStore's writes do to make a flush durable, so that a power
// cut loses no flush that returned (only the counts not yet flushed, as
// usage.flush_interval says):
//
//   - an append is synced (fsync) before Flush returns;
//   - a rewrite syncs the snapshot before renaming it into place, and
//     the directory after each of its two renames, the snapshot's
//     before the journal's: a journal of the new generation is never on
//     disk beside the snapshot it replaced, whose own journal it has
//     replaced. (The new journal's head is synced by the first append
//     to it; until then the snapshot holds every count.)
//
// TestFileStoreSurvivesAPowerCut cuts the power after every change and
// fails without any one of these syncs. The flusher's goroutine makes
// them; the request path never waits for one.

// file is a file a FileStore writes: a temp file, or the journal.
type file interface {
	io.Writer
	io.Seeker
	Name() string
	Sync() error
	Truncate(size int64) error
	Close() error
}

// fileSystem is where a FileStore writes its files. osFS is the real
// one; a test puts one in its place that logs every change, to rebuild
// what a power cut between any two of them could leave on disk.
type fileSystem interface {
	CreateTemp(dir, pattern string) (file, error)
	// OpenAppend opens an existing file for appending.
	OpenAppend(name string) (file, error)
	Rename(from, to string) error
	Remove(name string) error
	// SyncDir makes the directory's entries durable: the renames into it.
	SyncDir(dir string) error
}

type osFS struct{}

func (osFS) CreateTemp(dir, pattern string) (file, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) OpenAppend(name string) (file, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }
func (osFS) Remove(name string) error     { return os.Remove(name) }

// SyncDir syncs dir; a file system that cannot is not an error (see
// atomicfile.SyncDir).
func (osFS) SyncDir(dir string) error { return atomicfile.SyncDir(dir) }

// fs is the file system s writes to.
func (s *FileStore) fs() fileSystem {
	if s.fsys == nil {
		return osFS{}
	}
	return s.fsys
}
