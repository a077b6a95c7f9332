package formctx

import "bytes"

// state is where the parser is in the multipart grammar.
type state uint8

const (
	stPreamble  state = iota // before the first delimiter
	stHeaders                // after a delimiter line: a part's header block
	stData                   // a part's body
	stCloseTail              // after "--boundary--": CRLF or the end
	stEpilogue               // after the closing delimiter line
	stDone                   // the body ended and checked out
)

var crlfcrlf = []byte("\r\n\r\n")

// parser is an incremental multipart/form-data parser over a window of the
// body. Bytes before pos are parsed; the two bytes before pos stay in the
// window, since they say whether a boundary starts a line. It does no I/O:
// Body fills the window and calls parse.
type parser struct {
	dash       []byte       // "--" + boundary
	anchor     []byte       // the tail of dash that findIndex searches for
	tail       []byte       // the tail of dash that bndm searches for
	masks      *[256]uint64 // bndm's bit masks, in the pooled buffers
	win        []byte
	pos, end   int   // win[pos:end] is read but not parsed
	base       int64 // offset of win[0] in the body
	st         state
	rare       uint8 // index in dash of the byte find looks for first
	masksReady bool  // masks are filled for tail

	hscan    int    // how far past pos headers has looked for the blank line
	isCtx    bool   // the current part is a context part
	partData int64  // body bytes of the current part parsed so far
	val      []byte // the context part's body so far
	maxField int

	ctx       string // the first context part's value
	justFound bool   // ctx was set during this parse call

	dashBuf [2 + maxBoundaryLen]byte // dash's memory
}

func (p *parser) init(boundary string, win, val []byte, maxField int, masks *[256]uint64) {
	// In dashBuf: no allocation for a boundary formBoundary accepts.
	p.dash = append(append(p.dashBuf[:0], "--"...), boundary...)
	p.anchor = p.dash[len(p.dash)-min(len(p.dash), anchorLen):]
	p.tail = p.dash[len(p.dash)-min(len(p.dash), 64):]
	p.rare = uint8(rareByte(p.dash))
	p.win, p.val, p.maxField, p.masks = win, val, maxField, masks
	p.masksReady = false
}

// buildMasks fills bndm's masks for tail, the first time bndm needs them:
// most bodies never get that far. Bit len(tail)-1-i of masks[c] is set
// where tail[i] is c.
func (p *parser) buildMasks() {
	clear(p.masks[:])
	m := len(p.tail)
	for i, c := range p.tail {
		p.masks[c] |= 1 << (m - 1 - i)
	}
	p.masksReady = true
}

// anchorLen is how much of the end of "--boundary" findIndex searches for.
// Boundaries start alike (curl's with 24 dashes) but end in their random
// part, so searching for the end finds few false candidates.
const anchorLen = 16

// find returns the position of the first "--boundary" in win[from:end], or
// -1. It first looks for the boundary's rarest-looking byte with
// bytes.IndexByte (vectorised: the fastest scan where that byte is rare
// in the data, as a capital letter is in text) and checks each hit; where
// those hits come often (any byte does, every 256 bytes or so, in
// compressed or binary data), it goes on with bndm, which reads about two
// bytes of every window of len(dash) in such data, and from there to
// findIndex where the data makes bndm read much.
func (p *parser) find(from int) int { return p.findIn(p.win[:p.end], from) }

// findIn is find over s.
func (p *parser) findIn(s []byte, from int) int {
	m := len(p.dash)
	r, rb := int(p.rare), p.dash[p.rare]
	stop := len(s) - (m - 1 - r) // dash[r] of a whole match stands before stop
	hits := 0
	for i := from + r; i < stop; i++ {
		j := bytes.IndexByte(s[i:stop], rb)
		if j < 0 {
			return -1
		}
		i += j
		if start := i - r; bytes.Equal(s[start:start+m], p.dash) {
			return start
		}
		// Every match starting at or before i-r is ruled out.
		if hits++; hits >= 8 && (i-from)/hits < rareGap {
			return p.bndm(s, i-r+1)
		}
	}
	return -1
}

// rareGap is the mean distance between hits of the rare byte below which
// find leaves bytes.IndexByte for bndm: a hit costs a call and a
// comparison, and bndm covers a window of len(dash) with a read or two.
const rareGap = 1024

