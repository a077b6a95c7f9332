// Package strictjson decodes JSON from untrusted callers so that every
// parser reads it the same way: it refuses what JSON parsers disagree on.
// The admin API and the portal decode through it.
//
// Unmarshal refuses, with an error that names the problem and where it is:
//   - invalid UTF-8 (other parsers replace it with U+FFFD, or keep it);
//   - duplicate object member names ({"name":"a","name":"b"}: some parsers
//     keep the first, some the last);
//   - member names that differ only in letter case, or in '_' and '-'
//     ({"name":"a","NAME":"b"}), in any object, maps included: parsers
//     that match names without regard to case read either;
//   - a member a struct does not have, and data after the value.
//
// Parsing is github.com/go-json-experiment/json's (the JSON v2 proposal),
// which refuses the first two by default; this package adds the third by
// walking that library's tokens.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Error is a body that Unmarshal refused. Its text is for the caller: it
// says what is wrong and, when known, where (a JSON Pointer).
type Error struct {
	msg string
}

func (e *Error) Error() string { return e.msg }

// Unmarshal decodes the one JSON value in b into v. A struct in v must
// name every member the body has (exactly, letter case included).
func Unmarshal(b []byte, v any) error {
	if err := checkNames(b); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v, json.RejectUnknownMembers(true)); err != nil {
		return explain(err)
	}
	return nil
}

// UnmarshalObject is Unmarshal for a body that must be one JSON object:
// any other top-level value (null, an array, a string, a number, true)
// is refused before decoding. A null would otherwise decode into a struct
// as nothing at all, and be read as a request that sets every field to
// its zero value.
func UnmarshalObject(b []byte, v any) error {
	k := jsontext.NewDecoder(bytes.NewReader(b)).PeekKind()
	if k == '{' {
		return Unmarshal(b, v)
	}
	// Not JSON at all is a syntax error, said as Unmarshal says it.
	var raw jsontext.Value
	if err := Unmarshal(b, &raw); err != nil {
		return err
	}
	var what string
	switch k {
	case 'n':
		what = "null"
	case '[':
		what = "an array"
	case '"':
		what = "a string"
	case '0':
		what = "a number"
	case 't', 'f':
		what = "a boolean"
	default:
		what = "that"
	}
	return &Error{"the top level must be a JSON object, not " + what}
}

// checkNames walks b's tokens and refuses member names of one object that
// fold to the same name. Duplicates and invalid UTF-8 are refused by the
// tokenizer itself.
func checkNames(b []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	// One set of folded names per open object; nil for an open array.
	var stack []map[string]string
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return explain(err)
		}
		switch tok.Kind() {
		case '{':
			stack = append(stack, map[string]string{})
			continue
		case '[':
			stack = append(stack, nil)
			continue
		case '}', ']':
			stack = stack[:len(stack)-1]
			continue
		}
		top := len(stack) - 1
		if top < 0 || stack[top] == nil || tok.Kind() != '"' {
			continue
		}
		// In an object, a string token at an even position is a name;
		// StackIndex says which.
		if _, n := dec.StackIndex(dec.StackDepth()); n%2 == 0 {
			continue // a value (n counts the names and values read so far)
		}
		name := tok.String()
		f := fold(name)
		if prev, ok := stack[top][f]; ok {
			return &Error{fmt.Sprintf("member names %s and %s at %s differ only in letter case or in '_' and '-'; send one",
				strconv.Quote(prev), strconv.Quote(name), pointerOrRoot(dec.StackPointer().Parent()))}
		}
		stack[top][f] = name
	}
}

func pointerOrRoot(p jsontext.Pointer) string {
	if p == "" {
		return "the top level"
	}
	return strconv.Quote(string(p))
}

// fold maps names that a case-insensitive parser would match to one
// string: Unicode simple case folding, '_' and '-' dropped (the v2
// proposal's own case-insensitive matching ignores them).
func fold(s string) string {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		switch {
		case r == '_' || r == '-':
			continue
		case r < utf8.RuneSelf:
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
		default:
			for {
				r2 := unicode.SimpleFold(r)
				if r2 <= r {
					r = r2
					break
				}
				r = r2
			}
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

// explain turns the library's errors into one sentence for the caller.
func explain(err error) error {
	var se *jsontext.SyntacticError
	var me *json.SemanticError
	switch {
	case errors.As(err, &se):
		where := ""
		if se.JSONPointer != "" {
			where = " at " + strconv.Quote(string(se.JSONPointer))
		}
		return &Error{fmt.Sprintf("not valid JSON%s (byte %d): %s", where, se.ByteOffset, trimPrefix(se.Err))}
	case errors.As(err, &me):
		where := "the top level"
		if me.JSONPointer != "" {
			where = strconv.Quote(string(me.JSONPointer))
		}
		if errors.Is(me.Err, json.ErrUnknownName) {
			return &Error{fmt.Sprintf("unknown member %s (names are matched exactly, letter case included)", strconv.Quote(string(me.JSONPointer.LastToken())))}
		}
		what := "a JSON " + me.JSONKind.String()
		if me.JSONKind == 0 {
			what = "this value"
		}
		msg := fmt.Sprintf("%s at %s cannot be read", what, where)
		if me.GoType != nil {
			msg += " as " + goTypeName(me.GoType.Kind().String())
		}
		if me.Err != nil {
			msg += ": " + trimPrefix(me.Err)
		}
		return &Error{msg}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{"not valid JSON: the body ends in the middle of a value"}
	}
	return &Error{"not valid JSON: " + trimPrefix(err)}
}

func goTypeName(k string) string {
	switch k {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "float64", "float32":
		return "a number"
	case "int", "int64", "int32", "uint", "uint64":
		return "a whole number"
	}
	return "a " + k
}

func trimPrefix(err error) string {
	s := err.Error()
	for _, p := range []string{"jsontext: ", "json: "} {
		if len(s) > len(p) && s[:len(p)] == p {
			s = s[len(p):]
		}
	}
	return s
}
