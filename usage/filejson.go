package usage

import (
	"encoding/json"
	"io"
	"strconv"
	"time"
)

// The usage file's JSON, written without reflection. encoding/json took
// about a second and a half of CPU and 150 MB of garbage for a file of
// 100k keys (it sorts every map's keys and reflects on every value); this
// writer streams the same document (the same names, map keys in no
// order, which json.Unmarshal does not mind) in 64 KiB chunks.

// countNames are the JSON names of Counts' fields, in the order of
// Counts.ptr.
var countNames = [...]string{"admitted", "refused_rate", "refused_quota", "refused_context", "refused_product",
	"refused_concurrency", "forbidden_operation", "forbidden_plan", "forbidden_address", "bytes_in"}

type jsonWriter struct {
	w   io.Writer
	b   []byte
	err error
	n   int64 // bytes written to w
}

// flush writes the buffer out once it holds 64 KiB (or always, at the end).
func (j *jsonWriter) flush(always bool) {
	if j.err != nil || (!always && len(j.b) < 64<<10) {
		return
	}
	var n int
	n, j.err = j.w.Write(j.b)
	j.n += int64(n)
	j.b = j.b[:0]
}

func (j *jsonWriter) raw(s string) { j.b = append(j.b, s...) }

// str appends s as a JSON string.
func (j *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always marshals
			j.b = append(j.b, q...)
			return
		}
	}
	j.b = append(j.b, '"')
	j.b = append(j.b, s...)
	j.b = append(j.b, '"')
}

func (j *jsonWriter) time(t time.Time) {
	j.b = append(j.b, '"')
	j.b = t.AppendFormat(j.b, time.RFC3339Nano)
	j.b = append(j.b, '"')
}

func (j *jsonWriter) int(n int64) { j.b = strconv.AppendInt(j.b, n, 10) }

// counts appends c's non-zero fields: an absent field reads back as
// zero, and most hours of most keys count one or two outcomes of ten.
func (j *jsonWriter) counts(c Counts) {
	j.raw("{")
	first := true
	for i, name := range countNames {
		v := *c.ptr(i)
		if v == 0 {
			continue
		}
		j.next(&first)
		j.str(name)
		j.raw(":")
		j.int(v)
	}
	j.raw("}")
}

// next appends the comma before a member of an object or an array,
// unless it is the first.
func (j *jsonWriter) next(first *bool) {
	if !*first {
		j.raw(",")
	}
	*first = false
}

// period appends a bucket's name: its number, in quotes.
func (j *jsonWriter) period(p uint32) {
	j.b = append(j.b, '"')
	j.b = strconv.AppendUint(j.b, uint64(p), 10)
	j.b = append(j.b, '"')
}

// section appends a map of id to map of period to value, with a member
// for each key that has the list (has), whose members members appends.
func section(j *jsonWriter, d *usageData, has func(*keyUsage) bool, members func(*jsonWriter, *keyUsage)) {
	j.raw("{")
	first := true
	for id, k := range d.keys {
		if !has(k) {
			continue
		}
		j.next(&first)
		j.str(id)
		j.raw(":{")
		members(j, k)
		j.raw("}")
		j.flush(false)
	}
	j.raw("}")
}

// times appends a map of id to time, with a member for each key whose
// time is set.
func (j *jsonWriter) times(d *usageData, at func(*keyUsage) time.Time) {
	j.raw("{")
	first := true
	for id, k := range d.keys {
		t := at(k)
		if t.IsZero() {
			continue
		}
		j.next(&first)
		j.str(id)
		j.raw(":")
		j.time(t)
		j.flush(false)
	}
	j.raw("}")
}

// writeFileData writes d to w as the usage file's JSON, the snapshot of
// journal generation gen: the document json.Marshal would make of the
// fileData that compacts to d, but for the order of map keys.
func writeFileData(w io.Writer, d *usageData, gen uint64) error {
	j := &jsonWriter{w: w, b: make([]byte, 0, 80<<10)}
	j.raw(`{"buckets":`)
	section(j, d, func(k *keyUsage) bool { return k.hours.has() }, func(j *jsonWriter, k *keyUsage) {
		first := true
		for h, c := range k.hours.all() {
			j.next(&first)
			j.period(h)
			j.raw(":")
			j.counts(c)
		}
	})
	j.raw(`,"last_used_at":`)
	j.times(d, func(k *keyUsage) time.Time { return k.lastUsed })
	methods, lastAPIKey := false, false
	for _, k := range d.keys {
		methods = methods || k.days != nil
		lastAPIKey = lastAPIKey || !k.lastAPIKey.IsZero()
	}
	if methods {
		j.raw(`,"methods":`)
		section(j, d, func(k *keyUsage) bool { return k.days != nil }, func(j *jsonWriter, k *keyUsage) {
			for i, m := range k.days {
				if i > 0 {
					j.raw(",")
				}
				j.period(m.day)
				j.raw(`:{"api_key":`)
				j.int(m.apiKey)
				j.raw(`,"bearer":`)
				j.int(m.bearer)
				j.raw("}")
			}
		})
	}
	if lastAPIKey {
		j.raw(`,"last_api_key_at":`)
		j.times(d, func(k *keyUsage) time.Time { return k.lastAPIKey })
	}
	if gen != 0 {
		j.raw(`,"journal_gen":`)
		j.b = strconv.AppendUint(j.b, gen, 10)
	}
	j.raw("}")
	j.flush(true)
	return j.err
}
