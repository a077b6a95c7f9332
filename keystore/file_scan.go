package keystore

// A fast reader of the keystore file's keys, for files of a million
// keys: yaml.v3 needs about 25 s and 5 KB per key for those. It reads the
// layout that FileAdmin writes (MarshalFile), one line at a time:
//
//	keys:
//	  - id: key_…
//	    field: plain value
//
// A record whose lines are not all "field: plain value" (an override, a
// quoted or empty value) is decoded on its own by yaml.v3. Anything else
// it does not recognise (another indentation, a flow sequence, a block
// scalar) makes it give up, and the whole file is decoded by yaml.v3, as
// before. The rest of the file (version, consumers, admin tokens) is
// always decoded by yaml.v3, without the keys.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// errNotCanonical makes scanDoc's caller decode the file with yaml.v3.
var errNotCanonical = errors.New("keystore file: not in the layout the fast reader knows")

// scanDoc reads a keystore file from r, passing each record, in order
// and with its context in lower case, to key; it returns the rest of the
// file decoded (Keys nil), not yet validated. It returns errNotCanonical
// when the file is not in the layout it knows.
func scanDoc(r io.Reader, key func(Record) error) (fileDoc, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var rest bytes.Buffer
	var cur []string
	inKeys, sawKeys, empty := false, false, true
	flush := func() error {
		if cur == nil {
			return nil
		}
		rec, err := scanRecord(cur)
		cur = cur[:0]
		if err != nil {
			return err
		}
		if hasUpper(rec.Context) {
			rec.Context = strings.ToLower(rec.Context)
		}
		return key(rec)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil && err != io.EOF {
			return fileDoc{}, fmt.Errorf("keystore file: %w", err)
		}
		if line == "" && err == io.EOF {
			break
		}
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(line, " ")
		if trimmed != "" {
			empty = false
		}
		if inKeys {
			if !yamlPrintable(line) {
				return fileDoc{}, errNotCanonical // yaml.v3 refuses it, with its line
			}
			indent := len(line) - len(trimmed)
			switch {
			case trimmed == "" || trimmed[0] == '#':
				// A comment or a blank line: nothing.
			case strings.HasPrefix(line, "  - "):
				if err := flush(); err != nil {
					return fileDoc{}, err
				}
				if cur == nil {
					cur = make([]string, 0, 16)
				}
				cur = append(cur, line)
			case indent >= 4 && cur != nil:
				cur = append(cur, line)
			case indent == 0 && trimmed[0] == '-':
				return fileDoc{}, errNotCanonical
			case indent == 0:
				if err := flush(); err != nil {
					return fileDoc{}, err
				}
				cur = nil
				inKeys = false
			default:
				return fileDoc{}, errNotCanonical
			}
		}
		if !inKeys {
			if strings.TrimRight(line, " ") == "keys:" {
				if sawKeys {
					return fileDoc{}, errNotCanonical
				}
				inKeys, sawKeys = true, true
			} else {
				rest.WriteString(line)
				rest.WriteByte('\n')
			}
		}
		if err == io.EOF {
			break
		}
	}
	if err := flush(); err != nil {
		return fileDoc{}, err
	}
	if empty {
		return fileDoc{}, nil
	}
	dec := yaml.NewDecoder(&rest)
	dec.KnownFields(true)
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil {
		// yaml.v3 on the whole file gives the error its lines.
		return fileDoc{}, errNotCanonical
	}
	if doc.Keys != nil && sawKeys {
		return fileDoc{}, errNotCanonical // keys twice
	}
	if doc.Keys != nil {
		// keys: [...] in flow style: the yaml.v3 path handles it.
		return fileDoc{}, errNotCanonical
	}
	if doc.Version != FileVersion {
		return fileDoc{}, fmt.Errorf("keystore file: version: must be %d, got %d", FileVersion, doc.Version)
	}
	return doc, nil
}

