// Package filewatch tells when files change, for the file keystore and
// the TLS files mode. It watches the files' directories through fsnotify
// (editors and secret mounts replace files by rename, which drops a watch
// on the file itself), lets a burst of events settle, and polls the
// files' stat as a fallback for filesystems that deliver no events and to
// begin watching a directory created later.
package filewatch

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Config says what to watch and whom to tell.
type Config struct {
	// Paths are the files to watch. They need not exist yet.
	Paths []string
	// Poll is how often the files are stat'ed; default 1s.
	Poll time.Duration
	// Settle is how long a burst of events may last before OnChange;
	// default 20ms.
	Settle time.Duration
	// NoEvents turns fsnotify off: the poll alone.
	NoEvents bool
	// OnChange is called, from one goroutine at a time, after the events
	// on the files settle, and when a poll finds that a file's stat
	// changed (appeared, vanished, another size, time or inode).
	OnChange func()
	// OnError receives watch errors (the poll goes on); nil ignores them.
	OnError func(error)
	// Baseline, when set (one Stat per path, taken before the caller
	// read the files), is the state a change is measured from; nil means
	// the files as Start finds them. With it, a change between the
	// caller's read and Start is not missed.
	Baseline []Stat
}

// Watcher watches until Close.
type Watcher struct {
	cfg      Config
	paths    map[string]bool
	dirs     map[string]bool // directories being watched
	fs       *fsnotify.Watcher
	last     []Stat
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	closeErr error
}

// Stat is what a cheap stat tells of a file: whether it exists, and its
// size, modification time and inode. Its zero value is a missing file.
type Stat struct {
	exists bool
	info   os.FileInfo
}

// StatOf stats path.
func StatOf(path string) Stat {
	info, err := os.Stat(path)
	if err != nil {
		return Stat{}
	}
	return Stat{exists: true, info: info}
}

// Same reports whether a and b see the same file content, as far as a
// stat can tell (size, time, device and inode).
func (a Stat) Same(b Stat) bool {
	if a.exists != b.exists {
		return false
	}
	return !a.exists || a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime()) && os.SameFile(a.info, b.info)
}

// Start begins watching. The files' state at Start is the baseline: a
// change after it calls OnChange.
func Start(cfg Config) *Watcher {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 20 * time.Millisecond
	}
	w := &Watcher{cfg: cfg, paths: map[string]bool{}, dirs: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, p := range cfg.Paths {
		w.paths[filepath.Clean(p)] = true
	}
	w.last = w.stats()
	if len(cfg.Baseline) == len(cfg.Paths) {
		w.last = append([]Stat(nil), cfg.Baseline...)
	}
	if !cfg.NoEvents {
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			w.report(err)
		} else {
			w.fs = fw
			w.addDirs()
		}
	}
	go w.run()
	return w
}

// Close stops watching and waits for a running OnChange to return.
func (w *Watcher) Close() error {
	w.stopOnce.Do(func() {
		close(w.stop)
		<-w.done
		if w.fs != nil {
			w.closeErr = w.fs.Close()
		}
	})
	return w.closeErr
}

func (w *Watcher) report(err error) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(err)
	}
}

func (w *Watcher) stats() []Stat {
	out := make([]Stat, len(w.cfg.Paths))
	for i, p := range w.cfg.Paths {
		out[i] = StatOf(p)
	}
	return out
}

// changed stats the files and reports whether any differs from the last
// look.
func (w *Watcher) changed() bool {
	now := w.stats()
	diff := false
	for i := range now {
		if !now[i].Same(w.last[i]) {
			diff = true
		}
	}
	w.last = now
	return diff
}

// addDirs watches the directories not yet watched; one that does not
// exist yet is tried again at the next poll. It reports whether a new
// watch began.
func (w *Watcher) addDirs() bool {
	if w.fs == nil {
		return false
	}
	added := false
	for p := range w.paths {
		d := filepath.Dir(p)
		if w.dirs[d] {
			continue
		}
		if err := w.fs.Add(d); err == nil {
			w.dirs[d] = true
			added = true
		}
	}
	return added
}

func (w *Watcher) run() {
	defer close(w.done)
	tick := time.NewTicker(w.cfg.Poll)
	defer tick.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fs != nil {
		events, errs = w.fs.Events, w.fs.Errors
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if w.paths[filepath.Clean(ev.Name)] {
				settle.Reset(w.cfg.Settle)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.report(err)
		case <-settle.C:
			w.changed() // the new baseline
			w.cfg.OnChange()
		case <-tick.C:
			w.addDirs()
			if w.changed() {
				w.cfg.OnChange()
			}
		}
	}
}
