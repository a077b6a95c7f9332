package usage

import (
	"encoding/binary"
	"iter"
	"math/bits"
)

// hourList is one key's hours in a FileStore's memory, packed: for each
// hour in order, a record of
//
//   - the hour (YYYYMMDDHH) as a uvarint: the first record's whole, each
//     next one's as the difference from the one before;
//   - a uvarint bitmask of the counts that are not zero (bit 0
//     admitted, bit 1 bytes in, then the refusals in Counts' order);
//   - those counts, as varints.
//
// An hour of admitted requests and their bytes takes 5–8 bytes, where an
// hourCounts takes 88: a key used every hour of the week that Retention
// keeps holds 1.3 KB in all rather than 16.8 (BenchmarkFileStoreMemory).
// The first records live inside the list (in), so that a key used in an
// hour or two is one object for the collector, as before.
//
// The bytes are canonical (the same hours, the same bytes, in the same
// place: in when they fit, and in zeroed past them or when they do not),
// so that lists compare with reflect.DeepEqual in the tests. A
// list is never copied once used: b may point into its own in.
type hourList struct {
	// b is the records; nil: the file has no hours for the key, empty:
	// it has them, none.
	b []byte
	// last is the offset of the last record, lastHour its hour.
	last, lastHour uint32
	in             [hourListInline]byte
}

const hourListInline = 24

// numCounts is the number of values in Counts.
const numCounts = int(numOutcomes) + 1

// countOfBit is the index (for Counts.ptr) of the count of each bit of
// a record's mask.
var countOfBit = func() (m [numCounts]int) {
	m[0], m[1] = 0, int(numOutcomes) // admitted, bytes in
	for i := 2; i < numCounts; i++ {
		m[i] = i - 1
	}
	return m
}()

// appendRecord appends hour h's record (delta: h less the hour before it,
// or h for the first) to b.
func appendRecord(b []byte, delta uint32, c *Counts) []byte {
	b = binary.AppendUvarint(b, uint64(delta))
	var mask uint64
	for bit, i := range countOfBit {
		if *c.ptr(i) != 0 {
			mask |= 1 << bit
		}
	}
	b = binary.AppendUvarint(b, mask)
	for bit, i := range countOfBit {
		if mask&(1<<bit) != 0 {
			b = binary.AppendVarint(b, *c.ptr(i))
		}
	}
	return b
}

// readRecord reads the record at b[off:], returning its hour delta, its
// counts and the offset after it. The bytes are the list's own, made by
// appendRecord: a short or bad record is a bug, and panics.
func readRecord(b []byte, off int) (delta uint32, c Counts, next int) {
	delta, mask, off := recordHead(b, off)
	for bit, i := range countOfBit {
		if mask&(1<<bit) != 0 {
			v, n := binary.Varint(b[off:])
			if n <= 0 {
				panic("usage: bad hour record")
			}
			*c.ptr(i) = v
			off += n
		}
	}
	return delta, c, off
}

// recordHead reads the hour delta and the mask of the record at b[off:],
// and returns the offset of its counts.
func recordHead(b []byte, off int) (delta uint32, mask uint64, counts int) {
	d, n := binary.Uvarint(b[off:])
	if n <= 0 {
		panic("usage: bad hour record")
	}
	off += n
	mask, n = binary.Uvarint(b[off:])
	if n <= 0 {
		panic("usage: bad hour record")
	}
	return uint32(d), mask, off + n
}

// has reports whether the file has hours for the key (maybe none).
func (l *hourList) has() bool { return l.b != nil }

// empty reports whether the list holds no hour.
func (l *hourList) empty() bool { return len(l.b) == 0 }

// all yields the hours in order with their counts.
func (l *hourList) all() iter.Seq2[uint32, Counts] {
	return func(yield func(uint32, Counts) bool) {
		h := uint32(0)
		for off := 0; off < len(l.b); {
			d, c, next := readRecord(l.b, off)
			h += d
			if !yield(h, c) {
				return
			}
			off = next
		}
	}
}