// scanRecord reads the lines of one record: "  - field: value" and then
// "    field: value" lines. A record with other lines, or values that are
// not plain, is decoded by yaml.v3.
func scanRecord(lines []string) (Record, error) {
	if name, _, ok := strings.Cut(lines[0][4:], ":"); !ok || fieldBit(name) == 0 {
		return Record{}, errNotCanonical // not a mapping that starts with a field
	}
	var r Record
	var seen uint16
	for i, line := range lines {
		var body string
		if i == 0 {
			body = line[4:]
		} else if strings.HasPrefix(line, "    ") && len(line) > 4 && line[4] != ' ' {
			body = line[4:]
		} else {
			return yamlRecord(lines)
		}
		name, value, ok := strings.Cut(body, ": ")
		if ok && (strings.HasPrefix(value, "|") || strings.HasPrefix(value, ">")) {
			return Record{}, errNotCanonical // a block scalar: its blank lines count
		}
		if !ok || !plainValue(value) {
			return yamlRecord(lines)
		}
		value = strings.TrimRight(value, " ")
		bit := fieldBit(name)
		if bit == 0 || seen&bit != 0 {
			return yamlRecord(lines) // unknown or repeated: yaml.v3 says which
		}
		seen |= bit
		if err := setField(&r, name, value); err != nil {
			return yamlRecord(lines)
		}
	}
	return r, nil
}

// fieldBit is the bit of a record field in scanRecord's set of fields
// seen; 0 for a name that is not a field.
func fieldBit(name string) uint16 {
	switch name {
	case "id":
		return 1 << 0
	case "name":
		return 1 << 1
	case "hash":
		return 1 << 2
	case "product":
		return 1 << 3
	case "env":
		return 1 << 4
	case "context":
		return 1 << 5
	case "created_at":
		return 1 << 6
	case "expires_at":
		return 1 << 7
	case "status":
		return 1 << 8
	case "revoked_at":
		return 1 << 9
	case "replaced_by":
		return 1 << 10
	case "consumer":
		return 1 << 11
	case "plan":
		return 1 << 12
	}
	return 0
}

func setField(r *Record, name, v string) error {
	var err error
	switch name {
	case "id":
		r.ID = v
	case "name":
		r.Name = v
	case "hash":
		r.Hash, err = ParseHash(v)
	case "product":
		r.Product = Product(v)
	case "env":
		r.Env = Env(v)
	case "context":
		r.Context = v
	case "created_at":
		r.CreatedAt, err = time.Parse(time.RFC3339Nano, v)
	case "expires_at":
		r.ExpiresAt, err = time.Parse(time.RFC3339Nano, v)
	case "status":
		r.Status = Status(v)
	case "revoked_at":
		r.RevokedAt, err = time.Parse(time.RFC3339Nano, v)
	case "replaced_by":
		r.ReplacedBy = v
	case "consumer":
		r.Consumer = v
	case "plan":
		r.Plan = v
	}
	return err
}

// plainValue reports whether v is a YAML plain scalar that yaml.v3
// decodes into a string as it is written: no quotes, no indicators, no
// comment, not null.
func plainValue(v string) bool {
	v = strings.TrimRight(v, " ")
	if v == "" {
		return false
	}
	switch v[0] {
	case '[', ']', '{', '}', '>', '|', '*', '&', '!', '%', '@', '`', ',', '?', '-', ' ':
		return false
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\t', '"', '\'', '#':
			return false
		case ':':
			if i+1 < len(v) && v[i+1] == ' ' {
				return false
			}
		}
	}
	switch v {
	case "~", "null", "Null", "NULL":
		return false
	}
	return true
}

// yamlRecord decodes one record's lines with yaml.v3.
func yamlRecord(lines []string) (Record, error) {
	var b strings.Builder
	for i, l := range lines {
		if i == 0 {
			b.WriteString(l[4:])
		} else if len(l) >= 4 {
			b.WriteString(l[4:])
		}
		b.WriteByte('\n')
	}
	dec := yaml.NewDecoder(strings.NewReader(b.String()))
	dec.KnownFields(true)
	var r Record
	if err := dec.Decode(&r); err != nil {
		// yaml.v3 on the whole file gives the error its lines.
		return Record{}, errNotCanonical
	}
	return r, nil
}

// yamlPrintable reports whether line holds only characters YAML allows
// in a file (tab and the printable set of YAML 1.2, section 5.1).
func yamlPrintable(line string) bool {
	for i := 0; i < len(line); i++ {
		if c := line[i]; c >= 0x80 {
			return utf8.ValidString(line[i:]) && printableRunes(line[i:])
		} else if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func printableRunes(s string) bool {
	for _, r := range s {
		switch {
		case r == '\t', r == 0x85, 0x20 <= r && r <= 0x7e, 0xa0 <= r && r <= 0xd7ff,
			0xe000 <= r && r <= 0xfffd && r != 0xfeff, 0x10000 <= r && r <= 0x10ffff:
		default:
			return false
		}
	}
	return true
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}
