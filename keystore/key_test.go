package keystore

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func mustGenerate(t testing.TB, env Env) string {
	t.Helper()
	k, err := Generate(env)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// bump changes the character at i to the next one of the base62 alphabet.
func bump(s string, i int) string {
	b := []byte(s)
	j := strings.IndexByte(base62, b[i])
	b[i] = base62[(j+1)%len(base62)]
	return string(b)
}

func TestGenerateParses(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, env := range []Env{Live, Test} {
		for range 200 {
			k := mustGenerate(t, env)
			if len(k) != KeyLen || !strings.HasPrefix(k, env.Prefix()) {
				t.Fatalf("Generate(%s) gave a key of length %d with prefix %q", env, len(k), k[:prefixLen])
			}
			got, err := Parse(k)
			if err != nil || got != env {
				t.Fatalf("Parse(Generate(%s)) = %q, %v", env, got, err)
			}
			if seen[k] {
				t.Fatal("Generate repeated a key")
			}
			seen[k] = true
		}
	}
	if _, err := Generate("prod"); err == nil {
		t.Error("Generate(prod) succeeded")
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	live := mustGenerate(t, Live)
	test := mustGenerate(t, Test)
	body := live[prefixLen:]
	tests := []struct {
		name    string
		key     string
		wantEnv Env
		wantErr error
	}{
		{"live key", live, Live, nil},
		{"test key", test, Test, nil},
		{"empty", "", "", ErrMalformed},
		{"prefix only", "svc_live_", "", ErrMalformed},
		{"prod prefix", "svc_prod_" + body, "", ErrMalformed},
		{"no prefix", body, "", ErrMalformed},
		{"upper-case prefix", "SVC_LIVE_" + body, "", ErrMalformed},
		{"live prefix on test key body", "svc_live_" + test[prefixLen:], "", ErrChecksum},
		{"trailing space", live + " ", "", ErrMalformed},
		{"leading space", " " + live, "", ErrMalformed},
		{"trailing newline", live + "\n", "", ErrMalformed},
		{"tab inside", live[:20] + "\t" + live[21:], "", ErrMalformed},
		{"dash inside", live[:20] + "-" + live[21:], "", ErrMalformed},
		{"underscore inside", live[:20] + "_" + live[21:], "", ErrMalformed},
		{"unicode letter", live[:KeyLen-2] + "é", "", ErrMalformed},
		{"unicode digit", live[:KeyLen-3] + "٣", "", ErrMalformed},
		{"NUL byte", live[:20] + "\x00" + live[21:], "", ErrMalformed},
		{"too short by one", live[:KeyLen-1], "", ErrMalformed},
		{"too long by one", live + "A", "", ErrMalformed},
		{"much too short", "svc_live_abc", "", ErrMalformed},
		{"checksum off by one char", bump(live, KeyLen-1), "", ErrChecksum},
		{"random part off by one char", bump(live, prefixLen+3), "", ErrChecksum},
		{"two chars swapped", swap(live, prefixLen, prefixLen+1), "", ErrChecksum},
		{"all zeros", "svc_live_" + strings.Repeat("0", KeyLen-prefixLen), "", ErrChecksum},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, err := Parse(tc.key)
			if tc.wantErr == nil {
				if err != nil || env != tc.wantEnv {
					t.Fatalf("Parse = %q, %v; want %q, nil", env, err, tc.wantEnv)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse error = %v; want %v", err, tc.wantErr)
			}
			if env != "" {
				t.Errorf("Parse returned env %q with an error", env)
			}
			if len(tc.key) > prefixLen+4 && strings.Contains(err.Error(), tc.key[prefixLen:]) {
				t.Errorf("error %q echoes the key", err)
			}
		})
	}
}

func swap(s string, i, j int) string {
	b := []byte(s)
	if b[i] == b[j] {
		b[j] = base62[(strings.IndexByte(base62, b[j])+1)%62]
	}
	b[i], b[j] = b[j], b[i]
	return string(b)
}

func TestChecksumIsCRC32(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "svc_live_abcdefghij", "123456789"} {
		if got, want := crc(s), crc32.ChecksumIEEE([]byte(s)); got != want {
			t.Errorf("crc(%q) = %08x, want %08x", s, got, want)
		}
	}
	var b [ChecksumLen]byte
	putChecksum(b[:], 0)
	if string(b[:]) != "000000" {
		t.Errorf("checksum of 0 = %q, want left-padded 000000", b)
	}
	putChecksum(b[:], ^uint32(0))
	if string(b[:]) != "4gfFC3" {
		t.Errorf("checksum of 2^32-1 = %q, want 4gfFC3", b)
	}
}

