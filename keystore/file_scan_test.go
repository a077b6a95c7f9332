package keystore

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

// sameParse checks that the fast reader and yaml.v3 agree on data: both
// accept it with the same document, or both refuse it.
func sameParse(t *testing.T, data []byte) {
	t.Helper()
	fast, ferr := parseDoc(data)
	slow, serr := parseDocYAML(data)
	if len(strings.TrimSpace(string(data))) == 0 {
		slow, serr = fileDoc{}, nil // parseDoc's own rule, before either reader
	}
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("fast reader: %v; yaml.v3: %v\n%s", ferr, serr, data)
	}
	if ferr != nil {
		return
	}
	if len(fast.Keys) != len(slow.Keys) {
		t.Fatalf("fast reader read %d keys, yaml.v3 %d\n%s", len(fast.Keys), len(slow.Keys), data)
	}
	for i := range fast.Keys {
		if !recordsEqual(fast.Keys[i], slow.Keys[i]) || fast.Keys[i].Consumer != slow.Keys[i].Consumer ||
			fast.Keys[i].Plan != slow.Keys[i].Plan || !reflect.DeepEqual(fast.Keys[i].Override, slow.Keys[i].Override) {
			t.Fatalf("key %d: fast reader %+v, yaml.v3 %+v\n%s", i, fast.Keys[i], slow.Keys[i], data)
		}
	}
	if !reflect.DeepEqual(fast.Consumers, slow.Consumers) || fast.Version != slow.Version {
		t.Fatalf("rest of the file differs: %+v vs %+v", fast, slow)
	}
}

// TestFastReaderMatchesYAML: the fast reader of keystore files reads what
// yaml.v3 reads, for files as FileAdmin writes them and for hand-edited
// variants (comments, CRLF, quotes, an override, flow style, another
// indentation, unknown and repeated fields, block scalars).
func TestFastReaderMatchesYAML(t *testing.T) {
	t.Parallel()
	r := validRecord(t)
	r2 := validRecord(t)
	r2.ID, r2.Hash, r2.Name, r2.ExpiresAt = "key_00000000000000ff", HashKey("svc_live_other"), "two words", time.Date(2027, 1, 1, 0, 0, 0, 5, time.UTC)
	r2.Plan = "pro"
	r2.Override = &policy.Override{Rate: 5, Per: time.Second}
	written, err := MarshalFile([]Record{r, r2})
	if err != nil {
		t.Fatal(err)
	}
	w := string(written)
	h := r.Hash.String()
	cases := map[string]string{
		"as written":          w,
		"crlf":                strings.ReplaceAll(w, "\n", "\r\n"),
		"comments and blanks": strings.Replace(w, "keys:\n", "keys:\n  # the keys\n\n", 1),
		"quoted name":         strings.Replace(w, "name: two words", `name: "two words"`, 1),
		"null name":           strings.Replace(w, "name: two words", `name: ~`, 1),
		"numeric name":        strings.Replace(w, "name: two words", `name: 123`, 1),
		"name with comment":   strings.Replace(w, "name: two words", `name: two # words`, 1),
		"block scalar name":   strings.Replace(w, "name: two words", "name: |\n      two\n\n      words", 1),
		"unknown field":       strings.Replace(w, "name: two words", "nmae: two words", 1),
		"repeated field":      strings.Replace(w, "name: two words", "name: a\n    name: b", 1),
		"flow keys":           "version: 1\nkeys: [{id: " + r.ID + ", hash: '" + h + "', product: registry, env: test, status: active}]\n",
		"zero indent":         "version: 1\nkeys:\n- id: " + r.ID + "\n  hash: " + h + "\n  product: registry\n  env: test\n  status: active\n",
		"bad time":            strings.Replace(w, "created_at: ", "created_at: yesterday", 1),
		"other time format":   strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2026-01-02 03:04:05", 1),
		"february 30":         strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2026-02-30T00:00:00Z", 1),
		"hour 24":             strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2026-01-02T24:00:00Z", 1),
		"leap second":         strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2016-12-31T23:59:60Z", 1),
		"lower-case t and z":  strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2026-01-02t03:04:05z", 1),
		"time with offset":    strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2026-01-02T03:04:05+02:00", 1),
		"sign in a time":      strings.Replace(w, r.CreatedAt.Format(time.RFC3339), "2026-01-02T03:04:-5Z", 1),
		"a line over 64 KiB":  strings.Replace(w, "name: two words", "name: "+strings.Repeat("long ", 20000), 1),
		"version 2":           strings.Replace(w, "version: 1", "version: 2", 1),
		"keys twice":          w + "keys:\n  - id: x\n",
		"only comments":       "# nothing\n",
		"empty":               "  \n",
		"upper-case context":  strings.Replace(w, r.Context, strings.ToUpper(r.Context), 1),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sameParse(t, []byte(data))
		})
	}
	// The file as written takes the fast path.
	if _, err := scanDoc(strings.NewReader(w), func(Record) error { return nil }); errors.Is(err, errNotCanonical) {
		t.Error("a file as FileAdmin writes it is not read by the fast reader")
	}
}

// FuzzFastReader: the fast reader and yaml.v3 agree on any bytes.
func FuzzFastReader(f *testing.F) {
	good, err := MarshalFile([]Record{validRecord(f)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("version: 1\nkeys:\n  - id: a\n    hash: sha256:" + strings.Repeat("ab", 32) + "\n    product: registry\n    env: test\n    status: active\n"))
	f.Add([]byte("version: 1\nkeys:\n  - id: a\n    name: 'x'\n"))
	f.Add([]byte("version: 1\nkeys:\n  - id: a\n    created_at: 2026-02-29T23:59:59Z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sameParse(t, data)
	})
}
