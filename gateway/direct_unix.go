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
	if pc.raw == nil {
		sc, ok := pc.c.(syscall.Conn)
		if !ok {
			return true
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		pc.raw = raw
		pc.peekFn = pc.peek
	}
	pc.quiet = false
	return pc.raw.Read(pc.peekFn) == nil && pc.quiet
}

// peek is open's look at the socket: never waits.
func (pc *directConn) peek(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), pc.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	pc.quiet = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
	return true
}
