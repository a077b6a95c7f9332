package gateway

import (
	"crypto/rand"
	"encoding/hex"
)

// trace is a request's W3C trace context: the trace id it belongs to (also
// the spec's TraceId) and the span id keygate uses for its hop.
type trace struct {
	ID     string // 32 lower-case hex digits
	SpanID string // 16 lower-case hex digits
	Flags  string // 2 hex digits
	parent string // the traceparent for the upstream (header)
}

// newTrace continues a valid incoming traceparent or starts a new trace.
// Both ids come from one read of the random source, and the ids, the
// flags and the traceparent sent upstream are all one string.
func newTrace(traceparent string) trace {
	var b [24]byte
	var h [55]byte // 00-<trace id>-<span id>-<flags>
	id, flags, ok := parseTraceparent(traceparent)
	if ok {
		_, _ = rand.Read(b[16:])
		copy(h[3:35], id)
	} else {
		_, _ = rand.Read(b[:])
		hex.Encode(h[3:35], b[:16])
		flags = "01"
	}
	copy(h[:3], "00-")
	h[35] = '-'
	hex.Encode(h[36:52], b[16:])
	h[52] = '-'
	copy(h[53:], flags)
	s := string(h[:])
	return trace{ID: s[3:35], SpanID: s[36:52], Flags: s[53:], parent: s}
}

// header is the traceparent sent upstream: same trace, keygate's span.
func (t trace) header() string { return t.parent }

// parseTraceparent accepts version 00 traceparents as W3C Trace Context
// defines them: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, with
// neither id all zeros.
func parseTraceparent(s string) (id, flags string, ok bool) {
	if len(s) != 55 || s[0:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return "", "", false
	}
	id, parent, flags := s[3:35], s[36:52], s[53:55]
	if !lowerHex(id) || !lowerHex(parent) || !lowerHex(flags) || allZero(id) || allZero(parent) {
		return "", "", false
	}
	return id, flags, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
