package http2

import (
	"bytes"
	"fmt"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Rewriter passes one direction of a connection through and removes from
// every header block the fields Drop selects, handing them to Removed
// first. Removing a field from a block as encoded would put the peer's
// HPACK decoder out of step with the sender's encoder (the field may have
// entered the dynamic table, and later blocks refer to it by index), so
// once a Rewriter is in a direction, every header block of it is decoded
// with the sender's table and encoded again with the Rewriter's own, which
// the peer's decoder follows. Every other frame passes unchanged.
//
// The agent puts one in front of a connection whose client adds the trace
// in-band (retrace-trace-id) on the caller's goroutine: it learns each
// stream's trace and the real server never sees the field. Not safe for
// concurrent use.
type Rewriter struct {
	r   *Reader
	out bytes.Buffer
	fw  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
	// Drop selects the fields to remove (names are lower case).
	Drop func(name string) bool
	// Removed, when set, is called with the fields removed from a stream's
	// header block, before the rewritten block is written.
	Removed func(stream uint32, fields []hpack.HeaderField)
	// Frame, when set, is called with every frame passed, after Removed.
	Frame func(f *Frame)
	// Rewritten counts the header blocks encoded again.
	Rewritten int
}

// NewRewriter returns a Rewriter of the bytes side sends.
func NewRewriter(side Side, drop func(name string) bool) *Rewriter {
	w := &Rewriter{r: NewReader(side, Limits{MaxTable: 64 << 10}), Drop: drop}
	w.fw = http2.NewFramer(&w.out, nil)
	// What the sender sent passes as sent: whether it is valid is for the
	// peer to say.
	w.fw.AllowIllegalWrites = true
	w.enc = hpack.NewEncoder(&w.hb)
	return w
}

// Write takes the next bytes of the direction and returns what to send in
// their place: whole frames, rewritten; the start of a frame waits for its
// end. The returned slice is valid until the next call. After an error
// nothing more can be rewritten: the direction's HPACK state is lost, and
// the connection must be closed.
func (w *Rewriter) Write(p []byte) ([]byte, error) {
	w.out.Reset()
	preface := w.r.preface
	w.r.Feed(p)
	for {
		f, err := w.r.Next()
		if err != nil {
			return nil, err
		}
		if preface && !w.r.preface {
			w.out.WriteString(ClientPreface)
			preface = false
		}
		if f == nil {
			return w.out.Bytes(), nil
		}
		if err := w.frame(f); err != nil {
			return nil, fmt.Errorf("http2: rewriting stream %d: %w", f.StreamID, err)
		}
	}
}

// Pending is the number of bytes held back: the start of a frame.
func (w *Rewriter) Pending() int { return w.r.Buffered() }

func (w *Rewriter) frame(f *Frame) error {
	switch f.Type {
	case http2.FrameHeaders, http2.FramePushPromise:
	default:
		if w.Frame != nil {
			w.Frame(f)
		}
		w.out.Write(f.Raw)
		return nil
	}
	kept := f.Fields[:0:0]
	var removed []hpack.HeaderField
	for _, hf := range f.Fields {
		if w.Drop != nil && w.Drop(hf.Name) {
			removed = append(removed, hf)
			continue
		}
		kept = append(kept, hf)
	}
	if removed != nil && w.Removed != nil {
		w.Removed(f.StreamID, removed)
	}
	f.Fields = kept
	if w.Frame != nil {
		w.Frame(f)
	}
	w.hb.Reset()
	for _, hf := range kept {
		if err := w.enc.WriteField(hf); err != nil {
			return err
		}
	}
	w.Rewritten++
	block := w.hb.Bytes()
	// 16384 bytes: the frame size every peer accepts, whatever its
	// SETTINGS (which travel the other way).
	const maxFrame = 16384
	if f.Type == http2.FramePushPromise {
		first := block[:min(len(block), maxFrame-4)]
		rest := block[len(first):]
		if err := w.fw.WritePushPromise(http2.PushPromiseParam{StreamID: f.StreamID, PromiseID: f.PromiseID, BlockFragment: first, EndHeaders: len(rest) == 0}); err != nil {
			return err
		}
		return writeContinuations(w.fw, f.StreamID, rest, maxFrame)
	}
	first := block[:min(len(block), maxFrame-5)]
	rest := block[len(first):]
	hp := http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: first, EndStream: f.EndStream, EndHeaders: len(rest) == 0}
	if f.Flags.Has(http2.FlagHeadersPriority) {
		hp.Priority = f.Priority
	}
	if err := w.fw.WriteHeaders(hp); err != nil {
		return err
	}
	return writeContinuations(w.fw, f.StreamID, rest, maxFrame)
}

func writeContinuations(fw *http2.Framer, id uint32, rest []byte, maxFrame int) error {
	for len(rest) > 0 {
		n := min(len(rest), maxFrame)
		if err := fw.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// SetPeerTableLimit applies the SETTINGS_HEADER_TABLE_SIZE the receiving
// peer advertised (it travels the other way): the Rewriter's encoder then
// keeps its table within it.
func (w *Rewriter) SetPeerTableLimit(v uint32) { w.enc.SetMaxDynamicTableSizeLimit(v) }
