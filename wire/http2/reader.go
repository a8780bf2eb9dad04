package http2

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ClientPreface is what a client sends before its first frame.
const ClientPreface = http2.ClientPreface

// Side names the endpoint that sent a direction's bytes.
type Side uint8

const (
	// Client is the side that opened the connection (odd streams).
	Client Side = iota
	// Server is the side that accepted it.
	Server
)

func (s Side) String() string {
	if s == Client {
		return "client"
	}
	return "server"
}

// Limits bound what a Reader holds. The zero value of each field means the
// default named on it.
type Limits struct {
	// MaxFrame is the largest frame payload accepted; 0 means 1<<24-1, the
	// largest HTTP/2 allows (an observer does not know which
	// SETTINGS_MAX_FRAME_SIZE the peers agreed).
	MaxFrame uint32
	// MaxHeaderBlock is the largest header block (HEADERS and its
	// CONTINUATIONs, compressed); 0 means 1 MiB.
	MaxHeaderBlock int
	// MaxTable is the largest HPACK dynamic table the sender may ask the
	// decoder for; 0 means 64 KiB.
	MaxTable uint32
}

func (l Limits) withDefaults() Limits {
	if l.MaxFrame == 0 || l.MaxFrame > 1<<24-1 {
		l.MaxFrame = 1<<24 - 1
	}
	if l.MaxHeaderBlock <= 0 {
		l.MaxHeaderBlock = 1 << 20
	}
	if l.MaxTable == 0 {
		l.MaxTable = 64 << 10
	}
	return l
}

// Frame is one frame read from a direction, with a header block's
// CONTINUATION frames merged into the HEADERS or PUSH_PROMISE frame that
// started it and its fields decoded.
//
// Data is valid only until the next call of the Reader's Next or Feed.
type Frame struct {
	http2.FrameHeader
	// Fields of a HEADERS or PUSH_PROMISE frame, decoded.
	Fields []hpack.HeaderField
	// Block is the compressed header block the fields were decoded from
	// (HEADERS, PUSH_PROMISE): valid like Data.
	Block []byte
	// Data of a DATA frame, without padding. Length counts the padding too,
	// which flow control charges.
	Data []byte
	// EndStream: the frame ends its sender's half of the stream.
	EndStream bool
	// Ack: a SETTINGS or PING acknowledgement.
	Ack bool
	// Settings of a SETTINGS frame.
	Settings []http2.Setting
	// Code of a RST_STREAM or GOAWAY frame.
	Code http2.ErrCode
	// LastStream of a GOAWAY frame; PromiseID of a PUSH_PROMISE frame.
	LastStream, PromiseID uint32
	// Increment of a WINDOW_UPDATE frame.
	Increment uint32
	// Ping is a PING frame's opaque data.
	Ping [8]byte
	// Priority of a HEADERS frame that carried one, or of a PRIORITY frame.
	Priority http2.PriorityParam
	// Raw is the frame's bytes as sent, header included; for a header block
	// over CONTINUATIONs, only its last frame's. Valid like Data.
	Raw []byte
}

// ErrPreface reports a client direction that does not start with the
// HTTP/2 client preface.
var ErrPreface = errors.New("http2: connection does not start with the client preface")

// Reader frames one direction of a connection from bytes fed in any split.
// Not safe for concurrent use.
type Reader struct {
	side   Side
	lim    Limits
	buf    []byte // bytes fed and not yet consumed
	off    int64  // offset of buf[0] in the direction
	src    bytes.Reader
	fr     *http2.Framer
	dec    *hpack.Decoder
	fields []hpack.HeaderField

	preface bool // client preface still expected
	// The header block being assembled: its first frame and the fragments
	// so far.
	head   *Frame
	block  []byte
	failed error
}

// NewReader returns a Reader of the bytes side sends. A client's bytes
// start with ClientPreface.
func NewReader(side Side, lim Limits) *Reader {
	r := &Reader{side: side, lim: lim.withDefaults(), preface: side == Client}
	r.fr = http2.NewFramer(nil, &r.src)
	r.fr.SetMaxReadFrameSize(r.lim.MaxFrame)
	r.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) { r.fields = append(r.fields, f) })
	r.dec.SetAllowedMaxDynamicTableSize(r.lim.MaxTable)
	r.dec.SetMaxStringLength(r.lim.MaxHeaderBlock)
	return r
}

// SkipPreface tells a client Reader that the preface was already consumed
// (a connection taken over after an h2c Upgrade whose preface the caller
// has read).
func (r *Reader) SkipPreface() { r.preface = false }

// Feed appends bytes the side sent. The bytes are copied.
func (r *Reader) Feed(p []byte) {
	if len(r.buf) == 0 && cap(r.buf) > 64<<10 {
		r.buf = nil // let a large frame's buffer go
	}
	r.buf = append(r.buf, p...)
}

// Buffered is the number of bytes fed and not yet framed.
func (r *Reader) Buffered() int { return len(r.buf) }

// Offset is the number of bytes of the direction consumed so far.
func (r *Reader) Offset() int64 { return r.off }

// Next returns the next whole frame, or nil and a nil error when more bytes
// are needed. A header block spread over CONTINUATION frames is returned
// once, when its last fragment is in. An error is final: the direction
// cannot be framed any further.
func (r *Reader) Next() (*Frame, error) {
	if r.failed != nil {
		return nil, r.failed
	}
	f, err := r.next()
	if err != nil {
		r.failed = fmt.Errorf("http2: %s bytes at offset %d: %w", r.side, r.off, err)
		return nil, r.failed
	}
	return f, nil
}

