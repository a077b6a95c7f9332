package redistest

import (
	"net"
	"sync"
	"testing"
)

// Relay is a TCP relay on a free loopback port that forwards each
// connection to a target, and that a test can stall: while stalled it
// forwards nothing either way (the bytes wait in the sockets' buffers),
// as a congested or cut link does, without closing anything. Put it
// between a replica and its primary (replicaof the relay) to produce
// replication lag on demand. It is safe for concurrent use.
type Relay struct {
	Addr string // host:port to connect to instead of the target

	target string
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	stall  bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// StartRelay listens on a free loopback port and forwards to target
// until the test ends.
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Addr: ln.Addr().String(), target: target, ln: ln}
	r.cond = sync.NewCond(&r.mu)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.Close)
	return r
}

// Stall stops forwarding until Resume.
func (r *Relay) Stall() {
	r.mu.Lock()
	r.stall = true
	r.mu.Unlock()
}

// Resume forwards again.
func (r *Relay) Resume() {
	r.mu.Lock()
	r.stall = false
	r.cond.Broadcast()
	r.mu.Unlock()
}

// Close stops listening and closes every relayed connection.
func (r *Relay) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.cond.Broadcast()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(in, out)
		go r.pipe(out, in)
	}
}

// pipe copies src to dst, a read at a time, waiting before each write
// while the relay is stalled; when either side ends, both are closed.
func (r *Relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for r.stall && !r.closed {
				r.cond.Wait()
			}
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection alike
			return
		}
	}
}
