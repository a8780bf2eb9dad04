// Package inband is the agent's part of HTTP/2: it removes the in-band
// trace field (retrace-trace-id, and every other retrace-* field) from the
// header blocks of one direction of a connection, and says which stream
// carried which trace. It depends on hpack alone (no Framer, no net/http
// server code), so that the agent a service links stays light; the rest
// of HTTP/2 is package wire/http2.
package inband

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// TraceField is the header field that carries a stream's trace in-band.
const TraceField = "retrace-trace-id"

// IsRetrace reports a field the Rewriter removes: any retrace-* field.
func IsRetrace(name string) bool { return strings.HasPrefix(name, "retrace-") }

// ClientPreface is what a client sends before its first frame.
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

const (
	frameHeaderLen = 9
	typeHeaders    = 0x1
	typePush       = 0x5
	typeCont       = 0x9
	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
	// maxOutFrame is the frame size every peer accepts, whatever its
	// SETTINGS (which travel the other way).
	maxOutFrame = 16384
)

// Block is a header block the Rewriter wrote: where it ends in Write's
// output, its stream, and the fields removed from it.
type Block struct {
	Stream  uint32
	End     int
	Removed []hpack.HeaderField
	// Opens: a HEADERS block of a stream not seen before in this
	// direction (a request's headers, not its trailers).
	Opens bool
}

// Trace is the value of TraceField among the removed fields, "" for none.
func (b Block) Trace() string {
	for _, f := range b.Removed {
		if f.Name == TraceField {
			return f.Value
		}
	}
	return ""
}

// ErrNotHTTP2 reports a client direction that does not start with the
// preface.
var ErrNotHTTP2 = errors.New("http2: not the client preface")

// Rewriter passes one direction of a connection through and removes from
// every header block the fields Drop selects. Removing a field from a
// block as encoded would put the peer's HPACK decoder out of step with the
// sender's encoder (the field may have entered the dynamic table, and
// later blocks refer to it by index), so every header block is decoded
// with the sender's table and encoded again with the Rewriter's own, which
// the peer's decoder follows. Every other frame passes unchanged. Not safe
// for concurrent use.
type Rewriter struct {
	// Drop selects the fields to remove (names are lower case); nil means
	// IsRetrace.
	Drop func(name string) bool

	buf     []byte // bytes in, not yet a whole frame
	preface bool   // the client preface is still expected
	out     []byte
	blocks  []Block
	dec     *hpack.Decoder
	fields  []hpack.HeaderField
	enc     *hpack.Encoder
	hb      appendWriter
	// The header block in progress: its first frame's header and flags,
	// its fragments.
	head      []byte
	headFlags byte
	headType  byte
	headID    uint32
	promised  uint32
	priority  []byte
	frag      []byte
	lastOpen  uint32 // highest stream whose headers opened it
	blockRaw  []byte // the frames of the header block in progress, as they came
	rest      []byte // after a failure: the bytes taken in and not written
	failed    error
	// Rewritten counts the header blocks encoded again.
	Rewritten int
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// maxBlock bounds a header block held (compressed) and a decoded string:
// as much as any server accepts (grpc-go's header list limit is 16 MiB), so
// that a block the peer would take never fails the Rewriter.
const maxBlock = 16 << 20

// NewRewriter returns a Rewriter of a client direction (which starts with
// the preface) when client is true, else of a server's.
func NewRewriter(client bool) *Rewriter {
	w := &Rewriter{preface: client}
	w.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) { w.fields = append(w.fields, f) })
	w.dec.SetAllowedMaxDynamicTableSize(64 << 10)
	w.dec.SetMaxStringLength(maxBlock)
	w.enc = hpack.NewEncoder(&w.hb)
	return w
}

// SetPeerTableLimit applies the SETTINGS_HEADER_TABLE_SIZE the receiving
// peer advertised (it travels the other way): the Rewriter's encoder then
// keeps its table within it, and its decoder lets the sender's encoder,
// bound by the same setting, use a table that large.
func (w *Rewriter) SetPeerTableLimit(v uint32) {
	w.enc.SetMaxDynamicTableSizeLimit(v)
	w.dec.SetAllowedMaxDynamicTableSize(max(v, 64<<10))
}

// Pending is the number of bytes held back: the start of a frame.
func (w *Rewriter) Pending() int { return len(w.buf) }

// Write takes the next bytes of the direction and returns what to send in
// their place — whole frames, the header blocks rewritten; the start of a
// frame waits for its end — and the header blocks written. Both are valid
// until the next call. After an error nothing more can be rewritten: the
// direction's HPACK state is lost. The bytes returned with the error are
// the frames rewritten before the one that failed, and Unrewritten holds
// every byte taken in after them, as it came.
func (w *Rewriter) Write(p []byte) ([]byte, []Block, error) {
	if w.failed != nil {
		return nil, nil, w.failed
	}
	w.out, w.blocks = w.out[:0], w.blocks[:0]
	w.buf = append(w.buf, p...)
	off := 0
	if w.preface {
		n := min(len(w.buf), len(ClientPreface))
		if string(w.buf[:n]) != ClientPreface[:n] {
			w.failed, w.rest = ErrNotHTTP2, w.buf
			return nil, nil, w.failed
		}
		if n < len(ClientPreface) {
			return nil, nil, nil
		}
		w.out = append(w.out, ClientPreface...)
		off, w.preface = len(ClientPreface), false
	}
	for len(w.buf)-off >= frameHeaderLen {
		h := w.buf[off : off+frameHeaderLen]
		n := frameHeaderLen + (int(h[0])<<16 | int(h[1])<<8 | int(h[2]))
		if len(w.buf)-off < n {
			break
		}
		if err := w.frame(w.buf[off : off+n]); err != nil {
			w.failed = fmt.Errorf("http2: rewriting the frame at stream %d: %w", binary.BigEndian.Uint32(h[5:])&(1<<31-1), err)
			w.rest = append(w.blockRaw, w.buf[off:]...)
			w.blockRaw = nil
			return w.out, nil, w.failed
		}
		off += n
	}
	w.buf = w.buf[:copy(w.buf, w.buf[off:])]
	return w.out, w.blocks, nil
}