func (r *Reader) next() (*Frame, error) {
	if r.preface {
		n := min(len(r.buf), len(ClientPreface))
		if r.buf == nil || string(r.buf[:n]) != ClientPreface[:n] {
			if n == 0 {
				return nil, nil
			}
			return nil, ErrPreface
		}
		if n < len(ClientPreface) {
			return nil, nil
		}
		r.consume(len(ClientPreface))
		r.preface = false
	}
	for {
		if len(r.buf) < frameHeaderLen {
			return nil, nil
		}
		length := uint32(r.buf[0])<<16 | uint32(r.buf[1])<<8 | uint32(r.buf[2])
		if length > r.lim.MaxFrame {
			return nil, fmt.Errorf("%s frame of %d bytes, more than the limit of %d", http2.FrameType(r.buf[3]), length, r.lim.MaxFrame)
		}
		n := frameHeaderLen + int(length)
		if len(r.buf) < n {
			return nil, nil
		}
		r.src.Reset(r.buf[:n])
		hf, err := r.fr.ReadFrame()
		if err != nil {
			return nil, fmt.Errorf("%s frame: %w", http2.FrameType(r.buf[3]), err)
		}
		out, err := r.frame(hf)
		if out != nil {
			out.Raw = r.buf[:n]
		}
		r.consume(n)
		if err != nil || out != nil {
			return out, err
		}
	}
}

const frameHeaderLen = 9

// consume drops n framed bytes. The Framer has copied the frame into its
// own buffer, so slices of the frame stay valid until the next ReadFrame.
func (r *Reader) consume(n int) {
	r.off += int64(n)
	r.buf = r.buf[n:]
	if len(r.buf) == 0 {
		r.buf = r.buf[:0:0]
	}
}

// frame turns a parsed frame into a Frame, or nil for a header fragment
// that is not the last.
func (r *Reader) frame(hf http2.Frame) (*Frame, error) {
	f := &Frame{FrameHeader: hf.Header()}
	if r.head != nil && (f.Type != http2.FrameContinuation || f.StreamID != r.head.StreamID) {
		// RFC 9113 6.10 (the Framer checks it after HEADERS only, not
		// after PUSH_PROMISE).
		return nil, fmt.Errorf("%s frame of stream %d inside the header block of stream %d", f.Type, f.StreamID, r.head.StreamID)
	}
	switch v := hf.(type) {
	case *http2.DataFrame:
		f.Data, f.EndStream = v.Data(), v.StreamEnded()
	case *http2.HeadersFrame:
		f.EndStream = v.StreamEnded()
		if v.HasPriority() {
			f.Priority = v.Priority
		}
		return r.startBlock(f, v.HeaderBlockFragment(), v.HeadersEnded())
	case *http2.PushPromiseFrame:
		f.PromiseID = v.PromiseID
		return r.startBlock(f, v.HeaderBlockFragment(), v.HeadersEnded())
	case *http2.ContinuationFrame:
		if r.head == nil {
			return nil, errors.New("CONTINUATION with no header block open")
		}
		if len(r.block)+len(v.HeaderBlockFragment()) > r.lim.MaxHeaderBlock {
			return nil, fmt.Errorf("header block of stream %d exceeds %d bytes", v.StreamID, r.lim.MaxHeaderBlock)
		}
		r.block = append(r.block, v.HeaderBlockFragment()...)
		if !v.HeadersEnded() {
			return nil, nil
		}
		head := r.head
		r.head = nil
		return r.decodeBlock(head, r.block)
	case *http2.SettingsFrame:
		f.Ack = v.IsAck()
		_ = v.ForeachSetting(func(s http2.Setting) error { f.Settings = append(f.Settings, s); return nil })
	case *http2.PingFrame:
		f.Ack, f.Ping = v.IsAck(), v.Data
	case *http2.WindowUpdateFrame:
		f.Increment = v.Increment
	case *http2.RSTStreamFrame:
		f.Code = v.ErrCode
	case *http2.GoAwayFrame:
		f.Code, f.LastStream = v.ErrCode, v.LastStreamID
	case *http2.PriorityFrame:
		f.Priority = v.PriorityParam
	}
	return f, nil
}

func (r *Reader) startBlock(f *Frame, frag []byte, ended bool) (*Frame, error) {
	if len(frag) > r.lim.MaxHeaderBlock {
		return nil, fmt.Errorf("header block of stream %d exceeds %d bytes", f.StreamID, r.lim.MaxHeaderBlock)
	}
	if ended {
		return r.decodeBlock(f, frag)
	}
	r.head, r.block = f, append(r.block[:0], frag...)
	return nil, nil
}

func (r *Reader) decodeBlock(f *Frame, block []byte) (*Frame, error) {
	// one allocation for a block of the usual size, not one per doubling
	r.fields = make([]hpack.HeaderField, 0, 8)
	if _, err := r.dec.Write(block); err != nil {
		return nil, fmt.Errorf("header block of stream %d: %w", f.StreamID, err)
	}
	if err := r.dec.Close(); err != nil {
		return nil, fmt.Errorf("header block of stream %d: %w", f.StreamID, err)
	}
	f.Fields, f.Block = r.fields, block
	r.fields = nil
	return f, nil
}

// SetTableLimit applies a SETTINGS_HEADER_TABLE_SIZE the reading endpoint
// advertised: the sender's encoder may then use a table of up to v bytes
// (bounded by Limits.MaxTable).
func (r *Reader) SetTableLimit(v uint32) {
	r.dec.SetAllowedMaxDynamicTableSize(min(max(v, 4096), r.lim.MaxTable))
}
