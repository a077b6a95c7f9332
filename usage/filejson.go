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
}

// flush writes the buffer out once it holds 64 KiB (or always, at the end).
func (j *jsonWriter) flush(always bool) {
	if j.err != nil || (!always && len(j.b) < 64<<10) {
		return
	}
	_, j.err = j.w.Write(j.b)
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

func (j *jsonWriter) counts(c Counts) {
	j.raw("{")
	for i, name := range countNames {
		if i > 0 {
			j.raw(",")
		}
		j.str(name)
		j.raw(":")
		j.int(*c.ptr(i))
	}
	j.raw("}")
}

func (j *jsonWriter) methodCounts(c MethodCounts) {
	j.raw(`{"api_key":`)
	j.int(c.APIKey)
	j.raw(`,"bearer":`)
	j.int(c.Bearer)
	if !c.LastAPIKey.IsZero() {
		j.raw(`,"last_api_key_at":`)
		j.time(c.LastAPIKey)
	}
	j.raw("}")
}

// nested appends a map of id to map of period to value.
func nested[V any](j *jsonWriter, m map[string]map[string]V, value func(*jsonWriter, V)) {
	j.raw("{")
	first := true
	for id, periods := range m {
		if !first {
			j.raw(",")
		}
		first = false
		j.str(id)
		j.raw(":{")
		inner := true
		for p, v := range periods {
			if !inner {
				j.raw(",")
			}
			inner = false
			j.str(p)
			j.raw(":")
			value(j, v)
		}
		j.raw("}")
		j.flush(false)
	}
	j.raw("}")
}

func (j *jsonWriter) times(m map[string]time.Time) {
	j.raw("{")
	first := true
	for id, t := range m {
		if !first {
			j.raw(",")
		}
		first = false
		j.str(id)
		j.raw(":")
		j.time(t)
		j.flush(false)
	}
	j.raw("}")
}

// writeFileData writes d to w as the usage file's JSON (the document
// json.Marshal(d) would make, but for the order of map keys).
func writeFileData(w io.Writer, d *fileData) error {
	j := &jsonWriter{w: w, b: make([]byte, 0, 80<<10)}
	j.raw(`{"buckets":`)
	nested(j, d.Buckets, (*jsonWriter).counts)
	j.raw(`,"last_used_at":`)
	j.times(d.LastUsed)
	if len(d.Methods) > 0 {
		j.raw(`,"methods":`)
		nested(j, d.Methods, (*jsonWriter).methodCounts)
	}
	if len(d.LastAPIKey) > 0 {
		j.raw(`,"last_api_key_at":`)
		j.times(d.LastAPIKey)
	}
	j.raw("}")
	j.flush(true)
	return j.err
}