func TestHashRoundTrip(t *testing.T) {
	t.Parallel()
	k := mustGenerate(t, Live)
	h := HashKey(k)
	s := h.String()
	if !strings.HasPrefix(s, "sha256:") || len(s) != 7+64 {
		t.Fatalf("String = %q", s)
	}
	if strings.Contains(s, k[prefixLen:]) {
		t.Fatal("hash string contains the key")
	}
	back, err := ParseHash(s)
	if err != nil || !back.Equal(h) || back != h {
		t.Fatalf("ParseHash(String) = %v, %v", back, err)
	}
	upper, err := ParseHash("sha256:" + strings.ToUpper(s[7:]))
	if err != nil || upper != h {
		t.Fatalf("ParseHash of upper-case hex = %v, %v", upper, err)
	}
	if h.Equal(HashKey(bump(k, KeyLen-1))) {
		t.Error("different keys have equal hashes")
	}

	for _, bad := range []string{"", "sha256:", "md5:" + s[7:], s[:len(s)-1], s + "0", "sha256:" + strings.Repeat("g", 64), " " + s} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) succeeded", bad)
		}
	}

	type doc struct {
		H Hash `yaml:"h" json:"h"`
	}
	y, err := yaml.Marshal(doc{h})
	if err != nil || !bytes.Contains(y, []byte(s)) {
		t.Fatalf("yaml = %s, %v; want it to contain %s", y, err, s)
	}
	var dy doc
	if err := yaml.Unmarshal(y, &dy); err != nil || dy.H != h {
		t.Fatalf("yaml round trip = %v, %v", dy.H, err)
	}
	j, err := json.Marshal(doc{h})
	if err != nil || string(j) != `{"h":"`+s+`"}` {
		t.Fatalf("json = %s, %v", j, err)
	}
	var dj doc
	if err := json.Unmarshal(j, &dj); err != nil || dj.H != h {
		t.Fatalf("json round trip = %v, %v", dj.H, err)
	}
	if err := json.Unmarshal([]byte(`{"h":"sha256:zz"}`), &dj); err == nil {
		t.Error("json accepted a bad hash")
	}
	if err := yaml.Unmarshal([]byte("h: nope\n"), &dy); err == nil {
		t.Error("yaml accepted a bad hash")
	}
}

// FuzzParse checks that Parse never panics, that whatever it accepts is a
// well-formed key whose checksum verifies, and that keys generated from any
// entropy parse.
func FuzzParse(f *testing.F) {
	live := mustGenerate(f, Live)
	f.Add(live, []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	f.Add(mustGenerate(f, Test), []byte{})
	f.Add("svc_prod_"+live[prefixLen:], bytes.Repeat([]byte{255}, 70))
	f.Add(live+" ", []byte("x"))
	f.Add(bump(live, KeyLen-1), bytes.Repeat([]byte{7}, 64))
	f.Add("svc_live_é", []byte(nil))
	f.Fuzz(func(t *testing.T, key string, entropy []byte) {
		env, err := Parse(key)
		if err == nil {
			if len(key) != KeyLen {
				t.Fatalf("accepted length %d", len(key))
			}
			if (env != Live || !strings.HasPrefix(key, "svc_live_")) && (env != Test || !strings.HasPrefix(key, "svc_test_")) {
				t.Fatalf("accepted with env %q", env)
			}
			for i := prefixLen; i < len(key); i++ {
				if !isBase62(key[i]) {
					t.Fatalf("accepted non-alphanumeric byte %q", key[i])
				}
			}
			var sum [ChecksumLen]byte
			putChecksum(sum[:], crc32.ChecksumIEEE([]byte(key[:prefixLen+RandomLen])))
			if string(sum[:]) != key[prefixLen+RandomLen:] {
				t.Fatal("accepted a key whose checksum does not verify")
			}
		} else {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrChecksum) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrChecksum", err)
			}
			if len(key) > 12 && strings.Contains(err.Error(), key) {
				t.Fatal("error echoes the key")
			}
		}
		for _, e := range []Env{Live, Test} {
			g, err := generate(e, bytes.NewReader(entropy))
			if err != nil {
				continue // not enough entropy
			}
			if got, err := Parse(g); err != nil || got != e {
				t.Fatalf("generated key does not parse: %v", err)
			}
		}
	})
}

func BenchmarkParse(b *testing.B) {
	k := mustGenerate(b, Live)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseBadChecksum(b *testing.B) {
	k := bump(mustGenerate(b, Live), KeyLen-1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(k); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkHashKey(b *testing.B) {
	k := mustGenerate(b, Live)
	b.ReportAllocs()
	for b.Loop() {
		_ = HashKey(k)
	}
}

func BenchmarkGenerate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Generate(Live); err != nil {
			b.Fatal(err)
		}
	}
}
