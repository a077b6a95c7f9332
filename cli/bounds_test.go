package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every limit flag out of bounds is a usage error (exit 2) that names the
// flag, on keys and consumers alike, and nothing is changed; control
// characters in a name or metadata are refused the same way.
func TestLimitFlagsOutOfBounds(t *testing.T) {
	t.Parallel()
	cfg := planConfig(t)
	code, out, errOut := run("consumers", "create", "--config", cfg, "--name", "Acme")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	con := strings.TrimSpace(out)
	if code, _, errOut := run("keys", "issue", "--config", cfg, "--product", "registry", "--env", "test"); code != 0 {
		t.Fatal(errOut)
	}
	_, out, _ = run("keys", "list", "--config", cfg, "--json")
	var recs []map[string]any
	_ = json.Unmarshal([]byte(out), &recs)
	key := recs[0]["id"].(string)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"rate 1e-300", []string{"--rate", "1e-300"}, "--rate: rate: must be from"},
		{"rate 1e308", []string{"--rate", "1e308"}, "--rate: rate: "},
		{"rate NaN", []string{"--rate", "NaN"}, "--rate: rate: "},
		{"rate 1e6 per 1ms", []string{"--rate", "1000000", "--per", "1ms"}, "--rate: rate: 1e+06 per 1ms"},
		{"per 1ns", []string{"--per", "1ns"}, "--per: per: must be a duration from 1ms"},
		{"per 9000h", []string{"--per", "9000h"}, "--per: per: "},
		{"negative per", []string{"--per", "-1s"}, "--per: per: "},
		{"burst MaxInt64", []string{"--burst", "9223372036854775807"}, "--burst: burst: must be from 1 to 1000000000"},
		{"burst 0", []string{"--burst", "0"}, "--burst: burst: "},
		{"quota MaxInt64/1ns", []string{"--quota", "9223372036854775807/1ns"}, "--quota: quota.requests: "},
		{"quota 10/1ns", []string{"--quota", "10/1ns"}, "--quota: quota.per: "},
		{"quota 0/0s", []string{"--quota", "0/0s"}, "--quota: quota.requests: "},
	}
	for _, tc := range cases {
		for _, target := range [][]string{{"keys", "update", key}, {"consumers", "update", con}, {"consumers", "create", "--name", "B"}} {
			args := append(append(append([]string{}, target...), "--config", cfg), tc.args...)
			code, _, errOut := run(args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("%s: %v: exit %d, stderr %q, want 2 and %q", tc.name, target[:2], code, errOut, tc.want)
			}
		}
	}
	for _, args := range [][]string{
		{"consumers", "create", "--name", "a\x1b[31mb"},
		{"consumers", "update", con, "--name", "a\nb"},
		{"consumers", "update", con, "--meta", "crm=x\ry"},
		{"consumers", "update", con, "--meta", "c\x1brm=x"},
		{"keys", "update", key, "--name", "a\u009bb"},
		{"keys", "issue", "--product", "registry", "--env", "test", "--name", "a\u202eb"},
	} {
		code, _, errOut := run(append(args, "--config", cfg)...)
		if code != 2 || !strings.Contains(errOut, "must not contain control") {
			t.Errorf("%q: exit %d, stderr %q, want 2 naming the control character", args, code, errOut)
		}
	}
	s := showKey(t, cfg, key)
	if string(s.Override) != "" && string(s.Override) != "null" {
		t.Errorf("the key changed: override %s", s.Override)
	}
}
