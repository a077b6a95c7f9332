package usage

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// The usage journal, KEYS_FILE.usage.json.journal: a line of JSON naming
// its generation, {"journal_gen":N}, then one line per key and flush:
//
//	{"id":"key_…","hour":2026112810,"counts":{"admitted":3,"bytes_in":900},"last_used_at":"…","day":20261128,"api_key":3,"bearer":0,"last_api_key_at":"…"}
//
// (counts as in the snapshot, zero ones left out; day and what follows
// only when the flush counted requests by method). A reader applies the
// lines in order over the snapshot whose journal_gen is the same N, as
// FileStore.Flush merged them. A last line without its newline is one
// being written, or cut by a crash: it is not read, and the owner starts
// a new journal rather than append after it.

func (s *FileStore) journalPath() string { return s.Path + ".journal" }

// journalHead is the first line of generation gen's journal.
func journalHead(gen uint64) []byte {
	return append(strconv.AppendUint([]byte(`{"journal_gen":`), gen, 10), "}\n"...)
}

// journalLine appends x's line, counted in hour h and day today.
func (j *jsonWriter) journalLine(x *Delta, h, today uint32) {
	j.raw(`{"id":`)
	j.str(x.ID)
	j.raw(`,"hour":`)
	j.b = strconv.AppendUint(j.b, uint64(h), 10)
	j.raw(`,"counts":`)
	j.counts(x.Counts)
	if !x.LastUsed.IsZero() {
		j.raw(`,"last_used_at":`)
		j.time(x.LastUsed)
	}
	if x.APIKey != 0 || x.Bearer != 0 {
		j.raw(`,"day":`)
		j.b = strconv.AppendUint(j.b, uint64(today), 10)
		j.raw(`,"api_key":`)
		j.int(x.APIKey)
		j.raw(`,"bearer":`)
		j.int(x.Bearer)
		if !x.LastAPIKey.IsZero() {
			j.raw(`,"last_api_key_at":`)
			j.time(x.LastAPIKey)
		}
	}
	j.raw("}\n")
}

// journalEntry is a journal line as read.
type journalEntry struct {
	ID         string    `json:"id"`
	Hour       uint32    `json:"hour"`
	Counts     Counts    `json:"counts"`
	LastUsed   time.Time `json:"last_used_at"`
	Day        uint32    `json:"day"`
	APIKey     int64     `json:"api_key"`
	Bearer     int64     `json:"bearer"`
	LastAPIKey time.Time `json:"last_api_key_at"`
}

// check refuses a line that no flush writes.
func (e *journalEntry) check() error {
	switch {
	case e.ID == "":
		return errors.New("no id")
	case e.Hour < 1e9:
		return fmt.Errorf("bad hour %d: want 10 digits", e.Hour)
	case e.Day != 0 && (e.Day < 1e7 || e.Day >= 1e8):
		return fmt.Errorf("bad day %d: want 8 digits", e.Day)
	case e.Day == 0 && (e.APIKey != 0 || e.Bearer != 0):
		return errors.New("counts by method without a day")
	}
	return nil
}

// journal is what a reader found in a journal file.
type journal struct {
	gen uint64
	// lines is the complete lines after the head; whole is whether the
	// file ends with a complete line (nothing is being written, or was
	// cut).
	lines []byte
	whole bool
}

// parseJournal reads a journal file's head. A file without a complete
// head is a journal of no generation (gen 0), whole only if empty.
func parseJournal(b []byte) (journal, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return journal{whole: len(b) == 0}, nil
	}
	var head struct {
		JournalGen *uint64 `json:"journal_gen"`
	}
	if err := json.Unmarshal(b[:i], &head); err != nil || head.JournalGen == nil || *head.JournalGen == 0 {
		return journal{}, fmt.Errorf("line 1: want {\"journal_gen\":N}, got %.40q", b[:i])
	}
	rest := b[i+1:]
	end := bytes.LastIndexByte(rest, '\n') + 1
	return journal{gen: *head.JournalGen, lines: rest[:end], whole: end == len(rest)}, nil
}

