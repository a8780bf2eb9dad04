package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The outbound frame (DESIGN.md 3.3). Every write on a redirected outbound
// connection travels as
//
//	/*retrace{"tid":"<id or empty>","dst":"<host:port>","len":<N>}*/<N payload bytes>
//
// The JSON object has exactly these keys, in this order, with no white space,
// so both sides can encode and decode it without a JSON library and without
// allocating more than the two strings.
const (
	framePrefix = `/*retrace{"tid":"`
	frameDst    = `","dst":"`
	frameLen    = `","len":`
	frameSuffix = `}*/`
)

// MaxFrameHeader bounds the size of a frame header: the fixed text, a
// trace id of MaxIDLen and a destination of MaxDstLen, and 20 length digits.
const MaxFrameHeader = len(framePrefix) + MaxIDLen + len(frameDst) + MaxDstLen + len(frameLen) + 20 + len(frameSuffix)

// MaxDstLen is the longest destination ("host:port") a frame may name.
const MaxDstLen = 300

// Frame errors. A decoder that returns one of them has lost sync with the
// stream: the connection it came from must be closed.
var (
	// ErrFrameSyntax reports bytes that are not a frame header.
	ErrFrameSyntax = errors.New("retrace: malformed frame header")
	// ErrFrameTooLong reports a frame whose declared payload exceeds the
	// decoder's limit.
	ErrFrameTooLong = errors.New("retrace: frame payload exceeds limit")
)

// FrameHeader is the decoded header of one outbound frame.
type FrameHeader struct {
	TID string // trace id; empty for traffic of no replayed request
	Dst string // original destination, host:port
	Len int    // payload length in bytes; 0 for the preamble
}

// AppendFrameHeader appends the header of a frame carrying n payload bytes
// to dst. tid must be empty or ValidID; dest must be ValidDst.
func AppendFrameHeader(dst []byte, tid, dest string, n int) []byte {
	dst = append(dst, framePrefix...)
	dst = append(dst, tid...)
	dst = append(dst, frameDst...)
	dst = append(dst, dest...)
	dst = append(dst, frameLen...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, frameSuffix...)
}

// AppendFrame appends a whole frame (header and payload) to dst.
func AppendFrame(dst []byte, tid, dest string, payload []byte) []byte {
	dst = AppendFrameHeader(dst, tid, dest, len(payload))
	return append(dst, payload...)
}

// ValidDst reports whether dest can be carried in a frame header: non-empty,
// at most MaxDstLen bytes, printable ASCII other than '"' and '\'.
func ValidDst(dest string) bool {
	if len(dest) == 0 || len(dest) > MaxDstLen {
		return false
	}
	for i := 0; i < len(dest); i++ {
		c := dest[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// ParseFrameHeader decodes the frame header at the start of b. It returns the
// header and the number of bytes it occupies. When b holds only a prefix of a
// valid header it returns io.ErrUnexpectedEOF, so a caller can read more and
// try again; any other error means b does not start with a frame header.
func ParseFrameHeader(b []byte) (FrameHeader, int, error) {
	var h FrameHeader
	p := 0
	expect := func(lit string) error {
		for i := 0; i < len(lit); i++ {
			if p+i >= len(b) {
				return io.ErrUnexpectedEOF
			}
			if b[p+i] != lit[i] {
				return fmt.Errorf("%w: expected %q at byte %d", ErrFrameSyntax, lit, p)
			}
		}
		p += len(lit)
		return nil
	}
	field := func(max int, ok func(byte) bool, name string) (string, error) {
		start := p
		for {
			if p >= len(b) {
				if p-start > max {
					return "", fmt.Errorf("%w: %s longer than %d bytes", ErrFrameSyntax, name, max)
				}
				return "", io.ErrUnexpectedEOF
			}
			c := b[p]
			if c == '"' {
				break
			}
			if !ok(c) || p-start >= max {
				return "", fmt.Errorf("%w: bad %s at byte %d", ErrFrameSyntax, name, p)
			}
			p++
		}
		return string(b[start:p]), nil
	}
	if err := expect(framePrefix); err != nil {
		return h, 0, err
	}
	var err error
	if h.TID, err = field(MaxIDLen, idByte, "trace id"); err != nil {
		return h, 0, err
	}
	if err := expect(frameDst); err != nil {
		return h, 0, err
	}
	if h.Dst, err = field(MaxDstLen, dstByte, "destination"); err != nil {
		return h, 0, err
	}
	if h.Dst == "" {
		return h, 0, fmt.Errorf("%w: empty destination", ErrFrameSyntax)
	}
	if err := expect(frameLen); err != nil {
		return h, 0, err
	}
	start := p
	n := 0
	for p < len(b) && b[p] >= '0' && b[p] <= '9' {
		if p-start >= 18 {
			return h, 0, fmt.Errorf("%w: length has too many digits", ErrFrameSyntax)
		}
		n = n*10 + int(b[p]-'0')
		p++
	}
	if p == len(b) {
		return h, 0, io.ErrUnexpectedEOF
	}
	if p == start || (b[start] == '0' && p-start > 1) {
		return h, 0, fmt.Errorf("%w: bad length at byte %d", ErrFrameSyntax, start)
	}
	h.Len = n
	if err := expect(frameSuffix); err != nil {
		return h, 0, err
	}
	return h, p, nil
}

func dstByte(c byte) bool { return c > ' ' && c < 0x7f && c != '"' && c != '\\' }

// FrameReader decodes a stream of frames, however the transport split or
// coalesced them.
type FrameReader struct {
	r      *bufio.Reader
	maxLen int
}

// NewFrameReader returns a reader of frames from r whose payloads are at most
// maxLen bytes (maxLen <= 0 means 64 MiB).
func NewFrameReader(r io.Reader, maxLen int) *FrameReader {
	if maxLen <= 0 {
		maxLen = 64 << 20
	}
	return &FrameReader{r: bufio.NewReaderSize(r, MaxFrameHeader+64), maxLen: maxLen}
}

// Next returns the next frame's header and payload. The payload is a fresh
// slice owned by the caller. At a clean end of stream it returns io.EOF; a
// stream that ends inside a frame gives io.ErrUnexpectedEOF.
func (fr *FrameReader) Next() (FrameHeader, []byte, error) {
	var h FrameHeader
	var n int
	for want := len(framePrefix); ; {
		b, err := fr.r.Peek(want)
		if len(b) == 0 && err == io.EOF {
			return h, nil, io.EOF
		}
		var perr error
		h, n, perr = ParseFrameHeader(b)
		if perr == nil {
			break
		}
		if perr != io.ErrUnexpectedEOF {
			return h, nil, perr
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return h, nil, err
		}
		if want >= MaxFrameHeader {
			return h, nil, fmt.Errorf("%w: header longer than %d bytes", ErrFrameSyntax, MaxFrameHeader)
		}
		// Look at everything already buffered; block for one more byte only
		// when all of it is an incomplete header (a preamble may be the last
		// thing the peer sends before it waits for an answer).
		if buf := fr.r.Buffered(); buf > len(b) {
			want = min(buf, MaxFrameHeader)
		} else {
			want = min(len(b)+1, MaxFrameHeader)
		}
	}
	if h.Len > fr.maxLen {
		return h, nil, fmt.Errorf("%w: %d > %d bytes (destination %s)", ErrFrameTooLong, h.Len, fr.maxLen, h.Dst)
	}
	if _, err := fr.r.Discard(n); err != nil {
		return h, nil, err
	}
	payload := make([]byte, h.Len)
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, err
	}
	return h, payload, nil
}
