package usage

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"
	"time"
)

// write is writeFileData of what f compacts to.
func write(t testing.TB, w io.Writer, f *fileData) error {
	t.Helper()
	d, err := f.compact()
	if err != nil {
		t.Fatal(err)
	}
	return writeFileData(w, d, f.JournalGen)
}

// compact turns the file's document, as json.Unmarshal reads it, into
// its form in memory: the reference that readFileData, which streams,
// is held to.
func (f *fileData) compact() (*usageData, error) {
	d := newUsageData()
	for id, hs := range f.Buckets {
		if err := d.setHours(id, hs); err != nil {
			return nil, err
		}
	}
	for id, ds := range f.Methods {
		if err := d.setDays(id, ds); err != nil {
			return nil, err
		}
	}
	for id, t := range f.LastUsed {
		d.setLastUsed(id, t)
	}
	for id, t := range f.LastAPIKey {
		d.setLastAPIKey(id, t)
	}
	return d, nil
}

// decoded is what json.Unmarshal makes of b.
func decoded(t testing.TB, b []byte) fileData {
	t.Helper()
	var d fileData
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return d
}

// TestWriteFileDataIsJSONMarshal: a file read into memory and written
// again by the usage file's own writer reads back exactly as
// encoding/json's document of the file does: every field of Counts (set
// by reflection, so a new field cannot be forgotten), counts by method,
// ids that need escaping, times in UTC and another zone, and empty
// sections.
func TestWriteFileDataIsJSONMarshal(t *testing.T) {
	var c Counts
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(1000 + i))
	}
	at := time.Date(2026, 11, 24, 10, 30, 0, 123456789, time.UTC)
	zone := time.Date(2026, 11, 24, 12, 30, 1, 0, time.FixedZone("", 2*3600))
	tests := []struct {
		name string
		d    fileData
	}{
		{"empty", fileData{Buckets: map[string]map[string]Counts{}, LastUsed: map[string]time.Time{}}},
		{"nil maps", fileData{}},
		{"full", fileData{
			Buckets: map[string]map[string]Counts{
				"key_0123456789abcdef":  {"2026112410": c, "2026112411": {Admitted: 1}},
				"key_\"quoted\\\n\t<&>": {"2026112410": c},
				"clé_ünïcode\u2028":     {},
			},
			LastUsed: map[string]time.Time{"key_0123456789abcdef": at, "key_\"quoted\\\n\t<&>": zone},
			Methods: map[string]map[string]MethodCounts{
				"key_0123456789abcdef": {"20261124": {APIKey: 3, Bearer: 4}, "20261123": {Bearer: 1}},
			},
			LastAPIKey: map[string]time.Time{"key_0123456789abcdef": zone},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ours bytes.Buffer
			if err := write(t, &ours, &tt.d); err != nil {
				t.Fatal(err)
			}
			std, err := json.Marshal(&tt.d)
			if err != nil {
				t.Fatal(err)
			}
			got, want := decoded(t, ours.Bytes()), decoded(t, std)
			if want.Buckets == nil { // json.Marshal writes null, ours {}: load() treats both as empty
				want.Buckets, want.LastUsed = map[string]map[string]Counts{}, map[string]time.Time{}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read back\n%+v\nwant\n%+v\nfrom %s", got, want, ours.Bytes())
			}
		})
	}
}

// TestWriteFileDataStreams: a large file goes out in chunks, not as one
// buffer of the whole document.
func TestWriteFileDataStreams(t *testing.T) {
	d := fileData{Buckets: map[string]map[string]Counts{}, LastUsed: map[string]time.Time{}}
	for i := range 5000 {
		id := "key_" + time.Duration(i).String()
		d.Buckets[id] = map[string]Counts{"2026112410": {Admitted: int64(i)}}
		d.LastUsed[id] = time.Unix(int64(i), 0).UTC()
	}
	w := &chunks{}
	if err := write(t, w, &d); err != nil {
		t.Fatal(err)
	}
	if w.n < 5 || w.max > 80<<10 {
		t.Errorf("%d writes of at most %d bytes, want several of at most 80 KiB", w.n, w.max)
	}
	if got := decoded(t, w.all.Bytes()); len(got.Buckets) != 5000 || len(got.LastUsed) != 5000 {
		t.Errorf("read back %d buckets and %d last uses, want 5000", len(got.Buckets), len(got.LastUsed))
	}
}

type chunks struct {
	all    bytes.Buffer
	n, max int
}

func (c *chunks) Write(p []byte) (int, error) {
	c.n++
	c.max = max(c.max, len(p))
	return c.all.Write(p)
}

// FuzzWriteFileDataID: any key id, however odd, makes valid JSON that
// reads back as the same id.
func FuzzWriteFileDataID(f *testing.F) {
	for _, s := range []string{"key_0123", "\"", "\\", "\x00\x1f", "\u2028", "\xff\xfe", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		d := fileData{Buckets: map[string]map[string]Counts{id: {"2026112410": {Admitted: 1}}}, LastUsed: map[string]time.Time{id: time.Unix(1, 0).UTC()}}
		var ours bytes.Buffer
		if err := write(t, &ours, &d); err != nil {
			t.Fatal(err)
		}
		std, _ := json.Marshal(&d)
		if got, want := decoded(t, ours.Bytes()), decoded(t, std); !reflect.DeepEqual(got, want) {
			t.Errorf("id %q: read back %+v, want %+v", id, got, want)
		}
	})
}
