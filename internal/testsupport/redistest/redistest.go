// Package redistest starts real redis-server processes on free loopback
// ports for tests. Nothing here is faked: tests talk to the real server, and
// can stop, freeze (SIGSTOP) or kill it to produce real outages.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/redis/go-redis/v9"
)

// Server is one running redis-server. It is not safe for concurrent use
// by several goroutines that start and stop it at once.
type Server struct {
	Addr   string // host:port on 127.0.0.1
	Port   int
	dir    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	t      testing.TB
}

// Binary returns the path of redis-server, or fails the test with an
// explanation of how to install it.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH: install it with `apt-get install -y redis-server` (make test and .ci/run do this): %v", err)
	}
	return p
}

// Start runs a fresh redis-server on a free loopback port with persistence
// off, and stops it when the test ends. extra are further redis-server
// arguments, such as "--notify-keyspace-events", "KEA".
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, t.TempDir(), nil, extra)
}

// start runs redis-server with first (a config file, for a Sentinel)
// before the usual arguments and extra after them, in dir.
func start(t testing.TB, dir string, first, extra []string) *Server {
	t.Helper()
	s := &Server{t: t, dir: dir}
	for attempt := 1; ; attempt++ {
		s.Port = testkit.FreePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		s.args = append(append([]string(nil), first...),
			"--port", strconv.Itoa(s.Port),
			"--bind", "127.0.0.1",
			"--dir", s.dir,
			"--logfile", filepath.Join(s.dir, "redis.log"),
		)
		if first == nil { // a Sentinel has no persistence to turn off
			s.args = append(s.args, "--save", "", "--appendonly", "no")
		}
		s.args = append(s.args, extra...)
		err := s.tryStart()
		if err == nil {
			break
		}
		// The port was free when picked (below the ephemeral range, so no
		// outgoing connection takes it); another test's listener may
		// have taken it since. Pick again.
		if attempt < 4 && errors.Is(err, errPortTaken) {
			continue
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		t.Fatalf("redis-server on %s: %v\n%s", s.Addr, err, log)
	}
	t.Cleanup(s.Stop)
	return s
}

var errPortTaken = errors.New("port taken by another process")

func (s *Server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		s.t.Fatalf("redis-server on %s: %v\n%s", s.Addr, err, log)
	}
}

// tryStart starts redis-server and waits until it answers, making sure the
// answer comes from this process and not from another server that holds
// the port.
func (s *Server) tryStart() error {
	cmd := exec.Command(Binary(s.t), s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(exited) }()
	want := "process_id:" + strconv.Itoa(cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errPortTaken // redis-server exits at once when it cannot bind
		default:
		}
		if info, err := do(s.Addr, "INFO", "server"); err == nil {
			if strings.Contains(info, want) {
				s.cmd = cmd
				s.exited = exited
				return nil
			}
			_ = cmd.Process.Kill()
			<-exited
			return errPortTaken // someone else's server answers on the port
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return errors.New("did not answer within 10s")
}

// Kill ends the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to die
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Freeze stops the server with SIGSTOP: connections stay open and nothing
// answers, as with a hung server.
func (s *Server) Freeze() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts the server again on the same port after Kill.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.Kill()
	}
	s.start()
}

// Stop ends the server; it is called at the end of the test.
func (s *Server) Stop() { s.Kill() }

// Do sends one command with the RESP protocol on a fresh connection and
// returns the first reply line. It is for tests that want to see Redis
// without going through the code under test (INFO, CONFIG, FLUSHALL).
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr, args...)
}

// Calls is the server's count of calls by command, lower case, since it
// started (INFO commandstats): what a test reads to see which commands
// the code under test sent, such as none that reads a whole key.
func (s *Server) Calls(t testing.TB) map[string]int {
	t.Helper()
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			out[name] = n
		}
	}
	return out
}

func do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) > 0 && line[0] == '$' {
		n, _ := strconv.Atoi(line[1 : len(line)-2])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	if len(line) > 0 && line[0] == '-' {
		return "", fmt.Errorf("redis: %s", line[1:len(line)-2])
	}
	return line[1 : len(line)-2], nil
}

// Client returns a go-redis client of s, closed when the test ends.
// Retries are off (MaxRetries -1), so that a test sees each failure of
// the server it stopped or froze; tune changes other options.
func (s *Server) Client(t testing.TB, tune ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr, MaxRetries: -1}
	for _, f := range tune {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Running reports whether the server process runs (it was not killed).
func (s *Server) Running() bool { return s.cmd != nil }
