package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// fileStamp is what a cheap stat tells about the pair.
type fileStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

func stampOf(certPath, keyPath string) (fileStamp, error) {
	ci, err := os.Stat(certPath)
	if err != nil {
		return fileStamp{}, err
	}
	ki, err := os.Stat(keyPath)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{ci.ModTime(), ki.ModTime(), ci.Size(), ki.Size()}, nil
}

func (m *Manager) startFiles(ctx context.Context, cfg Config, deps Deps) error {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("tls.cert_file/tls.key_file: %w", err)
	}
	m.cert.Store(&cert)
	m.base.GetCertificate = m.getStatic
	m.logger.Info("tls: loaded certificate files", zap.String("cert_file", cfg.CertFile), zap.Time("not_after", cert.Leaf.NotAfter))

	last, _ := stampOf(cfg.CertFile, cfg.KeyFile)
	reload := func() {
		st, err := stampOf(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			// A file is missing, perhaps mid-rotation; a later event or
			// poll retries. Keep serving the old pair.
			if st != last {
				m.logger.Warn("tls: certificate files unreadable; keeping the current certificate", zap.Error(err))
			}
			return
		}
		if st == last {
			return
		}
		last = st
		next, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			m.logger.Error("tls: new certificate files do not load; keeping the current certificate", zap.String("cert_file", cfg.CertFile), zap.Error(err))
			if deps.OnReload != nil {
				deps.OnReload(err)
			}
			return
		}
		if cur := m.cert.Load(); cur != nil && bytes.Equal(cur.Certificate[0], next.Certificate[0]) {
			return
		}
		m.cert.Store(&next)
		m.logger.Info("tls: reloaded certificate files", zap.String("cert_file", cfg.CertFile), zap.Time("not_after", next.Leaf.NotAfter))
		if deps.OnReload != nil {
			deps.OnReload(nil)
		}
	}

	// Watch the directories, not the files: editors and secret mounts
	// replace files by rename, which drops a watch on the file itself.
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	w, err := fsnotify.NewWatcher()
	if err == nil {
		dirs := map[string]bool{filepath.Dir(cfg.CertFile): true, filepath.Dir(cfg.KeyFile): true}
		for d := range dirs {
			if err := w.Add(d); err != nil {
				m.logger.Warn("tls: cannot watch certificate directory; polling only", zap.String("dir", d), zap.Error(err))
			}
		}
		events, watchErrs = w.Events, w.Errors
		m.closers = append(m.closers, w.Close)
	} else {
		m.logger.Warn("tls: no file-system watcher; polling only", zap.Error(err))
	}

	poll := deps.FilePollInterval
	if poll <= 0 {
		poll = 10 * time.Second
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(poll)
		defer tick.Stop()
		// Events come in bursts (write, chmod, rename); settle briefly
		// before reading the pair.
		settle := time.NewTimer(time.Hour)
		settle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				reload()
			case _, ok := <-events:
				if !ok {
					events = nil
					continue
				}
				settle.Reset(50 * time.Millisecond)
			case err, ok := <-watchErrs:
				if !ok {
					watchErrs = nil
					continue
				}
				m.logger.Warn("tls: file watcher error", zap.Error(err))
			case <-settle.C:
				reload()
			}
		}
	}()
	return nil
}
