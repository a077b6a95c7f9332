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

// journal is a journal file being read: its generation, from its head,
// then its lines one at a time, never the file whole.
type journal struct {
	gen uint64
	r   *bufio.Reader
	// size is the bytes read so far; whole, once replay has read to the
	// end, whether the file ends with a complete line (nothing is being
	// written, nor was cut); finished, that the end was reached. line
	// holds a line longer than r's buffer.
	size     int64
	whole    bool
	line     []byte
	finished bool
}

// next returns the next complete line, without its newline; ok is false
// at the end, where whole tells whether a partial line was left.
func (jn *journal) next() (line []byte, ok bool, err error) {
	if jn.finished {
		return nil, false, nil
	}
	b, err := jn.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		jn.line = append(jn.line[:0], b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			b, err = jn.r.ReadSlice('\n')
			jn.line = append(jn.line, b...)
		}
		b = jn.line
	}
	jn.size += int64(len(b))
	switch {
	case err == io.EOF:
		jn.whole, jn.finished = len(b) == 0, true
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return b[:len(b)-1], true, nil
}

// parseJournal reads a journal file's head from r. A file without a
// complete head is a journal of no generation (gen 0), whole only if
// empty.
func parseJournal(r *bufio.Reader) (*journal, error) {
	jn := &journal{r: r}
	b, ok, err := jn.next()
	if err != nil || !ok {
		return jn, err
	}
	var head struct {
		JournalGen *uint64 `json:"journal_gen"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.JournalGen == nil || *head.JournalGen == 0 {
		return nil, fmt.Errorf("line 1: want {\"journal_gen\":N}, got %.40q", b)
	}
	jn.gen = *head.JournalGen
	return jn, nil
}

// replay merges the journal's lines of the ids want keeps (nil: all)
// into d, to the end of the file. A line of another id is skipped
// unread when its id is plain (see lineID).
func (jn *journal) replay(d *usageData, want ids) error {
	for line := 2; ; line++ {
		b, ok, err := jn.next()
		if err != nil || !ok {
			return err
		}
		if id, plain := lineID(b); plain && !want.has(id) {
			continue
		}
		var e journalEntry
		err = json.Unmarshal(b, &e)
		if err == nil {
			err = e.check()
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if want.has(e.ID) {
			d.add(&Delta{ID: e.ID, Counts: e.Counts, LastUsed: e.LastUsed, APIKey: e.APIKey, Bearer: e.Bearer, LastAPIKey: e.LastAPIKey}, e.Hour, e.Day)
		}
	}
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
// does; past the last (36 ms of pauses later), the snapshot is read
// alone (a snapshot restored from a backup, beside a newer journal,
// until the owner rewrites it).
const readAttempts = 10

// read reads the counts of the ids want keeps (nil: all) from the
// snapshot and the journal lines over it. A journal of a newer
// generation than the snapshot read means the owner rewrote both
// between the two reads: it reads again. One of an older generation is
// what a crash between the rewrite's two steps leaves: its lines are in
// the snapshot, and it is skipped.
//
// Both files are streamed, never held whole, and a reader of a few ids
// keeps only theirs: with a million keys, one key's counts take 0.34 s
// and 67 MB of allocations to read, where the whole document in maps
// took 8.3 s and 2.1 GB.
func (s *FileStore) read(want ids) (files, error) {
	for attempt := 1; ; attempt++ {
		f, err := s.readSnapshot(want)
		if err != nil {
			return files{}, err
		}
		f, retry, err := s.readJournal(f, want)
		if err != nil {
			return files{}, err
		}
		if retry && attempt < readAttempts {
			// A rewrite under way renames the snapshot first: read
			// again at once, then with a pause that grows, should the
			// owner be rewriting again and again.
			time.Sleep(time.Duration(attempt-1) * time.Millisecond)
			continue
		}
		return f, nil
	}
}

// readJournal applies the journal's lines over the snapshot read in f,
// if the journal is of its generation; retry says the journal is newer
// than the snapshot (the owner rewrote both between the two reads).
func (s *FileStore) readJournal(f files, want ids) (_ files, retry bool, _ error) {
	jf, err := os.Open(s.journalPath())
	if errors.Is(err, os.ErrNotExist) {
		return f, false, nil
	}
	if err != nil {
		return files{}, false, err
	}
	defer jf.Close()
	jn, err := parseJournal(bufio.NewReaderSize(jf, 64<<10))
	if err != nil {
		return files{}, false, fmt.Errorf("usage journal %s: %w", s.journalPath(), err)
	}
	f.journalGen = jn.gen
	if jn.gen != f.gen {
		return f, jn.gen > f.gen, nil
	}
	if err := jn.replay(f.data, want); err != nil {
		return files{}, false, fmt.Errorf("usage journal %s: %w", s.journalPath(), err)
	}
	f.journalSize = jn.size
	f.appendable = jn.whole && jn.gen != 0
	return f, false, nil
}

// readSnapshot reads the snapshot's counts of the ids want keeps (nil:
// all). None, or an empty file, is no counts, generation 0: a rewrite
// never leaves an empty snapshot (it syncs the file before its rename),
// but a file system that loses synced data (or files written by an
// older keygate, which did not sync) may, and the store must go on
// counting.
func (s *FileStore) readSnapshot(want ids) (files, error) {
	f, err := os.Open(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return files{data: newUsageData()}, nil
	}
	if err != nil {
		return files{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return files{}, err
	}
	if st.Size() == 0 {
		return files{data: newUsageData()}, nil
	}
	d, gen, err := readFileData(bufio.NewReaderSize(f, 256<<10), want)
	if err != nil {
		return files{}, fmt.Errorf("usage file %s: %w", s.Path, err)
	}
	return files{data: d, gen: gen, snapSize: st.Size()}, nil
}

// readFileData reads a snapshot into its form in memory, one key's value
// at a time, as json.Unmarshal into a fileData and its compaction would
// (the test's fileData.compact), keeping only the ids want keeps (nil:
// all), and returns its journal generation. The document is never held
// whole: a million keys' snapshot and journal read into maps first took
// 9.2 s, 2.1 GB of allocations and 1.8 GB of RSS at a gateway's first
// flush; streamed, 5.2 s, 1.9 GB and 0.44 GB.
//
// Other keys' values are read past by jsontext's tokenizer
// (github.com/go-json-experiment/json, the JSON v2 proposal), about four
// times as fast as encoding/json's Decoder; each value kept is decoded
// by json.Unmarshal. The tokenizer's options read what json.Unmarshal
// reads: duplicate names, and invalid UTF-8 as U+FFFD.
func readFileData(r io.Reader, want ids) (*usageData, uint64, error) {
	d := newUsageData()
	var gen uint64
	var bad badValues
	dec := jsontext.NewDecoder(r, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	t, err := dec.ReadToken()
	if err != nil {
		return nil, 0, err
	}
	switch t.Kind() {
	case 'n': // null, which json.Unmarshal reads as nothing
		return d, 0, end(dec)
	case '{':
	default:
		return nil, 0, fmt.Errorf("want an object, got %v", t.Kind())
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, 0, err
		}
		// Names match as json.Unmarshal matches them: without regard
		// to case. A section that is null drops what came before it, as
		// json.Unmarshal's nil map would.
		is := func(field string) bool { return strings.EqualFold(name.String(), field) }
		switch {
		case is("buckets"):
			err = readSection(dec, d, want, bad.of(0), d.setHours, func(k *keyUsage) { k.hours.clear() })
		case is("last_used_at"):
			err = readSection(dec, d, want, bad.of(1), d.setLastUsed, func(k *keyUsage) { k.lastUsed = time.Time{} })
		case is("methods"):
			err = readSection(dec, d, want, bad.of(2), d.setDays, func(k *keyUsage) { k.days = nil })
		case is("last_api_key_at"):
			err = readSection(dec, d, want, bad.of(3), d.setLastAPIKey, func(k *keyUsage) { k.lastAPIKey = time.Time{} })
		case is("journal_gen"):
			err = decodeValue(dec, &gen)
		default:
			err = dec.SkipValue()
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if _, err := dec.ReadToken(); err != nil { // '}'
		return nil, 0, err
	}
	if err := bad.first(); err != nil {
		return nil, 0, err
	}
	return d, gen, end(dec)
}

// badValues are, per section, the ids whose last value was refused (a
// bucket named other than by a period). json.Unmarshal keeps an id's
// last value in a section, and a null section drops them all, so a
// value refused and then replaced is no error, as it is none there.
type badValues [4]map[string]error

func (b *badValues) of(section int) *map[string]error { return &b[section] }

// first is the refusal of the smallest id left, if any.
func (b *badValues) first() error {
	var id string
	var err error
	for _, m := range b {
		for k, e := range m {
			if err == nil || k < id {
				id, err = k, e
			}
		}
	}
	return err
}

// readSection reads an object of id to value, or null, calling set for
// each id want keeps and noting in bad the ids whose value set refused;
// null calls clear on every key of d and forgets the refusals.
func readSection[V any](dec *jsontext.Decoder, d *usageData, want ids, bad *map[string]error, set func(string, V) error, clear func(*keyUsage)) error {
	t, err := dec.ReadToken()
	if err != nil {
		return err
	}
	switch t.Kind() {
	case 'n':
		for _, k := range d.keys {
			clear(k)
		}
		*bad = nil
		return nil
	case '{':
	default:
		return fmt.Errorf("want an object, got %v", t.Kind())
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
		if err := set(id, v); err != nil {
			if *bad == nil {
				*bad = map[string]error{}
			}
			(*bad)[id] = err
		} else {
			delete(*bad, id)
		}
	}
	_, err = dec.ReadToken() // '}'
	return err
}

// decodeValue reads the next value into v as json.Unmarshal does. A
// time is given to its UnmarshalJSON, as json.Unmarshal gives it (null
// included), without the reflection: a million keys' snapshot holds two
// million of them.
func decodeValue(dec *jsontext.Decoder, v any) error {
	raw, err := dec.ReadValue()
	if err != nil {
		return err
	}
	if t, ok := v.(*time.Time); ok {
		return t.UnmarshalJSON(raw)
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
		j, err := s.fs().OpenAppend(s.journalPath())
		if err != nil {
			return err
		}
		s.journal, s.journalSize = j, f.journalSize
	}
	return nil
}