// bndm is find by Backward Nondeterministic DAWG Matching (Navarro and
// Raffinot) for tail, the last 64 bytes of dash at most, checking the rest
// of dash before a match of tail. It reads each window of len(tail) from
// its end for as long as what it read occurs in tail, and then moves the
// window past it: in data that shares few pairs of bytes with the
// boundary, one or two reads a window. Where the data makes it read more
// than a byte for every two it moves, it switches to findIndex.
func (p *parser) bndm(s []byte, from int) int {
	if !p.masksReady {
		p.buildMasks()
	}
	pat := p.tail
	m := len(pat)
	off := len(p.dash) - m
	top := uint64(1) << (m - 1)
	masks := p.masks
	reads, moved := 0, 0 // of the windows that needed more than one read
	for pos, end := from+off, len(s)-m; pos <= end; {
		w := s[pos : pos+m]
		d := masks[w[m-1]]
		if d == 0 { // the byte at the window's end is not in tail
			pos += m
			continue
		}
		j, last := m, m
		for d != 0 {
			j--
			if d&top != 0 {
				if j > 0 {
					last = j
				} else if bytes.Equal(s[pos-off:pos], p.dash[:off]) {
					return pos - off
				} else {
					break
				}
			}
			d = d << 1 & masks[w[j-1]]
		}
		pos += last
		reads += m - j + 1
		moved += last
		if reads >= 256 && moved < 2*reads {
			return p.findIndex(s, pos-off) // every start before pos-off is ruled out
		}
	}
	return -1
}

// rareByte picks the byte of dash that find looks for first: one that is
// likely rare in file data. Boundaries start with dashes (common in text)
// and end in a random part; of that part, an upper-case letter is rarer
// in text than a digit, and a digit rarer than a lower-case letter; in
// binary data every byte is about as rare as another. The last of the
// rarest kind is taken.
func rareByte(dash []byte) int {
	rank := func(c byte) int {
		switch {
		case c >= 'A' && c <= 'Z':
			return 0
		case c >= '0' && c <= '9':
			return 2
		case c >= 'a' && c <= 'z', c == '-', c == ' ':
			return 3
		}
		return 1
	}
	best := len(dash) - 1
	for i := len(dash) - 1; i >= 0; i-- {
		if rank(dash[i]) < rank(dash[best]) {
			best = i
		}
	}
	return best
}

// dashBefore reports whether a whole "--boundary" starts in the unparsed
// window, win[pos:end] (shorter than the boundary), followed by next, or
// within next.
func (p *parser) dashBefore(next []byte) bool {
	var buf [2 * (maxBoundaryLen + 2)]byte
	j := append(buf[:0], p.win[p.pos:p.end]...)
	j = append(j, next[:min(len(next), len(p.dash)-1)]...)
	return bytes.Contains(j, p.dash) || p.findIn(next, 0) >= 0
}

// findIndex is find by bytes.Index on the anchor, over s.
func (p *parser) findIndex(s []byte, from int) int {
	off := len(p.dash) - len(p.anchor)
	for k := from + off; k <= len(s); {
		i := bytes.Index(s[k:], p.anchor)
		if i < 0 {
			return -1
		}
		t := k + i
		if j := t - off; off == 0 || bytes.Equal(s[j:t], p.dash[:off]) {
			return j
		}
		k = t + 1
	}
	return -1
}

// compact drops win[:keep], which is parsed and handed out.
func (p *parser) compact(keep int) {
	p.end = copy(p.win, p.win[keep:p.end])
	p.pos -= keep
	p.base += int64(keep)
}

// parse advances over the unparsed bytes. It returns nil when it needs more
// input, has reached stDone (only once eof is set: no more input), or has
// just found the first context part; otherwise the *Error that refuses the
// body. With eof set, it never asks for more input.
func (p *parser) parse(eof bool) error {
	for p.st != stDone {
		var more bool
		var err error
		switch p.st {
		case stPreamble:
			more, err = p.preamble()
		case stHeaders:
			more, err = p.headers()
		case stData:
			more, err = p.data()
		case stCloseTail:
			more, err = p.closeTail(eof)
		case stEpilogue:
			more, err = p.epilogue(eof)
		}
		if err != nil {
			return err
		}
		if p.justFound {
			p.justFound = false
			return nil
		}
		if more {
			if eof {
				return ErrMalformed // truncated
			}
			return nil
		}
	}
	return nil
}

// crlfBefore reports whether win[j] is preceded by CRLF.
func (p *parser) crlfBefore(j int) bool {
	return j >= 2 && p.win[j-2] == '\r' && p.win[j-1] == '\n'
}

// delimiterEnd classifies the two bytes after a boundary at win[j]: next
// is stHeaders for CRLF, stCloseTail for "--"; more if they are not read
// yet.
func (p *parser) delimiterEnd(j int) (next state, more bool, err error) {
	k := j + len(p.dash)
	if p.end-k < 2 {
		return 0, true, nil
	}
	switch {
	case p.win[k] == '\r' && p.win[k+1] == '\n':
		return stHeaders, false, nil
	case p.win[k] == '-' && p.win[k+1] == '-':
		return stCloseTail, false, nil
	}
	return 0, false, ErrDelimiter
}

