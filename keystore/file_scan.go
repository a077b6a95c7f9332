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
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/bits"
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
//
// It reads lines in place (bufio.Reader.ReadSlice) and copies a record's
// lines into one reused buffer, so that a record costs the strings it
// keeps: its id and name (its own copies, so that nothing else of the
// file stays reachable) and, shared by every record that has them, its
// context, consumer, plan, product, env and status.
func scanDoc(r io.Reader, key func(Record) error) (fileDoc, error) {
	return scanDocReusing(r, nil, key)
}

// reuseFunc returns the id and name of a record already held for hash h,
// if any: a record with that hash and the same id and name gets these
// strings instead of copies (a reload of an unchanged record then
// allocates nothing).
type reuseFunc func(h Hash) (id, name string, ok bool)

// scanDocReusing is scanDoc, with reuse (when not nil) supplying the id
// and name strings of records already held.
func scanDocReusing(r io.Reader, reuse reuseFunc, key func(Record) error) (fileDoc, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var rest bytes.Buffer
	var cur recordLines
	var long []byte // a line longer than br's buffer
	in := interner{m: make(map[string]string)}
	inKeys, sawKeys, empty := false, false, true
	flush := func() error {
		if cur.len() == 0 {
			return nil
		}
		rec, err := scanRecord(&cur, &in, reuse)
		cur.reset()
		if err != nil {
			return err
		}
		if hasUpper(rec.Context) {
			rec.Context = strings.ToLower(rec.Context)
		}
		return key(rec)
	}
	for {
		line, err := readLine(br, &long)
		if err != nil && err != io.EOF {
			return fileDoc{}, fmt.Errorf("keystore file: %w", err)
		}
		if len(line) == 0 && err == io.EOF {
			break
		}
		line = bytes.TrimRight(line, "\r\n")
		trimmed := bytes.TrimLeft(line, " ")
		if len(trimmed) != 0 {
			empty = false
		}
		if inKeys {
			if !yamlPrintable(line) {
				return fileDoc{}, errNotCanonical // yaml.v3 refuses it, with its line
			}
			indent := len(line) - len(trimmed)
			switch {
			case len(trimmed) == 0 || trimmed[0] == '#':
				// A comment or a blank line: nothing.
			case bytes.HasPrefix(line, []byte("  - ")):
				if err := flush(); err != nil {
					return fileDoc{}, err
				}
				cur.add(line)
			case indent >= 4 && cur.len() > 0:
				cur.add(line)
			case indent == 0 && trimmed[0] == '-':
				return fileDoc{}, errNotCanonical
			case indent == 0:
				if err := flush(); err != nil {
					return fileDoc{}, err
				}
				inKeys = false
			default:
				return fileDoc{}, errNotCanonical
			}
		}
		if !inKeys {
			if string(bytes.TrimRight(line, " ")) == "keys:" {
				if sawKeys {
					return fileDoc{}, errNotCanonical
				}
				inKeys, sawKeys = true, true
			} else {
				rest.Write(line)
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

// readLine returns br's next line, with its newline; it is valid until
// the next call. A line longer than br's buffer is gathered in *long.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	*long = append((*long)[:0], line...)
	for err == bufio.ErrBufferFull {
		line, err = br.ReadSlice('\n')
		*long = append(*long, line...)
	}
	return *long, err
}

// recordLines holds the lines of one record, in one buffer reused from
// record to record.
type recordLines struct {
	buf  []byte
	ends []int
}

func (l *recordLines) add(line []byte) {
	l.buf = append(l.buf, line...)
	l.ends = append(l.ends, len(l.buf))
}

func (l *recordLines) len() int { return len(l.ends) }

func (l *recordLines) line(i int) []byte {
	start := 0
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.buf[start:l.ends[i]]
}

func (l *recordLines) reset() { l.buf, l.ends = l.buf[:0], l.ends[:0] }

// interner returns one string for equal byte strings, for the values
// that many records share. It holds at most maxInterned strings; past
// that a value gets a string of its own. A nil *interner returns a new
// string each time.
type interner struct{ m map[string]string }

const maxInterned = 1 << 16

func (in *interner) str(b []byte) string {
	if in == nil {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}

// scanRecord reads the lines of one record: "  - field: value" and then
// "    field: value" lines. A record with other lines, or values that are
// not plain, is decoded by yaml.v3. reuse may be nil.
func scanRecord(lines *recordLines, in *interner, reuse reuseFunc) (Record, error) {
	if name, _, ok := bytes.Cut(lines.line(0)[4:], []byte(":")); !ok || fieldBit(name) == 0 {
		return Record{}, errNotCanonical // not a mapping that starts with a field
	}
	// The values first, by field; then the record (so that the hash is
	// known when the id and name are set).
	var vals [numFields][]byte
	var seen uint16
	for i := range lines.len() {
		line := lines.line(i)
		var body []byte
		if i == 0 {
			body = line[4:]
		} else if bytes.HasPrefix(line, []byte("    ")) && len(line) > 4 && line[4] != ' ' {
			body = line[4:]
		} else {
			return yamlRecord(lines)
		}
		name, value, ok := bytes.Cut(body, []byte(": "))
		if ok && (bytes.HasPrefix(value, []byte("|")) || bytes.HasPrefix(value, []byte(">"))) {
			return Record{}, errNotCanonical // a block scalar: its blank lines count
		}
		if !ok || !plainValue(value) {
			return yamlRecord(lines)
		}
		bit := fieldBit(name)
		if bit == 0 || seen&bit != 0 {
			return yamlRecord(lines) // unknown or repeated: yaml.v3 says which
		}
		seen |= bit
		vals[bits.TrailingZeros16(bit)] = bytes.TrimRight(value, " ")
	}
	var r Record
	for f := range numFields {
		bit := uint16(1) << f
		if seen&bit == 0 || bit == fieldID || bit == fieldName {
			continue
		}
		if err := setField(&r, bit, vals[f], in); err != nil {
			return yamlRecord(lines)
		}
	}
	id, name := vals[bits.TrailingZeros16(fieldID)], vals[bits.TrailingZeros16(fieldName)]
	if reuse != nil && seen&fieldHash != 0 {
		if heldID, heldName, ok := reuse(r.Hash); ok {
			if string(id) == heldID {
				r.ID = heldID
			}
			if string(name) == heldName {
				r.Name = heldName
			}
		}
	}
	if r.ID == "" && seen&fieldID != 0 {
		_ = setField(&r, fieldID, id, in)
	}
	if r.Name == "" && seen&fieldName != 0 {
		_ = setField(&r, fieldName, name, in)
	}
	return r, nil
}

// The bits of scanRecord's set of fields seen.
const (
	fieldID uint16 = 1 << iota
	fieldName
	fieldHash
	fieldProduct
	fieldEnv
	fieldContext
	fieldCreatedAt
	fieldExpiresAt
	fieldStatus
	fieldRevokedAt
	fieldReplacedBy
	fieldConsumer
	fieldPlan
	numFields = iota
)

// fieldBit is the bit of a record field in scanRecord's set of fields
// seen; 0 for a name that is not a field.
func fieldBit(name []byte) uint16 {
	switch string(name) {
	case "id":
		return fieldID
	case "name":
		return fieldName
	case "hash":
		return fieldHash
	case "product":
		return fieldProduct
	case "env":
		return fieldEnv
	case "context":
		return fieldContext
	case "created_at":
		return fieldCreatedAt
	case "expires_at":
		return fieldExpiresAt
	case "status":
		return fieldStatus
	case "revoked_at":
		return fieldRevokedAt
	case "replaced_by":
		return fieldReplacedBy
	case "consumer":
		return fieldConsumer
	case "plan":
		return fieldPlan
	}
	return 0
}

func setField(r *Record, field uint16, v []byte, in *interner) error {
	var err error
	switch field {
	case fieldID:
		r.ID = string(v)
	case fieldName:
		r.Name = string(v)
	case fieldHash:
		r.Hash, err = parseHash(v)
	case fieldProduct:
		r.Product = Product(in.str(v))
	case fieldEnv:
		r.Env = Env(in.str(v))
	case fieldContext:
		r.Context = in.str(v)
	case fieldCreatedAt:
		r.CreatedAt, err = parseTime(v)
	case fieldExpiresAt:
		r.ExpiresAt, err = parseTime(v)
	case fieldStatus:
		r.Status = Status(in.str(v))
	case fieldRevokedAt:
		r.RevokedAt, err = parseTime(v)
	case fieldReplacedBy:
		r.ReplacedBy = string(v)
	case fieldConsumer:
		r.Consumer = in.str(v)
	case fieldPlan:
		r.Plan = in.str(v)
	}
	return err
}

// parseHash is ParseHash of v, without a copy of v.
func parseHash(v []byte) (Hash, error) {
	var h Hash
	if len(v) != len(hashPrefix)+hex.EncodedLen(len(h)) || string(v[:len(hashPrefix)]) != hashPrefix {
		return Hash{}, errors.New(`keystore: hash must be "sha256:" and 64 hex digits`)
	}
	if _, err := hex.Decode(h[:], v[len(hashPrefix):]); err != nil {
		return Hash{}, errors.New(`keystore: hash must be "sha256:" and 64 hex digits`)
	}
	return h, nil
}

// parseTime is time.Parse(time.RFC3339Nano, v). The form FileAdmin
// writes, 2006-01-02T15:04:05Z, is read without a copy of v.
func parseTime(v []byte) (time.Time, error) {
	if t, ok := parseTimeUTC(v); ok {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, string(v))
}

// parseTimeUTC reads 2006-01-02T15:04:05Z; ok is false for anything
// else, a date or time out of range included.
func parseTimeUTC(v []byte) (t time.Time, ok bool) {
	if len(v) != 20 || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' || v[19] != 'Z' {
		return time.Time{}, false
	}
	num := func(b []byte) int {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				ok = false
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	ok = true
	y, mo, d := num(v[0:4]), num(v[5:7]), num(v[8:10])
	h, mi, s := num(v[11:13]), num(v[14:16]), num(v[17:19])
	if !ok {
		return time.Time{}, false
	}
	t = time.Date(y, time.Month(mo), d, h, mi, s, 0, time.UTC)
	// time.Date normalizes what is out of range (February 30, 24:00);
	// time.Parse refuses it.
	if t.Year() != y || int(t.Month()) != mo || t.Day() != d || t.Hour() != h || t.Minute() != mi || t.Second() != s {
		return time.Time{}, false
	}
	return t, true
}

// plainValue reports whether v is a YAML plain scalar that yaml.v3
// decodes into a string as it is written: no quotes, no indicators, no
// comment, not null.
func plainValue(v []byte) bool {
	v = bytes.TrimRight(v, " ")
	if len(v) == 0 {
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
	switch string(v) {
	case "~", "null", "Null", "NULL":
		return false
	}
	return true
}

// yamlRecord decodes one record's lines with yaml.v3.
func yamlRecord(lines *recordLines) (Record, error) {
	var b strings.Builder
	for i := range lines.len() {
		if l := lines.line(i); len(l) >= 4 {
			b.Write(l[4:])
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
func yamlPrintable(line []byte) bool {
	for i := 0; i < len(line); i++ {
		if c := line[i]; c >= 0x80 {
			return utf8.Valid(line[i:]) && printableRunes(line[i:])
		} else if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func printableRunes(s []byte) bool {
	for _, r := range string(s) {
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
