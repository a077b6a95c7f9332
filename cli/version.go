package cli

import (
	"runtime/debug"
	"strings"
)

// Release is the version of this source tree: the newest release in
// CHANGELOG.md, and the Helm chart's appVersion (TestVersionMatchesChangelog
// holds the three together). Raise it when cutting a release.
const Release = "0.1.0"

// Version is what `keygate version` prints and keygate_build_info carries:
// Release, unless a build sets it with
// -ldflags "-X github.com/keygate/keygate/cli.Version=…" (the bench does,
// with the commit of a side-by-side build).
var Version = Release

// Revision is the commit the binary was built from, when the build says
// so (make build sets it with -ldflags "-X …cli.Revision=…"); empty, the
// commit Go stamped into the build, if any, is used.
var Revision = ""

// version is Version, then the commit the binary was built from when Go
// stamped one (go build in a git checkout does): "0.1.0 (COMMIT)",
// with ", modified" for a work tree with uncommitted changes.
func version() string {
	v := Version
	if v == "" {
		v = "dev"
	}
	if Revision != "" {
		if strings.Contains(v, Revision) {
			return v
		}
		return v + " (" + Revision + ")"
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" || strings.Contains(v, rev[:min(12, len(rev))]) {
		return v
	}
	rev = rev[:min(12, len(rev))]
	if modified == "true" {
		rev += ", modified"
	}
	return v + " (" + rev + ")"
}
