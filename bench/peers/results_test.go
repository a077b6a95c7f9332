package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestResultsPath: -out TOPIC names its file by the UTC date, the first 7
// hex digits of the commit and the topic, and refuses a topic or commit
// that would make another name.
func TestResultsPath(t *testing.T) {
	t.Parallel()
	late := time.Date(2026, 11, 28, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600)) // the 29th in UTC
	for _, tc := range []struct {
		name, commit, topic string
		want, err           string
	}{
		{"full hash", "7e11da8f00c0ffee7e11da8f00c0ffee7e11da8f", "tls", "2026-11-29-7e11da8-tls.md", ""},
		{"short hash", "7e11da8", "keys-100k", "2026-11-29-7e11da8-keys-100k.md", ""},
		{"topic with a slash", "7e11da8", "../x", "", "a topic is"},
		{"topic with capitals", "7e11da8", "TLS", "", "a topic is"},
		{"empty topic", "7e11da8", "", "", "a topic is"},
		{"topic ending in a hyphen", "7e11da8", "tls-", "", "a topic is"},
		{"not a hash", "HEAD", "tls", "", "not a git commit hash"},
		{"short of 7", "7e11da", "tls", "", "not a git commit hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resultsPath("bench/results", late, tc.commit, tc.topic)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != filepath.Join("bench/results", tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, filepath.Join("bench/results", tc.want))
			}
		})
	}
}

// TestOutRefusesABadTopicBeforeRunning: a bad -out fails at once with the
// usage status, before minutes of load.
func TestOutRefusesABadTopicBeforeRunning(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	if code := Main([]string{"-out", "Bad Topic"}, &strings.Builder{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "a topic is") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
