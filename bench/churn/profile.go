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

func (b *bench) profilePath() string { return filepath.Join(b.dir, "replica1.pprof") }

// profileStart starts the CPU profile of replica 1.
func (b *bench) profileStart() error {
	_ = os.Remove(b.profilePath())
	return b.replicas[0].cmd.Process.Signal(syscall.SIGUSR1)
}

// profileStop stops it and moves it to -profile's directory as
// replica1-<name>.pprof.
func (b *bench) profileStop(name string) error {
	if err := b.replicas[0].cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for !fileExists(b.profilePath()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("replica 1 wrote no profile; its log:\n%s", b.logTail("replica1"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.MkdirAll(b.o.Profile, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(b.o.Profile, "replica1-"+name+".pprof")
	data, err := os.ReadFile(b.profilePath())
	if err != nil {
		return err
	}
	b.logf("CPU profile of replica 1, %s closed loop: %s", name, dst)
	return os.WriteFile(dst, data, 0o644)
}
