package tlsconf

import (
	"bytes"
	"crypto/tls"
	"os"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/filewatch"

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

func (m *Manager) startFiles(cfg Config, deps Deps) error {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return fieldpath.Errorf("cert_file", "with key_file: %w", err)
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

	poll := deps.FilePollInterval
	if poll <= 0 {
		poll = 10 * time.Second
	}
	w := filewatch.Start(filewatch.Config{
		Paths:    []string{cfg.CertFile, cfg.KeyFile},
		Poll:     poll,
		Settle:   50 * time.Millisecond,
		OnChange: reload,
		OnError:  func(err error) { m.logger.Warn("tls: file watcher error", zap.Error(err)) },
	})
	m.closers = append(m.closers, w.Close)
	return nil
}
