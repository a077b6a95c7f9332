package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/secretscan"
)

// TestCheckFormatAndRegistrationPatterns: keys and admin tokens the CLI
// issues are well-formed to `keys check-format` and match the patterns the
// docs tell operators to register with GitHub; near-misses fail
// check-format, and those a pattern cannot tell (a wrong checksum) are the
// only ones it matches. The docs hold the patterns exactly.
func TestCheckFormatAndRegistrationPatterns(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keygate.yaml")
	if err := os.WriteFile(cfg, []byte("keystore:\n  file: "+filepath.Join(dir, "keys.yaml")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	issue := func(args ...string) string {
		code, out, errOut := run(append(args, "--config", cfg)...)
		if code != 0 {
			t.Fatalf("keygate %v: %d %s", args, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	live := issue("keys", "issue", "--product", "extraction", "--env", "live", "--context", "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5")
	test := issue("keys", "issue", "--product", "registry", "--env", "test")
	admin := issue("admin-tokens", "create", "--name", "ci", "--scopes", "keys:read")
	key, liveRE, testRE, adminRE := regexp.MustCompile(secretscan.KeyPattern), regexp.MustCompile(secretscan.LiveKeyPattern), regexp.MustCompile(secretscan.TestKeyPattern), regexp.MustCompile(secretscan.AdminTokenPattern)

	for _, tc := range []struct {
		name     string
		s        string
		code     int
		want     string
		patterns []*regexp.Regexp // that match it
	}{
		{"issued live key", live, 0, "well-formed live API key", []*regexp.Regexp{key, liveRE}},
		{"issued test key", test, 0, "well-formed test API key", []*regexp.Regexp{key, testRE}},
		{"issued admin token", admin, 0, "well-formed admin token", []*regexp.Regexp{adminRE}},
		{"key with a typo", keystoretest.Mistype(live), 1, "checksum", []*regexp.Regexp{key, liveRE}},
		{"admin token with a typo", keystoretest.Mistype(admin), 1, "checksum", []*regexp.Regexp{adminRE}},
		{"key one short", live[:len(live)-1], 1, "characters long", nil},
		{"key one long", live + "A", 1, "characters long", nil},
		{"admin token one short", admin[:len(admin)-1], 1, "characters long", nil},
		{"wrong prefix", "svc_prod_" + live[9:], 1, "prefix", nil},
		{"upper-case prefix", "SVC_LIVE_" + live[9:], 1, "prefix", nil},
		{"not base62", live[:20] + "-" + live[21:], 1, "[0-9A-Za-z]", nil},
		{"empty", "", 1, "empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := run("keys", "check-format", tc.s)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("check-format: %d %q, want %d and %q", code, out, tc.code, tc.want)
			}
			if tc.s != "" && strings.Contains(out, tc.s) {
				t.Fatal("check-format echoed the string")
			}
			for _, re := range []*regexp.Regexp{key, liveRE, testRE, adminRE} {
				want := false
				for _, p := range tc.patterns {
					want = want || p == re
				}
				if got := re.MatchString(tc.s); got != want {
					t.Errorf("%s matches %v, want %v", re, got, want)
				}
				// In a file, beside other text: found the same.
				if got := re.MatchString("API_KEY=\"" + tc.s + "\"\n"); got != want && tc.s != "" {
					t.Errorf("%s in a line matches %v, want %v", re, got, want)
				}
			}
		})
	}
	if key.MatchString("x" + live) {
		t.Error("a key inside a longer word matches")
	}

	doc, err := os.ReadFile("../docs/guides/leaked-keys.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{secretscan.LiveKeyPattern, secretscan.TestKeyPattern, secretscan.AdminTokenPattern} {
		if !strings.Contains(string(doc), p) {
			t.Errorf("docs/guides/leaked-keys.md lacks the pattern %s", p)
		}
	}
}
