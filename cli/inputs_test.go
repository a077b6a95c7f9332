package cli_test

import (
	"strings"
	"testing"
)

// The CLI refuses what the admin API refuses, through keyops: names with
// an invisible or look-alike character (consumers, keys, admin tokens)
// and an --allow-cidr with host bits exit 2 with the field named, and
// store nothing.
func TestInputsRefused(t *testing.T) {
	t.Parallel()
	cfg := planConfig(t)
	code, out, errOut := run("consumers", "create", "--config", cfg, "--name", "Acme")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	con := strings.TrimSpace(out)
	code, out, errOut = run("keys", "issue", "--config", cfg, "--product", "registry", "--env", "test", "--name", "ci")
	if code != 0 {
		t.Fatalf("issue: %d %s", code, errOut)
	}
	_, rest, _ := strings.Cut(errOut, "issued ")
	key, _, _ := strings.Cut(rest, ":")
	if !strings.HasPrefix(key, "key_") {
		t.Fatalf("no key id in %q", errOut)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"zero-width joiner in a consumer name", []string{"consumers", "create", "--name", "Ac\u200dme"}, "name: "},
		{"full-width consumer rename", []string{"consumers", "update", con, "--name", "Ａｃｍｅ"}, `write "Acme"`},
		{"zero-width space in a key name", []string{"keys", "issue", "--product", "registry", "--env", "test", "--name", "c\u200bi"}, "name: "},
		{"doubled space in a key rename", []string{"keys", "update", key, "--name", "ci  bot"}, `write "ci bot"`},
		{"word joiner in an admin token name", []string{"admin-tokens", "create", "--name", "ci\u2060", "--scopes", "keys:read"}, "name: "},
		{"host bits on an issue", []string{"keys", "issue", "--product", "registry", "--env", "test", "--allow-cidr", "10.1.2.3/8"},
			`allowed_cidrs[0]: "10.1.2.3/8" has host bits set; write the range as 10.0.0.0/8`},
		{"host bits on a key update", []string{"keys", "update", key, "--allow-cidr", "192.0.2.0/24", "--allow-cidr", "198.51.100.9/24"},
			`allowed_cidrs[1]: "198.51.100.9/24" has host bits set; write the range as 198.51.100.0/24`},
		{"host bits on a consumer", []string{"consumers", "create", "--name", "Globex", "--allow-cidr", "2001:db8::1/32"}, "write the range as 2001:db8::/32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(append(tc.args, "--config", cfg)...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want 2 with %q; stderr: %s", code, tc.want, errOut)
			}
		})
	}
	// Nothing stored: one consumer named Acme, one key named ci with any
	// address, no admin token.
	if code, out, _ := run("consumers", "list", "--config", cfg); code != 0 || strings.Count(out, "con_") != 1 || !strings.Contains(out, "Acme") {
		t.Fatalf("consumers list: %d %s", code, out)
	}
	s := showKey(t, cfg, key)
	if s.ID != key {
		t.Fatalf("keys show: %+v", s)
	}
	if code, out, _ := run("keys", "list", "--config", cfg); code != 0 || strings.Count(out, "key_") != 1 || strings.Contains(out, "10.0.0.0") {
		t.Fatalf("keys list: %d %s", code, out)
	}
	if code, out, _ := run("admin-tokens", "list", "--config", cfg); code != 0 || strings.Contains(out, "tok_") {
		t.Fatalf("admin-tokens list: %d %s", code, out)
	}
}
