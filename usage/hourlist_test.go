package usage

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// hoursModel is what an hourList replaced: a sorted list of hourCounts
// (nil: the file has no hours), changed as the FileStore changed it.
type hoursModel []hourCounts

func (m hoursModel) add(h uint32, c Counts) hoursModel {
	if m == nil {
		m = hoursModel{}
	}
	var e *hourCounts
	m, e = at(m, h, hourOf)
	e.c.Add(c)
	return m
}

func (m hoursModel) dropBefore(oldest uint32) (hoursModel, bool) {
	n := 0
	for n < len(m) && m[n].hour < oldest {
		n++
	}
	return drop(m, n), n > 0
}

func listOf(l *hourList) hoursModel {
	if !l.has() {
		return nil
	}
	out := hoursModel{}
	for h, c := range l.all() {
		out = append(out, hourCounts{h, c})
	}
	return out
}

// canonical is the list l's content would make if built at once: its
// bytes and where they live depend on its hours alone.
func canonical(t *testing.T, l *hourList) {
	t.Helper()
	if !l.has() {
		if l.b != nil || l.last != 0 || l.lastHour != 0 || l.in != [hourListInline]byte{} {
			t.Fatalf("a list without hours holds %+v", *l)
		}
		return
	}
	var fresh hourList
	fresh.set(listOf(l))
	if !reflect.DeepEqual(fresh.b, l.b) || fresh.in != l.in || fresh.last != l.last || fresh.lastHour != l.lastHour {
		t.Fatalf("list built step by step %+v, at once %+v", *l, fresh)
	}
	if (len(l.b) <= hourListInline) != (len(l.b) == 0 || &l.b[0] == &l.in[0]) {
		t.Fatalf("%d bytes, inline %v: want inline just when they fit", len(l.b), len(l.b) > 0 && &l.b[0] == &l.in[0])
	}
}

// FuzzHourList: any sequence of adds (in order, repeated, out of order,
// any counts), drops and sets leaves an hourList holding what the
// sorted list it replaced would, with canonical bytes.
func FuzzHourList(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 1, 7, 0, 2, 9, 1, 2})
	f.Add([]byte{0, 9, 255, 0, 3, 1, 0, 200, 2, 2, 0, 0, 50, 7, 1, 100})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var l hourList
		var m hoursModel
		base := uint32(2026112800)
		for len(ops) >= 3 {
			op, a, v := ops[0]%4, uint32(ops[1]), ops[2]
			ops = ops[3:]
			switch op {
			case 0, 1: // add: mostly small counts, some huge or negative
				var c Counts
				i := int(v) % numCounts
				*c.ptr(i) = int64(v) * int64(a+1)
				if v > 250 {
					*c.ptr(i) = -1 << 62
				}
				if op == 1 {
					*c.ptr((i + 3) % numCounts) = 1 << 40
				}
				l.add(base+a, c)
				m = m.add(base+a, c)
			case 2:
				dl := l.dropBefore(base + a)
				var dm bool
				m, dm = m.dropBefore(base + a)
				if dl != dm {
					t.Fatalf("dropBefore(%d) dropped: list %v, model %v", base+a, dl, dm)
				}
			case 3:
				if v%2 == 0 {
					l.clear()
					m = nil
				} else {
					// As a file read in: it has the hours, maybe none.
					hs := slices.Clone(listOf(&l))
					l.set(hs)
					m = append(hoursModel{}, hs...)
				}
			}
			if got := listOf(&l); !reflect.DeepEqual(got, m) {
				t.Fatalf("list %v, want %v", got, m)
			}
			canonical(t, &l)
		}
	})
}

// TestHourListBytes: an hour of admitted requests and their bytes takes
// a few bytes, the first hours of a key stay inside the list, and a
// week of hours stays near the figure the FileStore's comment gives.
func TestHourListBytes(t *testing.T) {
	var l hourList
	c := Counts{Admitted: 3, BytesIn: 900}
	l.add(2026112810, c)
	if n := len(l.b); n != 9 || &l.b[0] != &l.in[0] {
		t.Errorf("one hour: %d bytes, inline %v; want 9, inline", n, &l.b[0] == &l.in[0])
	}
	l.add(2026112811, c)
	if n := len(l.b); n != 14 || &l.b[0] != &l.in[0] {
		t.Errorf("two hours: %d bytes, inline %v; want 14, inline", n, &l.b[0] == &l.in[0])
	}
	var week hourList
	for h := range 7 * 24 {
		day, hour := h/24, h%24
		week.add(uint32(2026112000+day*100+hour), Counts{Admitted: 250, BytesIn: 250 * 4096})
	}
	if n := cap(week.b); n > 1400 {
		t.Errorf("a week of hours of 250 requests of 4 KiB: %d bytes, want at most 1400", n)
	}
	t.Logf("a week: %d bytes (cap %d)", len(week.b), cap(week.b))
	// The record format, for the note above: delta, mask, counts.
	rec := appendRecord(nil, 1, &c)
	want := binary.AppendUvarint(binary.AppendUvarint(nil, 1), 3)
	want = binary.AppendVarint(binary.AppendVarint(want, 3), 900)
	if fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Errorf("record %v, want %v", rec, want)
	}
}
