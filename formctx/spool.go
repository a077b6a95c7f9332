package formctx

import (
	"errors"
	"io"
	"os"
	"sync"
)

var errTooLarge = errors.New("formctx: body over max_bytes")

// source reads the client body and enforces the byte cap. Its errors are
// sticky.
type source struct {
	r      io.Reader
	n, max int64 // bytes read so far, cap
	err    error
}

// read reads from the client, counting against the cap.
func (s *source) read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if rem := s.max - s.n + 1; int64(len(p)) > rem {
		p = p[:rem] // one byte past the cap is enough to tell
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	if s.n > s.max {
		s.err = errTooLarge
		return 0, s.err
	}
	if err != nil {
		s.err = err
	}
	return n, err
}

const chunkSize = 32 << 10

type chunk [chunkSize]byte

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

// spool holds the prefix: up to memLimit bytes in pooled chunks, the rest
// in an unlinked temp file written through a pooled chunk.
type spool struct {
	arr      [8]*chunk
	chunks   []*chunk
	memLimit int
	memLen   int
	dir      string
	f        *os.File
	wbuf     *chunk
	wn       int
	fileLen  int64
	spilled  bool
}

func (s *spool) init(memLimit int, dir string) {
	s.memLimit, s.dir = memLimit, dir
	s.chunks = s.arr[:0]
}

func (s *spool) len() int64 { return int64(s.memLen) + s.fileLen + int64(s.wn) }

func (s *spool) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 && s.memLen < s.memLimit {
		ci, co := s.memLen/chunkSize, s.memLen%chunkSize
		if ci == len(s.chunks) {
			s.chunks = append(s.chunks, chunkPool.Get().(*chunk))
		}
		room := min(chunkSize-co, s.memLimit-s.memLen)
		n := copy(s.chunks[ci][co:co+room], p)
		s.memLen += n
		p = p[n:]
	}
	for len(p) > 0 {
		if s.f == nil {
			if err := s.spill(); err != nil {
				return total - len(p), err
			}
		}
		n := copy(s.wbuf[s.wn:], p)
		s.wn += n
		p = p[n:]
		if s.wn == chunkSize {
			if err := s.flush(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

// spill creates the temp file and unlinks it at once, so nothing is left
// behind whatever happens to the process.
func (s *spool) spill() error {
	f, err := os.CreateTemp(s.dir, "formctx-*.spool")
	if err != nil {
		return err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return err
	}
	s.f, s.spilled = f, true
	s.wbuf = chunkPool.Get().(*chunk)
	return nil
}

// flush writes the buffered tail to the file.
func (s *spool) flush() error {
	if s.wn == 0 {
		return nil
	}
	n, err := s.f.Write(s.wbuf[:s.wn])
	s.fileLen += int64(n)
	s.wn -= n
	return err
}

// readAt reads spooled bytes at off; flush must have been called.
func (s *spool) readAt(p []byte, off int64) (int, error) {
	if off < int64(s.memLen) {
		n := 0
		for len(p) > 0 && off < int64(s.memLen) {
			ci, co := int(off/chunkSize), int(off%chunkSize)
			end := min(chunkSize, s.memLen-ci*chunkSize)
			c := copy(p, s.chunks[ci][co:end])
			n += c
			off += int64(c)
			p = p[c:]
		}
		return n, nil
	}
	if s.f == nil {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := s.f.ReadAt(p, off-int64(s.memLen))
	if err == io.EOF && n == len(p) {
		err = nil
	}
	return n, err
}

// release returns the chunks and closes (thereby deleting) the file.
func (s *spool) release() {
	for i, c := range s.chunks {
		chunkPool.Put(c)
		s.chunks[i] = nil
	}
	s.chunks = s.arr[:0]
	if s.wbuf != nil {
		chunkPool.Put(s.wbuf)
		s.wbuf = nil
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
