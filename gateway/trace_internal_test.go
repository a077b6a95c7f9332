package gateway

import (
	"strings"
	"testing"
)

// TestNewTrace: a valid incoming traceparent is continued (its trace id
// and flags, keygate's own span id), anything else starts a new trace
// sampled; the traceparent for the upstream names the trace and keygate's
// span.
func TestNewTrace(t *testing.T) {
	const in = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	for _, c := range []struct {
		name, in  string
		continued bool
	}{
		{"valid", in, true},
		{"none", "", false},
		{"upper-case hex", strings.ToUpper(in), false},
		{"zero trace id", "00-00000000000000000000000000000000-b7ad6b7169203331-01", false},
		{"zero parent id", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false},
		{"other version", "01" + in[2:], false},
		{"one byte longer", in + "0", false},
	} {
		tr := newTrace(c.in)
		if !lowerHex(tr.ID) || len(tr.ID) != 32 || !lowerHex(tr.SpanID) || len(tr.SpanID) != 16 || allZero(tr.SpanID) {
			t.Errorf("%s: ids %q %q", c.name, tr.ID, tr.SpanID)
		}
		switch {
		case c.continued && (tr.ID != in[3:35] || tr.Flags != in[53:] || tr.SpanID == in[36:52]):
			t.Errorf("%s: %+v does not continue %s", c.name, tr, c.in)
		case !c.continued && (tr.Flags != "01" || strings.Contains(c.in, tr.ID)):
			t.Errorf("%s: %+v is not a new sampled trace", c.name, tr)
		}
		if want := "00-" + tr.ID + "-" + tr.SpanID + "-" + tr.Flags; tr.header() != want {
			t.Errorf("%s: header %q, want %q", c.name, tr.header(), want)
		}
	}
	if a, b := newTrace(""), newTrace(""); a.ID == b.ID || a.SpanID == b.SpanID {
		t.Error("two new traces share an id")
	}
}