// replay merges the journal's lines of the ids want keeps (nil: all)
// into d. A line of another id is skipped unread when its id is plain
// (see lineID).
func (jn journal) replay(d *usageData, want ids) error {
	line := 1
	for b := jn.lines; len(b) > 0; {
		line++
		i := bytes.IndexByte(b, '\n')
		if id, ok := lineID(b[:i]); ok && !want.has(id) {
			b = b[i+1:]
			continue
		}
		var e journalEntry
		err := json.Unmarshal(b[:i], &e)
		if err == nil {
			err = e.check()
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if !want.has(e.ID) {
			b = b[i+1:]
			continue
		}
		d.add(&Delta{ID: e.ID, Counts: e.Counts, LastUsed: e.LastUsed, APIKey: e.APIKey, Bearer: e.Bearer, LastAPIKey: e.LastAPIKey}, e.Hour, e.Day)
		b = b[i+1:]
	}
	return nil
}

// lineID is the id of a journal line as journalLine writes it, when the
// id is plain: printable ASCII without a quote or backslash, which JSON
// reads as the same bytes. Other lines are read whole.
func lineID(line []byte) (string, bool) {
	const prefix = `{"id":"`
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return "", false
	}
	rest := line[len(prefix):]
	for i, c := range rest {
		switch {
		case c == '"':
			return string(rest[:i]), i > 0
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// ids is the set of key ids a reader asks for; nil is every id.
type ids map[string]struct{}

func idSet(list []string) ids {
	s := make(ids, len(list))
	for _, id := range list {
		s[id] = struct{}{}
	}
	return s
}

func (s ids) has(id string) bool {
	if s == nil {
		return true
	}
	_, ok := s[id]
	return ok
}

// files is what read found on disk.
type files struct {
	data *usageData
	// gen is the snapshot's generation, journalGen the journal's (0:
	// none); appendable is whether the journal counted (the same
	// generation) and ends with a complete line.
	gen, journalGen       uint64
	snapSize, journalSize int64
	appendable            bool
}

// readAttempts bounds how often read starts over when the owner
// rewrote the snapshot between its reads of the two files. The owner
// rewrites only once its journal has grown past the snapshot, which
// takes much longer than reading both, so a second read nearly always
// does; past the last, the snapshot is read alone (a snapshot restored
// from a backup, beside a newer journal, until the owner rewrites it).
const readAttempts = 10

// read reads the counts of the ids want keeps (nil: all) from the
// snapshot and the journal lines over it. A journal of a newer
// generation than the snapshot read means the owner rewrote both
// between the two reads: it reads again. One of an older generation is
// what a crash between the rewrite's two steps leaves: its lines are in
// the snapshot, and it is skipped.
//
// A reader of a few ids streams the snapshot and keeps only theirs: with
// a million keys, one key's counts take 0.4 s and 137 MB of allocations
// to read, where the whole document in maps took 8.3 s and 2.1 GB.
func (s *FileStore) read(want ids) (files, error) {
	for attempt := 1; ; attempt++ {
		f, err := s.readSnapshot(want)
		if err != nil {
			return files{}, err
		}
		b, err := os.ReadFile(s.journalPath())
		if errors.Is(err, os.ErrNotExist) {
			return f, nil
		}
		if err != nil {
			return files{}, err
		}
		jn, err := parseJournal(b)
		if err != nil {
			return files{}, fmt.Errorf("usage journal %s: %w", s.journalPath(), err)
		}
		f.journalGen, f.journalSize = jn.gen, int64(len(b))
		if jn.gen > f.gen && attempt < readAttempts {
			continue
		}
		if jn.gen != f.gen {
			return f, nil
		}
		if err := jn.replay(f.data, want); err != nil {
			return files{}, fmt.Errorf("usage journal %s: %w", s.journalPath(), err)
		}
		// A journal without its head (say, emptied by a power cut that
		// kept the rename and lost the data) is not appended to.
		f.appendable = jn.whole && jn.gen != 0
		return f, nil
	}
}

// readSnapshot reads the snapshot's counts of the ids want keeps (nil:
// all). None, or an empty file, is no counts, generation 0: a rewrite
// never leaves an empty snapshot, but a power cut may keep a rename and
// lose the data written before it (the files are not synced), and the
// store must go on counting.
func (s *FileStore) readSnapshot(want ids) (files, error) {
	var fd fileData
	var size int64
	if want == nil {
		b, err := os.ReadFile(s.Path)
		if errors.Is(err, os.ErrNotExist) || err == nil && len(b) == 0 {
			return files{data: newUsageData()}, nil
		}
		if err != nil {
			return files{}, err
		}
		if err := json.Unmarshal(b, &fd); err != nil {
			return files{}, fmt.Errorf("usage file %s: %w", s.Path, err)
		}
		size = int64(len(b))
	} else {
		f, err := os.Open(s.Path)
		if errors.Is(err, os.ErrNotExist) {
			return files{data: newUsageData()}, nil
		}
		if err != nil {
			return files{}, err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Size() == 0 {
			return files{data: newUsageData()}, nil
		}
		if fd, err = readFileData(bufio.NewReaderSize(f, 256<<10), want); err != nil {
			return files{}, fmt.Errorf("usage file %s: %w", s.Path, err)
		}
	}
	d, err := fd.compact()
	if err != nil {
		return files{}, fmt.Errorf("usage file %s: %w", s.Path, err)
	}
	return files{data: d, gen: fd.JournalGen, snapSize: size}, nil
}

// readFileData decodes a snapshot as json.Unmarshal would, but keeps in
// its maps only the ids want keeps: the others' values are read past by
// jsontext's tokenizer (github.com/go-json-experiment/json, the JSON v2
// proposal), about four times as fast as encoding/json's Decoder, and
// the values kept are decoded by json.Unmarshal. Its options read what
// json.Unmarshal reads: duplicate names, and invalid UTF-8 as U+FFFD.
func readFileData(r io.Reader, want ids) (fileData, error) {
	var fd fileData
	dec := jsontext.NewDecoder(r, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	t, err := dec.ReadToken()
	if err != nil {
		return fd, err
	}
	switch t.Kind() {
	case 'n': // null, which json.Unmarshal reads as nothing
		return fd, end(dec)
	case '{':
	default:
		return fd, fmt.Errorf("want an object, got %v", t.Kind())
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return fd, err
		}
		// Names match as json.Unmarshal matches them: without regard
		// to case.
		is := func(field string) bool { return strings.EqualFold(name.String(), field) }
		switch {
		case is("buckets"):
			err = readSection(dec, want, &fd.Buckets)
		case is("last_used_at"):
			err = readSection(dec, want, &fd.LastUsed)
		case is("methods"):
			err = readSection(dec, want, &fd.Methods)
		case is("last_api_key_at"):
			err = readSection(dec, want, &fd.LastAPIKey)
		case is("journal_gen"):
			err = decodeValue(dec, &fd.JournalGen)
		default:
			err = dec.SkipValue()
		}
		if err != nil {
			return fd, err
		}
	}
	if _, err := dec.ReadToken(); err != nil { // '}'
		return fd, err
	}
	return fd, end(dec)
}

// readSection decodes an object of id to value (or null) into m,
// keeping the ids want keeps.
func readSection[V any](dec *jsontext.Decoder, want ids, m *map[string]V) error {
	t, err := dec.ReadToken()
	if err != nil {
		return err
	}
	switch t.Kind() {
	case 'n':
		*m = nil
		return nil
	case '{':
	default:
		return fmt.Errorf("want an object, got %v", t.Kind())
	}
	if *m == nil {
		*m = map[string]V{}
	}
	for dec.PeekKind() != '}' {
		t, err := dec.ReadToken()
		if err != nil {
			return err
		}
		id := t.String()
		if !want.has(id) {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		var v V
		if err := decodeValue(dec, &v); err != nil {
			return err
		}
		(*m)[id] = v
	}
	_, err = dec.ReadToken() // '}'
	return err
}

// decodeValue reads the next value into v as json.Unmarshal does.
func decodeValue(dec *jsontext.Decoder, v any) error {
	raw, err := dec.ReadValue()
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// end checks that nothing follows the document.
func end(dec *jsontext.Decoder) error {
	if _, err := dec.ReadToken(); err != io.EOF {
		return errors.New("data after the document")
	}
	return nil
}

// open reads the files as the owner: it appends to the journal it read
// when it can, else its first flush rewrites the snapshot (s.mu held).
// Its next generation is past both files', so that no journal it starts
// shares a generation with one already on disk.
func (s *FileStore) open() error {
	f, err := s.read(nil)
	if err != nil {
		return err
	}
	s.data, s.gen, s.snapSize = f.data, max(f.gen, f.journalGen), f.snapSize
	if f.appendable {
		j, err := os.OpenFile(s.journalPath(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		s.journal, s.journalSize = j, f.journalSize
	}
	return nil
}
