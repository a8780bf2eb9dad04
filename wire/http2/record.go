package http2

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// A recorded half of a stream (recording.Call's request or response) is
// independent of the connection's HPACK state, so it is stored decoded, in
// this text form (version 1):
//
//	*(interim block) header-block [pace-line] data-line data [trailer-block]
//	block      = *(name ": " value CRLF) CRLF
//	pace-line  = "PACE " req ":" resp *("," req ":" resp) CRLF
//	data-line  = "DATA " length CRLF
//
// HTTP/2 field values never hold CR or LF (RFC 9113 8.2.1), so a line is a
// field. Interim blocks are those whose :status is 1xx. An empty header
// block is written as a lone CRLF.

// AppendMessage appends m, and the pace of its exchange when m is a
// response, in the recorded form.
func AppendMessage(b []byte, m Message, pace []Mark) []byte {
	for _, h := range m.Interim {
		b = appendBlock(b, h)
	}
	b = appendBlock(b, m.Header)
	if len(pace) > 0 {
		b = append(b, "PACE "...)
		for i, p := range pace {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(p.Request), 10)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(p.Response), 10)
		}
		b = append(b, "\r\n"...)
	}
	b = append(b, "DATA "...)
	b = strconv.AppendInt(b, int64(len(m.Data)), 10)
	b = append(b, "\r\n"...)
	b = append(b, m.Data...)
	if m.Trailer != nil {
		b = appendBlock(b, m.Trailer)
	}
	return b
}

func appendBlock(b []byte, fields []hpack.HeaderField) []byte {
	for _, f := range fields {
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// ErrRecorded reports a recorded half that is not in the recorded form.
var ErrRecorded = errors.New("http2: recorded message")

// ParseMessage reads a recorded half. End is true: a recorded half is
// whole.
func ParseMessage(b []byte) (m Message, pace []Mark, err error) {
	off := 0
	for {
		block, n, err := parseBlock(b[off:])
		if err != nil {
			return Message{}, nil, fmt.Errorf("%w: block at offset %d: %w", ErrRecorded, off, err)
		}
		off += n
		if isInterim(block) {
			m.Interim = append(m.Interim, block)
			continue
		}
		m.Header = block
		break
	}
	line, n, ok := cutLine(b[off:])
	if ok && strings.HasPrefix(line, "PACE ") {
		for _, p := range strings.Split(line[5:], ",") {
			r, s, ok1 := strings.Cut(p, ":")
			req, err1 := strconv.Atoi(r)
			resp, err2 := strconv.Atoi(s)
			if !ok1 || err1 != nil || err2 != nil || req < 0 || resp < 0 {
				return Message{}, nil, fmt.Errorf("%w: bad PACE line at offset %d", ErrRecorded, off)
			}
			pace = append(pace, Mark{Request: req, Response: resp})
		}
		off += n
		line, n, ok = cutLine(b[off:])
	}
	if !ok || !strings.HasPrefix(line, "DATA ") {
		return Message{}, nil, fmt.Errorf("%w: no DATA line at offset %d", ErrRecorded, off)
	}
	size, err := strconv.Atoi(line[5:])
	if err != nil || size < 0 || size > len(b)-off-n {
		return Message{}, nil, fmt.Errorf("%w: DATA line %q at offset %d: bad length", ErrRecorded, line, off)
	}
	off += n
	if size > 0 {
		m.Data = b[off : off+size]
	}
	off += size
	if off < len(b) {
		t, n, err := parseBlock(b[off:])
		if err != nil {
			return Message{}, nil, fmt.Errorf("%w: trailer at offset %d: %w", ErrRecorded, off, err)
		}
		if off+n != len(b) {
			return Message{}, nil, fmt.Errorf("%w: %d bytes after the trailer", ErrRecorded, len(b)-off-n)
		}
		m.Trailer = t
	}
	m.End = true
	return m, pace, nil
}

func cutLine(b []byte) (string, int, bool) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return "", 0, false
	}
	return string(b[:i]), i + 2, true
}

func parseBlock(b []byte) ([]hpack.HeaderField, int, error) {
	off := 0
	fields := []hpack.HeaderField{}
	for {
		line, n, ok := cutLine(b[off:])
		if !ok {
			return nil, 0, errors.New("block does not end")
		}
		off += n
		if line == "" {
			return fields, off, nil
		}
		// A pseudo-header's name starts with ':'; the separator is the
		// first ": " after it.
		i := strings.Index(line[min(1, len(line)):], ": ")
		if i < 0 {
			return nil, 0, fmt.Errorf("line %q is not a field", line)
		}
		i += min(1, len(line))
		fields = append(fields, hpack.HeaderField{Name: line[:i], Value: line[i+2:]})
	}
}

// AppendCapped is AppendMessage within limit bytes (negative: no limit):
// the data is cut so that the whole half fits, and the pace kept to the
// data kept, so the half stays in the recorded form (a cap that cut the
// written bytes would leave its trailer, or its data line, unreadable).
// cut reports that data was dropped. A half whose blocks alone do not fit
// is written with no data, and cut.
func AppendCapped(b []byte, m Message, pace []Mark, limit int) (out []byte, cut bool) {
	start := len(b)
	b = AppendMessage(b, m, pace)
	over := len(b) - start - limit
	if limit < 0 || over <= 0 {
		return b, false
	}
	// Fewer data bytes also shorten the DATA line's length: keeping
	// len(Data)-over bytes always fits.
	keep := max(0, len(m.Data)-over)
	m.Data = m.Data[:keep]
	var kept []Mark
	for _, p := range pace {
		if p.Response > keep {
			p.Response = keep
		}
		if n := len(kept); n > 0 && kept[n-1].Response == p.Response {
			continue
		}
		kept = append(kept, p)
	}
	return AppendMessage(b[:start], m, kept), true
}

// WithoutRetrace returns fields without the in-band retrace-* fields
// (inband.IsRetrace), and the value of TraceField among them ("" for
// none). fields is filtered in place.
func WithoutRetrace(fields []hpack.HeaderField) (kept []hpack.HeaderField, tid string) {
	kept = fields[:0]
	for _, f := range fields {
		if strings.HasPrefix(f.Name, "retrace-") {
			if f.Name == TraceField && tid == "" {
				tid = f.Value
			}
			continue
		}
		kept = append(kept, f)
	}
	return kept, tid
}