// add adds c to hour h. Flushes come in time order, so h is nearly
// always the last hour or a new one after it, and only the last record
// is rewritten or one appended.
func (l *hourList) add(h uint32, c Counts) {
	var rec [2 * binary.MaxVarintLen64 * numCounts]byte
	switch {
	case len(l.b) == 0:
		l.replaceTail(0, appendRecord(rec[:0], h, &c))
		l.last, l.lastHour = 0, h
	case h > l.lastHour:
		from := len(l.b)
		l.replaceTail(from, appendRecord(rec[:0], h-l.lastHour, &c))
		l.last, l.lastHour = uint32(from), h
	case h == l.lastHour:
		d, old, _ := readRecord(l.b, int(l.last))
		old.Add(c)
		l.replaceTail(int(l.last), appendRecord(rec[:0], d, &old))
	default:
		// An hour before the last: read back out of order (a journal
		// line of an earlier hour, a clock set back). The record of h,
		// or the one h goes before, is rewritten in place; the bytes
		// after it are moved, not decoded.
		prev, off := uint32(0), 0
		for {
			d, next := skipRecord(l.b, off)
			if prev+d < h {
				prev, off = prev+d, next
				continue
			}
			// The record at off is of hour prev+d: h's, or the first
			// after it (maybe the last record, whose hour stays last).
			_, old, _ := readRecord(l.b, off)
			var mid []byte
			last := int(l.last)
			switch {
			case prev+d == h:
				old.Add(c)
				mid = appendRecord(rec[:0], d, &old)
				last += len(mid) - (next - off) // the last is after it
			case off == last:
				// h goes just before the last record, which follows it.
				mid = appendRecord(rec[:0], h-prev, &c)
				last = off + len(mid)
				mid = appendRecord(mid, prev+d-h, &old)
			default:
				mid = appendRecord(rec[:0], h-prev, &c)
				mid = appendRecord(mid, prev+d-h, &old)
				last += len(mid) - (next - off) // the last is after both
			}
			l.replaceTail(off, append(mid, l.b[next:]...))
			l.last = uint32(last)
			return
		}
	}
}

// skipRecord returns the hour delta of the record at b[off:] and the
// offset after it, without decoding its counts.
func skipRecord(b []byte, off int) (delta uint32, next int) {
	delta, mask, off := recordHead(b, off)
	for k := bits.OnesCount64(mask); k > 0; off++ {
		if b[off] < 0x80 {
			k--
		}
	}
	return delta, off
}

// set makes the list hold hs, which are sorted by hour without repeats
// (empty: the file has the hours, none).
func (l *hourList) set(hs []hourCounts) {
	var buf [256]byte
	b := buf[:0]
	prev := uint32(0)
	l.last, l.lastHour = 0, 0
	for i := range hs {
		l.last, l.lastHour = uint32(len(b)), hs[i].hour
		b = appendRecord(b, hs[i].hour-prev, &hs[i].c)
		prev = hs[i].hour
	}
	l.replaceTail(0, b)
}

// clear makes the list nil: the file has no hours for the key.
func (l *hourList) clear() {
	l.b, l.last, l.lastHour = nil, 0, 0
	l.in = [hourListInline]byte{}
}

// dropBefore drops the hours before oldest, and reports whether it
// dropped any.
func (l *hourList) dropBefore(oldest uint32) bool {
	if len(l.b) == 0 {
		return false
	}
	var hs []hourCounts
	dropped := false
	for h, c := range l.all() {
		if h < oldest {
			dropped = true
			continue
		}
		if !dropped {
			return false // sorted: none to drop
		}
		hs = append(hs, hourCounts{h, c})
	}
	if len(hs) == 0 {
		l.clear() // as a file without the key's hours
		return true
	}
	l.set(hs)
	return true
}

// replaceTail makes b[from:] tail, keeping the bytes canonical: in in
// when they fit there (in zeroed past them), else in a heap array of
// their own that grows by an eighth, not double (in zeroed).
func (l *hourList) replaceTail(from int, tail []byte) {
	n := from + len(tail)
	inline := len(l.b) <= len(l.in) // the invariant: b is in iff it fits
	switch {
	case n <= len(l.in):
		if !inline {
			copy(l.in[:from], l.b[:from])
		}
		copy(l.in[from:n], tail)
		clear(l.in[n:])
		l.b = l.in[:n:n]
	case inline || n > cap(l.b):
		b := make([]byte, n, n+max(16, n/8))
		copy(b, l.b[:from])
		copy(b[from:], tail)
		l.b = b
		l.in = [hourListInline]byte{}
	default:
		l.b = append(l.b[:from], tail...)
	}
}
