package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/cli"
)

// hostileEvent is an audit line written straight to the file, as an
// attacker with a foothold (or a bug) could leave it: ESC sequences that
// would clear the screen and colour text, newlines and carriage returns
// that would forge a row, a tab, C1 controls, a bidi override, a
// zero-width space, invalid UTF-8, and cells long enough to push the
// table off any screen.
func hostileEvent() map[string]any {
	long := strings.Repeat("quota exceeded for reasons that go on and on ", 6)
	return map[string]any{
		"id":     "evt_hostile",
		"time":   time.Now().UTC().Format(time.RFC3339Nano),
		"actor":  "tok_\x1b[2J\x1b[31mroot\x1b[0m",
		"source": "10.0.0.1\r2026-01-01T00:00:00Z  cli:alice",
		"action": "key.revoke\n2026-01-01T00:00:00Z  cli:alice  -  key.issue",
		"target": "key_\u202eevil\u200b",
		"changes": map[string]string{
			"name":  "a\tb\x07\xff",
			"notes": long,
		},
		"outcome": "error",
		"error":   "boom\x1b]0;pwned\x07\u009b31m " + long,
	}
}

// hostileConfig is a config whose audit log holds the CLI's own events
// and the hostile line, appended directly.
func hostileConfig(t *testing.T) (cfg string, long string) {
	t.Helper()
	cfg = planConfig(t)
	if code, _, errOut := run("consumers", "create", "--name", "Acme", "--config", cfg); code != 0 {
		t.Fatal(errOut)
	}
	line, err := json.Marshal(hostileEvent())
	if err != nil {
		t.Fatal(err)
	}
	// json.Marshal writes invalid UTF-8 as U+FFFD; put the raw byte back,
	// as a hand-written line could hold it.
	line = bytes.Replace(line, []byte(`\ufffd`), []byte{0xff}, 1)
	f, err := os.OpenFile(filepath.Join(filepath.Dir(cfg), "audit.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	return cfg, hostileEvent()["error"].(string)
}

// checkNoControl fails on any byte or rune a terminal acts on, other than
// the newline ending each row.
func checkNoControl(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r == utf8.RuneError || unicode.IsControl(r) || !unicode.IsPrint(r) && r != ' ' {
			t.Errorf("%s: raw %U at byte %d: %q", what, r, i, out[max(0, i-20):min(len(out), i+20)])
			return
		}
	}
}

func checkFits(t *testing.T, what, out string, width int) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > width {
			t.Errorf("%s: a line of %d columns, over %d: %q", what, n, width, l)
		}
	}
}

// TestAuditInA80ColumnTerminal: `keygate audit` writing to a real
// terminal (a pty of 80 columns, in raw mode so the bytes are what the
// program wrote) fits every row to 80 columns, ends cut cells with "…",
// and prints no control character whatever the audit log holds: the
// hostile row shows as escapes (\x1b, \n, \u202e), on one row.
func TestAuditInA80ColumnTerminal(t *testing.T) {
	cfg, _ := hostileConfig(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("no pty on this machine: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	if _, err := term.MakeRaw(int(tty.Fd())); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COLUMNS", "") // the terminal's own width, not an inherited one
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptmx) // until the tty side is closed (EIO)
		got <- string(b)
	}()
	var errb bytes.Buffer
	code := cli.Main([]string{"audit", "--config", cfg}, strings.NewReader(""), tty, &errb)
	_ = tty.Close()
	out := <-got
	if code != 0 {
		t.Fatalf("keygate audit: exit %d: %s", code, errb.String())
	}
	checkNoControl(t, "keygate audit on a terminal", out)
	checkFits(t, "keygate audit on an 80-column terminal", out, 80)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows, got %d lines:\n%s", len(lines), out)
	}
	hostile := lines[2]
	for _, want := range []string{`tok_\x1`, "…"} {
		if !strings.Contains(hostile, want) {
			t.Errorf("the hostile row lacks %q: %q", want, hostile)
		}
	}
	if !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[1], "consume") {
		t.Errorf("unexpected table:\n%s", out)
	}
}

// TestAuditTableWidths: the width a table is fitted to, for each way the
// output goes; escapes and --json in every case.
func TestAuditTableWidths(t *testing.T) {
	cfg, longErr := hostileConfig(t)
	for _, c := range []struct {
		name    string
		columns string
		width   int // 0: no limit, every cell whole
	}{
		{"piped, no COLUMNS: whole cells", "", 0},
		{"COLUMNS=80", "80", 80},
		{"COLUMNS=120", "120", 120},
		{"COLUMNS=40: as narrow as the columns go", "40", 0},
		{"COLUMNS not a number: ignored", "wide", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("COLUMNS", c.columns)
			code, out, errOut := run("audit", "--config", cfg)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			checkNoControl(t, "keygate audit", out)
			if n := strings.Count(out, "\n"); n != 3 {
				t.Errorf("%d lines, want 3 (a forged row?):\n%s", n, out)
			}
			switch {
			case c.width > 0:
				checkFits(t, "keygate audit", out, c.width)
				if !strings.Contains(out, "…") {
					t.Errorf("nothing cut at %d columns:\n%s", c.width, out)
				}
			case c.columns == "" || c.columns == "wide":
				if !strings.Contains(out, strings.TrimSpace(longErr[len(longErr)-30:])) || strings.Contains(out, "…") {
					t.Errorf("piped output cut a cell:\n%s", out)
				}
				for _, esc := range []string{`\x1b[2J`, `\r2026`, `\n2026`, `\u202eevil\u200b`, `\x1b]0;pwned\a\u009b31m`} {
					if !strings.Contains(out, esc) {
						t.Errorf("no %s escape in:\n%s", esc, out)
					}
				}
			}
			code, out, _ = run("audit", "--json", "--config", cfg)
			var events []audit.Event
			if code != 0 || json.Unmarshal([]byte(out), &events) != nil || len(events) != 2 || events[1].Error != hostileEvent()["error"] {
				t.Errorf("--json does not keep everything: %d %s", code, out)
			}
		})
	}
}

// TestTablesFit: the other tables (keys list, consumers list and show)
// fit COLUMNS with long names and metadata (escaping is table_internal_test's).
func TestTablesFit(t *testing.T) {
	cfg := planConfig(t)
	t.Setenv("COLUMNS", "")
	code, con, errOut := run("consumers", "create", "--name", "Acme", "--meta", "note="+strings.Repeat("x", 150), "--config", cfg)
	if code != 0 {
		t.Fatal(errOut)
	}
	con = strings.TrimSpace(con)
	if code, _, errOut := run("keys", "issue", "--product", "registry", "--env", "test", "--name", "billing "+strings.Repeat("y", 150), "--consumer", con, "--config", cfg); code != 0 {
		t.Fatal(errOut)
	}
	for _, args := range [][]string{{"keys", "list"}, {"consumers", "list"}, {"consumers", "show", con}} {
		for _, cols := range []string{"", "80"} {
			t.Setenv("COLUMNS", cols)
			code, out, errOut := run(append(args, "--config", cfg)...)
			if code != 0 {
				t.Fatalf("%v: %s", args, errOut)
			}
			checkNoControl(t, strings.Join(args, " "), out)
			if cols == "80" {
				checkFits(t, strings.Join(args, " ")+" at COLUMNS=80", out, 80)
			}
		}
	}
}