// preamble finds the first delimiter: the first occurrence of the boundary
// in the body, at its start or after CRLF, within maxHeadBytes.
func (p *parser) preamble() (bool, error) {
	i := p.find(p.pos)
	if i < 0 {
		if p.base+int64(p.end) > maxHeadBytes {
			return false, ErrMalformed
		}
		p.pos = max(p.pos, p.end-len(p.dash)+1)
		return true, nil
	}
	j := i
	if p.base+int64(j) > maxHeadBytes {
		return false, ErrMalformed
	}
	if p.base+int64(j) != 0 && !p.crlfBefore(j) {
		return false, ErrDelimiter // werkzeug takes it for a delimiter, Go does not
	}
	p.pos = j
	next, more, err := p.delimiterEnd(j)
	if more || err != nil {
		return more, err
	}
	if next == stCloseTail {
		return false, ErrMissingContext // no parts
	}
	p.pos = j + len(p.dash) + 2
	p.st = stHeaders
	return false, nil
}

// headers checks a part's header block once it is read whole.
func (p *parser) headers() (bool, error) {
	w := p.win[p.pos:p.end]
	if len(w) < 2 {
		return true, nil
	}
	var blk []byte
	n := 2 // an empty header block is the empty line alone
	if w[0] != '\r' || w[1] != '\n' {
		from := max(p.hscan-3, 0) // resume: slow clients must not make this quadratic
		i := bytes.Index(w[from:], crlfcrlf)
		if i < 0 {
			if len(w) > maxHeadBytes {
				return false, ErrPartHeader
			}
			p.hscan = len(w)
			return true, nil
		}
		i += from
		p.hscan = 0
		if i+4 > maxHeadBytes {
			return false, ErrPartHeader
		}
		blk, n = w[:i+2], i+4
		if bytes.Contains(blk, p.dash) {
			return false, ErrDelimiter
		}
	}
	isCtx, err := partHeaders(blk)
	if err != nil {
		return false, err
	}
	p.isCtx, p.partData, p.val = isCtx, 0, p.val[:0]
	p.pos += n
	p.st = stData
	return false, nil
}

// consume takes the next n unparsed bytes as body bytes of the current
// part.
func (p *parser) consume(n int) error {
	if p.isCtx {
		if len(p.val)+n > p.maxField+2 { // +2: the CRLF before the delimiter
			return ErrMalformed
		}
		p.val = append(p.val, p.win[p.pos:p.pos+n]...)
	}
	p.partData += int64(n)
	p.pos += n
	return nil
}

// data scans a part's body for the next delimiter. Every occurrence of the
// boundary there must be a delimiter (after CRLF, followed by CRLF or "--")
// or follow a byte other than CR and LF.
func (p *parser) data() (bool, error) {
	for {
		j := p.find(p.pos)
		if j < 0 {
			if n := p.end - p.pos - (len(p.dash) - 1); n > 0 {
				return true, p.consume(n)
			}
			return true, nil
		}
		i := j - p.pos
		if prev := p.win[j-1]; prev != '\r' && prev != '\n' {
			if err := p.consume(i + 1); err != nil {
				return false, err
			}
			continue // mid-line: data to every parser
		}
		// The CRLF must belong to the body: a boundary right after the
		// header block is read as an empty part by some parsers only.
		if p.partData+int64(i) < 2 || !p.crlfBefore(j) {
			return false, ErrDelimiter
		}
		if err := p.consume(i); err != nil {
			return false, err
		}
		next, more, err := p.delimiterEnd(j)
		if more || err != nil {
			return more, err
		}
		if err := p.endPart(); err != nil {
			return false, err
		}
		if next == stCloseTail && p.ctx == "" {
			return false, ErrMissingContext
		}
		p.pos = j + len(p.dash) + 2
		p.st = next
		return false, nil
	}
}

// endPart checks the value of a context part that has ended.
func (p *parser) endPart() error {
	if !p.isCtx {
		return nil
	}
	v := p.val[:len(p.val)-2]
	if p.ctx != "" {
		if string(v) != p.ctx {
			return ErrConflictContext
		}
		return nil
	}
	if len(v) == 0 {
		return ErrMissingContext
	}
	for _, c := range v {
		if c <= ' ' || c >= 0x7f {
			return ErrContextValue
		}
	}
	p.ctx = string(v)
	p.justFound = true
	return nil
}

// closeTail checks what follows the closing delimiter: CRLF, or nothing.
func (p *parser) closeTail(eof bool) (bool, error) {
	w := p.win[p.pos:p.end]
	switch {
	case len(w) >= 2 && w[0] == '\r' && w[1] == '\n':
		p.pos += 2
		p.st = stEpilogue
		return false, nil
	case len(w) >= 2 || len(w) == 1 && w[0] != '\r':
		return false, ErrDelimiter
	case eof && len(w) == 0:
		p.st = stDone
		return false, nil
	}
	return true, nil
}

// epilogue passes bytes after the closing delimiter line, which must not
// hold the boundary.
func (p *parser) epilogue(eof bool) (bool, error) {
	if p.find(p.pos) >= 0 {
		return false, ErrDelimiter
	}
	if eof {
		p.pos = p.end
		p.st = stDone
		return false, nil
	}
	if keep := len(p.dash) - 1; p.end-p.pos > keep {
		p.pos = p.end - keep
	}
	return true, nil
}
