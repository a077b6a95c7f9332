package keystore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckAndStreamFile: CheckFile counts a good file's keys and refuses
// a bad one (a duplicate id, an invalid record) before anything is
// streamed; StreamFile passes every record once, in file order, in
// batches of the size asked, from the fast reader and from yaml.v3 alike.
func TestCheckAndStreamFile(t *testing.T) {
	t.Parallel()
	var recs []Record
	for i := 0; i < 5; i++ {
		r := validRecord(t)
		r.ID = "key_000000000000000" + string(rune('0'+i))
		r.Hash = HashKey(r.ID)
		recs = append(recs, r)
	}
	good, err := MarshalFile(recs)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"as written", string(good), ""},
		{"flow style (yaml.v3)", "version: 1\nkeys: [" + flow(recs) + "]\n", ""},
		{"duplicate id", strings.Replace(string(good), recs[1].ID, recs[0].ID, 1), "duplicate id"},
		{"invalid record", strings.Replace(string(good), "status: active", "status: expired", 1), "status"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "keys.yaml")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			n, _, err := CheckFile(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("CheckFile: %v, want an error about %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || n != len(recs) {
				t.Fatalf("CheckFile: %d keys, %v", n, err)
			}
			var got []string
			var sizes []int
			err = StreamFile(path, 2, func(b []Record) error {
				sizes = append(sizes, len(b))
				for _, r := range b {
					got = append(got, r.ID)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != strings.Join(ids(recs), ",") || len(sizes) != 3 || sizes[0] != 2 || sizes[2] != 1 {
				t.Errorf("streamed %v in batches %v", got, sizes)
			}
		})
	}
}

func ids(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func flow(recs []Record) string {
	var parts []string
	for _, r := range recs {
		parts = append(parts, "{id: "+r.ID+", hash: '"+r.Hash.String()+"', product: "+string(r.Product)+", env: "+string(r.Env)+
			", context: "+r.Context+", created_at: "+r.CreatedAt.Format("2006-01-02T15:04:05Z07:00")+", status: active}")
	}
	return strings.Join(parts, ", ")
}
