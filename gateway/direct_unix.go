//go:build unix

package gateway

import (
	"syscall"
)

// open reports whether an idle connection is still open and quiet: the
// upstream has neither closed it nor sent anything no request asked for.
// One non-blocking peek, so that a connection the upstream closed while
// idle is never handed a request (http.Transport learns the same from
// the read it keeps pending on every idle connection).
func (pc *directConn) open() bool {
	sc, ok := pc.c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && quiet
}
