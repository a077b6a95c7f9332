package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary play the bench's roles (upstream, bare
// proxy) when the bench starts it as a child process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-role" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmoke runs the bench in smoke mode: one short rep with tiny bodies,
// skipping peers that are not installed. It proves the bench works end to
// end (every target answers the bench request with 200, the tables come
// out); it asserts nothing about speed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := Run(ctx, Options{Smoke: true}, &out, &errb)
	t.Log(errb.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"| direct |", "| bare |", "| keygate |", "| keygate-redis |", "Open loop", "Large uploads"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Every progress line ends with its error count; all must be zero.
	for _, line := range strings.Split(errb.String(), "\n") {
		if strings.Contains(line, "errors") && !strings.HasSuffix(line, " 0 errors") && !strings.Contains(line, ", 0/") {
			t.Errorf("a target failed requests: %s", line)
		}
	}
}
