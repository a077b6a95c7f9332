package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"

	"github.com/keygate/keygate/cli"
)

// keygateRole runs keygate in this process (cli.Main with args). SIGUSR1
// starts a CPU profile into $CHURN_PROFILE.tmp, SIGUSR2 stops it and
// renames it to $CHURN_PROFILE, so the bench profiles one run at a time.
func keygateRole(args []string, stdout, stderr io.Writer) int {
	path := os.Getenv("CHURN_PROFILE")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var f *os.File
		for s := range ch {
			switch {
			case s == syscall.SIGUSR1 && f == nil:
				var err error
				if f, err = os.Create(path + ".tmp"); err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					fmt.Fprintln(stderr, "profile:", err)
					f = nil
				}
			case s == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				_ = f.Close()
				_ = os.Rename(path+".tmp", path)
				f = nil
			}
		}
	}()
	return cli.Main(args, strings.NewReader(""), stdout, stderr)
}

func (b *bench) profilePath(r *replica) string { return filepath.Join(b.dir, r.name+".pprof") }

// profileStart starts the CPU profiles of both replicas.
func (b *bench) profileStart() error {
	for _, r := range b.replicas {
		_ = os.Remove(b.profilePath(r))
		if err := r.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			return err
		}
	}
	return nil
}

// profileStop stops them and moves them to -profile's directory as
// replica<n>-<name>.pprof (name: baseline or churn for the closed loops,
// alone for the churn with no load).
func (b *bench) profileStop(name string) error {
	if err := os.MkdirAll(b.o.Profile, 0o755); err != nil {
		return err
	}
	for _, r := range b.replicas {
		if err := r.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			return err
		}
	}
	for _, r := range b.replicas {
		deadline := time.Now().Add(10 * time.Second)
		for !benchproc.FileExists(b.profilePath(r)) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s wrote no profile; its log:\n%s", r.name, b.logTail(r.name))
			}
			time.Sleep(50 * time.Millisecond)
		}
		dst := filepath.Join(b.o.Profile, r.name+"-"+name+".pprof")
		data, err := os.ReadFile(b.profilePath(r))
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
		b.logf("CPU profile of %s, %s: %s", r.name, name, dst)
	}
	return nil
}