// Unwritten returns the bytes taken in and not written, as they came:
// after Write failed, those of the header block in progress, of the frame
// that failed and everything after it; otherwise those of a header block
// in progress and the start of a frame (nil when there are none). A
// caller that must not lose the direction (the agent, failing open) sends
// them as they are. The result is the caller's.
func (w *Rewriter) Unwritten() []byte {
	if w.failed != nil {
		return w.rest
	}
	if len(w.blockRaw) == 0 && len(w.buf) == 0 {
		return nil
	}
	return append(append([]byte(nil), w.blockRaw...), w.buf...)
}

func (w *Rewriter) frame(f []byte) error {
	if err := w.frame1(f); err != nil {
		return err // blockRaw stays: Unrewritten starts with it
	}
	if w.head != nil {
		w.blockRaw = append(w.blockRaw, f...)
	} else {
		w.blockRaw = w.blockRaw[:0]
	}
	return nil
}

func (w *Rewriter) frame1(f []byte) error {
	typ, flags := f[3], f[4]
	id := binary.BigEndian.Uint32(f[5:]) & (1<<31 - 1)
	payload := f[frameHeaderLen:]
	if w.head != nil {
		if typ != typeCont || id != w.headID {
			return errors.New("a header block is interrupted by another frame")
		}
		if len(w.frag)+len(payload) > maxBlock {
			return errors.New("header block too large")
		}
		w.frag = append(w.frag, payload...)
		if flags&flagEndHeaders != 0 {
			w.head = nil
			return w.block()
		}
		return nil
	}
	switch typ {
	case typeHeaders, typePush:
	case typeCont:
		return errors.New("CONTINUATION with no header block open")
	default:
		w.out = append(w.out, f...)
		return nil
	}
	if flags&flagPadded != 0 {
		if len(payload) < 1 || int(payload[0]) >= len(payload) {
			return errors.New("bad padding")
		}
		payload = payload[1 : len(payload)-int(payload[0])]
	}
	w.priority, w.promised = nil, 0
	if typ == typeHeaders && flags&flagPriority != 0 {
		if len(payload) < 5 {
			return errors.New("HEADERS too short for its priority")
		}
		w.priority, payload = append([]byte(nil), payload[:5]...), payload[5:]
	}
	if typ == typePush {
		if len(payload) < 4 {
			return errors.New("PUSH_PROMISE too short")
		}
		w.promised, payload = binary.BigEndian.Uint32(payload)&(1<<31-1), payload[4:]
	}
	w.headType, w.headFlags, w.headID = typ, flags, id
	w.frag = append(w.frag[:0], payload...)
	if flags&flagEndHeaders == 0 {
		w.head = f[:frameHeaderLen]
		return nil
	}
	return w.block()
}

// block decodes the block in frag, drops fields, and writes it encoded
// again as HEADERS (or PUSH_PROMISE) and CONTINUATIONs.
func (w *Rewriter) block() error {
	w.fields = w.fields[:0]
	if _, err := w.dec.Write(w.frag); err != nil {
		return err
	}
	if err := w.dec.Close(); err != nil {
		return err
	}
	drop := w.Drop
	if drop == nil {
		drop = IsRetrace
	}
	b := Block{Stream: w.headID}
	if w.headType == typeHeaders && w.headID > w.lastOpen {
		b.Opens, w.lastOpen = true, w.headID
	}
	w.hb.b = w.hb.b[:0]
	for _, f := range w.fields {
		if drop(f.Name) {
			b.Removed = append(b.Removed, f)
			continue
		}
		if err := w.enc.WriteField(f); err != nil {
			return err
		}
	}
	w.Rewritten++
	block := w.hb.b
	var pre []byte
	flags := w.headFlags &^ (flagPadded | flagEndHeaders | flagPriority)
	if w.priority != nil {
		pre, flags = w.priority, flags|flagPriority
	}
	if w.headType == typePush {
		pre = binary.BigEndian.AppendUint32(nil, w.promised)
	}
	first := min(len(block), maxOutFrame-len(pre))
	if first == len(block) {
		flags |= flagEndHeaders
	}
	w.out = appendFrameHeader(w.out, len(pre)+first, w.headType, flags, w.headID)
	w.out = append(w.out, pre...)
	w.out = append(w.out, block[:first]...)
	for rest := block[first:]; len(rest) > 0; {
		n := min(len(rest), maxOutFrame)
		var fl byte
		if n == len(rest) {
			fl = flagEndHeaders
		}
		w.out = appendFrameHeader(w.out, n, typeCont, fl, w.headID)
		w.out = append(w.out, rest[:n]...)
		rest = rest[n:]
	}
	b.End = len(w.out)
	w.blocks = append(w.blocks, b)
	return nil
}

func appendFrameHeader(b []byte, n int, typ, flags byte, id uint32) []byte {
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	return binary.BigEndian.AppendUint32(b, id)
}
