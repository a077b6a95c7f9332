package framing

import (
	"bytes"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// frames is a client's HTTP/2 stream: the preface, SETTINGS, then for
// each id a HEADERS and an RST_STREAM, and a DATA frame with payload.
func frames(t testing.TB, resets int, payload []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	for i := range resets {
		id := uint32(2*i + 1)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x82, 0x87}, EndHeaders: true})
		_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	_ = fr.WriteData(uint32(2*resets+1), true, payload)
	return b.Bytes()
}

// referenceTypes is the frame types of stream (preface first), as
// x/net's ReadFrameHeader reads them.
func referenceTypes(stream []byte) []http2.FrameType {
	if len(stream) < len(http2.ClientPreface) {
		return nil
	}
	r := bytes.NewReader(stream[len(http2.ClientPreface):])
	var types []http2.FrameType
	for {
		fh, err := http2.ReadFrameHeader(r)
		if err != nil {
			return types
		}
		types = append(types, fh.Type)
		if _, err := io.CopyN(io.Discard, r, int64(fh.Length)); err != nil {
			return types
		}
	}
}

// feedTypes feeds stream to a new h2Frames in pieces of step bytes and
// returns the types it reported.
func feedTypes(stream []byte, step int) []http2.FrameType {
	f := h2Frames{preface: len(http2.ClientPreface)}
	var types []http2.FrameType
	for len(stream) > 0 {
		k := min(max(step, 1), len(stream))
		f.feed(stream[:k], func(t http2.FrameType) bool { types = append(types, t); return true })
		stream = stream[k:]
	}
	return types
}

func TestH2FramesFollowsFramesHoweverSplit(t *testing.T) {
	t.Parallel()
	stream := frames(t, 5, bytes.Repeat([]byte("x"), 70000))
	want := referenceTypes(stream)
	if len(want) != 12 {
		t.Fatalf("reference read %d frames, want 12", len(want))
	}
	for _, step := range []int{1, 2, 8, 9, 10, 23, 24, 25, 4096, len(stream)} {
		if got := feedTypes(stream, step); !slices.Equal(got, want) {
			t.Errorf("in pieces of %d: %v, want %v", step, got, want)
		}
	}
}

func TestResetBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name  string
		at    []time.Duration // offsets of the resets from t0
		taken int             // how many of them pass
	}{
		{"a burst of 10 passes", repeat(0, 10), 10},
		{"the 11th at once does not", repeat(0, 11), 10},
		{"refilled at 2 a second", append(repeat(0, 10), time.Second, time.Second, time.Second), 12},
		{"never past the burst", append(append(repeat(0, 10), time.Hour), repeat(time.Hour, 10)...), 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := resetBucket{tokens: 10, burst: 10, rate: 2}
			taken := 0
			for _, d := range tt.at {
				if b.take(t0.Add(d)) {
					taken++
				}
			}
			if taken != tt.taken {
				t.Errorf("%d passed, want %d", taken, tt.taken)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// readerConn is a net.Conn that reads from r in pieces of step bytes.
type readerConn struct {
	net.Conn
	r    io.Reader
	step int
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.step)]) }

// TestH2ConnStopsAtTheLimit: the reads stop at the header of the reset
// past the limit, and then fail with the connection error that makes
// the HTTP/2 server send GOAWAY ENHANCE_YOUR_CALM; nothing after it is
// read.
func TestH2ConnStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	for _, step := range []int{1, 13, 100, 1 << 16} {
		flooded := 0
		c := &h2Conn{
			Conn:    readerConn{r: bytes.NewReader(frames(t, 20, nil)), step: step},
			frames:  h2Frames{preface: len(http2.ClientPreface)},
			bucket:  resetBucket{tokens: 5, burst: 5, rate: 1},
			flooded: func() { flooded++ },
			now:     func() time.Time { return time.Unix(1, 0) },
		}
		delivered, err := io.ReadAll(c)
		if err != errTooManyResets || flooded != 1 {
			t.Fatalf("step %d: read ended with %v, flooded told %d times; want errTooManyResets, once", step, err, flooded)
		}
		if _, err := c.Read(make([]byte, 10)); err != errTooManyResets {
			t.Errorf("step %d: a read after the end: %v", step, err)
		}
		types := referenceTypes(delivered)
		resets := 0
		for _, ty := range types {
			if ty == http2.FrameRSTStream {
				resets++
			}
		}
		// 5 resets whole and the header of the 6th, nothing after.
		if resets != 6 || types[len(types)-1] != http2.FrameRSTStream {
			t.Errorf("step %d: delivered %d RST_STREAM headers, ending with %v; want 6, ending with the one past the limit", step, resets, types[len(types)-1])
		}
	}
	ce, ok := errTooManyResets.(http2.ConnectionError)
	if !ok || http2.ErrCode(ce) != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("the error is %v, want ConnectionError ENHANCE_YOUR_CALM", errTooManyResets)
	}
}

// FuzzH2Frames: for any bytes split anywhere, h2Frames reports the frame
// types x/net's reader reads, and never panics.
func FuzzH2Frames(f *testing.F) {
	f.Add(frames(f, 2, []byte("hello")), uint8(7))
	f.Add([]byte(http2.ClientPreface+"\x00\x00"), uint8(1))
	f.Add([]byte(http2.ClientPreface+"\xff\xff\xff\x03\x00\x00\x00\x00\x01"), uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		want := referenceTypes(stream)
		got := feedTypes(stream, int(step))
		if len(stream) < len(http2.ClientPreface) {
			if len(got) != 0 {
				t.Fatalf("frames inside the preface: %v", got)
			}
			return
		}
		if !slices.Equal(got, want) {
			t.Fatalf("in pieces of %d: %v, want %v", step, got, want)
		}
	})
}
