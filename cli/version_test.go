package cli_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/keygate/keygate/cli"
)

// TestVersionMatchesChangelog: `keygate version` prints the newest release
// of CHANGELOG.md, which is also the Helm chart's appVersion, so a user can
// name the version they run and read what it does.
func TestVersionMatchesChangelog(t *testing.T) {
	t.Parallel()
	log, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	// Keep a Changelog: "## [Unreleased]", then "## [0.1.0] - 2026-11-29".
	m := regexp.MustCompile(`(?m)^## \[([0-9]+\.[0-9]+\.[0-9]+)\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$`).FindSubmatch(log)
	if m == nil {
		t.Fatal("CHANGELOG.md has no released version (## [X.Y.Z] - YYYY-MM-DD)")
	}
	newest := string(m[1])
	if !regexp.MustCompile(`(?m)^## \[Unreleased\]$`).Match(log) {
		t.Error("CHANGELOG.md has no ## [Unreleased] section")
	}

	code, out, errOut := run("version")
	if code != 0 {
		t.Fatalf("keygate version: exit %d: %s", code, errOut)
	}
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "keygate" || f[1] != newest {
		t.Errorf("keygate version printed %q, want \"keygate %s\" first (CHANGELOG.md's newest release)", out, newest)
	}
	if cli.Release != newest {
		t.Errorf("cli.Release %q, CHANGELOG.md's newest release %q", cli.Release, newest)
	}

	chart, err := os.ReadFile("../deploy/helm/keygate/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	av := regexp.MustCompile(`(?m)^appVersion: "?([^"\n]*)"?$`).FindSubmatch(chart)
	if av == nil || string(av[1]) != newest {
		t.Errorf("Chart.yaml appVersion %q, want %s", av, newest)
	}
}
