package strictjson_test

import (
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/strictjson"
)

type body struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
	Rate     *float64          `json:"rate"`
	Tags     []string          `json:"tags"`
}

func TestUnmarshalRefusesWhatParsersReadDifferently(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string // want "" means accepted
	}{
		{"plain", `{"name":"a","metadata":{"crm":"1"},"rate":5,"tags":["x"]}`, ""},
		{"whitespace around", " \n{\"name\":\"a\"}\n ", ""},
		{"escaped non-ASCII", `{"name":"caf\u00e9 ☕"}`, ""},
		{"duplicate key", `{"name":"a","name":"b"}`, `at "/name" (byte 12): duplicate object member name`},
		{"duplicate via escape", `{"name":"a","n\u0061me":"b"}`, `duplicate object member name`},
		{"duplicate in a map", `{"metadata":{"a":"1","a":"2"}}`, `at "/metadata/a" (byte 21): duplicate object member name`},
		{"duplicate nested in an array", `{"tags":[],"metadata":{}, "x":[{"k":1,"k":2}]}`, `duplicate`},
		{"case variant", `{"name":"a","NAME":"b"}`, `member names "name" and "NAME" at the top level differ only in letter case`},
		{"case variant alone", `{"NAME":"b"}`, `unknown member "NAME"`},
		{"Kelvin sign variant", "{\"metadata\":{\"k\":\"1\",\"\u212a\":\"2\"}}", `differ only in letter case`},
		{"case variant in a map", `{"metadata":{"crm":"1","CRM":"2"}}`, `at "/metadata" differ only in letter case`},
		{"underscore variant", `{"metadata":{"crm_id":"1","crmid":"2"}}`, `differ only in letter case or in '_' and '-'`},
		{"invalid UTF-8 in a value", "{\"name\":\"a\xffb\"}", `invalid UTF-8`},
		{"invalid UTF-8 in a name", "{\"metadata\":{\"a\xff\":\"1\"}}", `invalid UTF-8`},
		{"lone surrogate escape", `{"name":"\ud800"}`, `invalid`},
		{"unknown member", `{"nme":"a"}`, `unknown member "nme"`},
		{"trailing data", `{"name":"a"} {"name":"b"}`, `after top-level value`},
		{"trailing garbage", `{"name":"a"}x`, `invalid character`},
		{"truncated", `{"name":"a"`, `unexpected EOF`},
		{"wrong type", `{"rate":"fast"}`, `"/rate" cannot be read as a number`},
		{"empty", ``, `unexpected EOF`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b body
			err := strictjson.Unmarshal([]byte(tc.in), &b)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Unmarshal(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Unmarshal(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzUnmarshal holds Unmarshal to its promise on any input: no panic,
// and a body it accepts has no duplicate or case-variant names and is
// valid UTF-8.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{`{"name":"a","metadata":{"k":"v"},"rate":1,"tags":["a"]}`, `{"name":"a","NAME":"b"}`, `{"a":{"b":[{"c":1}]}}`, "{\"name\":\"\xff\"}", `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var b body
		if strictjson.Unmarshal(in, &b) != nil {
			return
		}
		var m map[string]any
		if err := strictjson.Unmarshal(in, &m); err != nil && string(in) != "null" && !strings.Contains(err.Error(), "cannot be read") {
			t.Fatalf("accepted as a struct but not as a map: %v", err)
		}
		for k, v := range b.Metadata {
			for _, s := range []string{k, v} {
				if !utf8Valid(s) {
					t.Fatalf("accepted invalid UTF-8 %q", s)
				}
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// UnmarshalObject refuses every top-level value but an object, naming
// what it got, and decodes an object as Unmarshal does.
func TestUnmarshalObject(t *testing.T) {
	t.Parallel()
	type body struct {
		Name string `json:"name"`
	}
	for in, want := range map[string]string{
		`null`: "not null", ` null `: "not null", `[]`: "not an array", `"x"`: "not a string",
		`0`: "not a number", `true`: "not a boolean", `false`: "not a boolean", `nul`: "not valid JSON", `}`: "not valid JSON",
	} {
		var b body
		if err := strictjson.UnmarshalObject([]byte(in), &b); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("UnmarshalObject(%q) = %v, want %q", in, err, want)
		}
	}
	var b body
	if err := strictjson.UnmarshalObject([]byte(` {"name":"a"}`), &b); err != nil || b.Name != "a" {
		t.Fatalf("an object: %v %+v", err, b)
	}
}

// FuzzUnmarshalObject: whatever UnmarshalObject accepts is a JSON object
// that Unmarshal accepts too.
func FuzzUnmarshalObject(f *testing.F) {
	for _, s := range []string{`null`, `{}`, `{"a":1}`, `[]`, ` {"a":null} `, `{"a":1}x`, "\ufeff{}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m map[string]any
		if strictjson.UnmarshalObject(b, &m) != nil {
			return
		}
		if m == nil {
			t.Fatalf("accepted %q as no object", b)
		}
		var m2 map[string]any
		if err := strictjson.Unmarshal(b, &m2); err != nil {
			t.Fatalf("accepted %q, which Unmarshal refuses: %v", b, err)
		}
	})
}
