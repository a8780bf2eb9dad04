package h2mask

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
)

// The recorded names of the calls it masks (wire/http2's Name and
// GRPCName).
const (
	Name     = "http2"
	GRPCName = "grpc"
)

// Masker masks recorded HTTP/2 and gRPC halves (see Mask).
var Masker wire.Masker = masker{}

type masker struct{}

func (masker) Mask(side wire.Side, msg []byte, rules wire.MaskRules) []byte {
	return Mask(side, msg, rules)
}

// maxDepth bounds the nesting of protobuf messages followed.
const maxDepth = 32

// maxDecoded bounds a compressed gRPC message decoded for masking.
const maxDecoded = 64 << 20

// Mask masks one recorded half of an HTTP/2 stream:
//
//   - every header and trailer field: the whole value when the rules name
//     the field (Header), else :path's query fields, then the rules'
//     patterns over the value (a result holding CR or LF is not taken);
//   - the data: gRPC messages (content-type application/grpc…) by their
//     protobuf string fields, recursively through nested messages (a
//     message that is no protobuf but text, application/grpc+json, as
//     JSON and text), compressed ones (grpc-encoding gzip) decoded and
//     encoded again;
//     any other body as an HTTP body (http1.MaskBody: content codings,
//     JSON, forms, text).
//
// A half that is not in the recorded form gets the rules' patterns as
// text, and is reported with Skip when they change it (its framing may no
// longer hold).
func Mask(_ wire.Side, msg []byte, rules wire.MaskRules) []byte {
	h, ok := parse(msg)
	if !ok {
		out := rules.Text(msg)
		if !bytes.Equal(out, msg) {
			rules.Skip("an HTTP/2 half that is not in the recorded form, masked as text")
		}
		return out
	}
	var out []byte
	for _, b := range h.interim {
		out = maskBlock(out, b, rules)
	}
	out = maskBlock(out, h.header, rules)
	ct, ce, ge := h.field("content-type"), h.field("content-encoding"), h.field("grpc-encoding")
	var data []byte
	var remap func(int) int
	if strings.HasPrefix(strings.ToLower(ct), "application/grpc") {
		data, remap = maskGRPC(h.data, ge, rules)
	} else {
		data = http1.MaskBody(h.data, ct, ce, rules)
		remap = func(off int) int {
			if off >= len(h.data) {
				return len(data)
			}
			return min(off, len(data))
		}
	}
	if bytes.Equal(data, h.data) {
		out = append(append(out, h.lines...), data...) // as recorded
	} else {
		out = appendLines(out, h, data, remap)
	}
	if h.trailer != nil {
		out = maskBlock(out, h.trailer, rules)
	}
	if bytes.Equal(out, msg) {
		return msg
	}
	return out
}

// appendLines appends the pace and data lines of masked data, and it.
func appendLines(out []byte, h half, data []byte, remap func(int) int) []byte {
	if len(h.pace) > 0 {
		out = append(out, "PACE "...)
		for i, p := range h.pace {
			if i > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendInt(out, int64(p[0]), 10)
			out = append(out, ':')
			out = strconv.AppendInt(out, int64(remap(p[1])), 10)
		}
		out = append(out, "\r\n"...)
	}
	out = append(out, "DATA "...)
	out = strconv.AppendInt(out, int64(len(data)), 10)
	return append(append(out, "\r\n"...), data...)
}

type field struct{ name, value []byte }

// half is a recorded half, its parts aliasing the bytes.
type half struct {
	interim [][]field
	header  []field
	pace    [][2]int
	lines   []byte // the pace and data lines as recorded
	data    []byte
	trailer []field // nil: none
}

func (h *half) field(name string) string {
	for _, f := range h.header {
		if strings.EqualFold(string(f.name), name) {
			return string(f.value)
		}
	}
	return ""
}

// parse reads the recorded form (wire/http2's record.go writes it):
// *(interim block) header-block [pace-line] data-line data [trailer-block].
func parse(b []byte) (h half, ok bool) {
	for {
		block, n, ok := parseBlock(b)
		if !ok {
			return half{}, false
		}
		b = b[n:]
		if interim(block) {
			h.interim = append(h.interim, block)
			continue
		}
		h.header = block
		break
	}
	start := b
	line, rest, ok := bytes.Cut(b, []byte("\r\n"))
	if ok && bytes.HasPrefix(line, []byte("PACE ")) {
		for _, p := range strings.Split(string(line[5:]), ",") {
			r, s, ok1 := strings.Cut(p, ":")
			req, err1 := strconv.Atoi(r)
			resp, err2 := strconv.Atoi(s)
			if !ok1 || err1 != nil || err2 != nil || req < 0 || resp < 0 {
				return half{}, false
			}
			h.pace = append(h.pace, [2]int{req, resp})
		}
		b = rest
		line, rest, ok = bytes.Cut(b, []byte("\r\n"))
	}
	if !ok || !bytes.HasPrefix(line, []byte("DATA ")) {
		return half{}, false
	}
	size, err := strconv.Atoi(string(line[5:]))
	if err != nil || size < 0 || size > len(rest) {
		return half{}, false
	}
	h.lines = start[:len(start)-len(rest)]
	h.data, b = rest[:size], rest[size:]
	if len(b) > 0 {
		t, n, ok := parseBlock(b)
		if !ok || n != len(b) {
			return half{}, false
		}
		h.trailer = t
	}
	return h, true
}

func parseBlock(b []byte) ([]field, int, bool) {
	fields := []field{}
	off := 0
	for {
		line, _, ok := bytes.Cut(b[off:], []byte("\r\n"))
		if !ok {
			return nil, 0, false
		}
		off += len(line) + 2
		if len(line) == 0 {
			return fields, off, true
		}
		// a pseudo-header's name starts with ':'; the separator is the
		// first ": " after it
		i := bytes.Index(line[min(1, len(line)):], []byte(": "))
		if i < 0 {
			return nil, 0, false
		}
		i += min(1, len(line))
		fields = append(fields, field{name: line[:i], value: line[i+2:]})
	}
}

func interim(block []field) bool {
	for _, f := range block {
		if string(f.name) == ":status" {
			return len(f.value) == 3 && f.value[0] == '1'
		}
	}
	return false
}

func maskBlock(out []byte, block []field, rules wire.MaskRules) []byte {
	for _, f := range block {
		v := f.value
		if repl, ok := rules.Header(string(f.name)); ok && !strings.HasPrefix(string(f.name), ":") {
			v = []byte(repl)
		} else {
			if string(f.name) == ":path" {
				v = http1.MaskTarget(v, rules)
			}
			v = rules.Text(v)
		}
		if bytes.ContainsAny(v, "\r\n") {
			v = f.value
		}
		out = append(append(append(append(out, f.name...), ": "...), v...), "\r\n"...)
	}
	return append(out, "\r\n"...)
}

// maskGRPC masks the length-prefixed messages of a gRPC body and returns
// it with the map from an offset in the recorded data to the masked one
// (pace marks fall on message boundaries). Bytes after the last whole
// message (cut by the cap) get the rules' patterns as text.
func maskGRPC(data []byte, encoding string, rules wire.MaskRules) ([]byte, func(int) int) {
	type moved struct{ old, new int }
	ends := []moved{{0, 0}}
	out := make([]byte, 0, len(data))
	p := data
	for len(p) >= 5 {
		n := binary.BigEndian.Uint32(p[1:])
		if uint64(n) > uint64(len(p)-5) {
			break
		}
		msg := p[5 : 5+n]
		masked := msg
		switch p[0] {
		case 0:
			masked = maskMessage(msg, rules)
		case 1:
			masked = maskCompressed(msg, encoding, rules)
		}
		out = append(out, p[0])
		out = binary.BigEndian.AppendUint32(out, uint32(len(masked)))
		out = append(out, masked...)
		p = p[5+n:]
		ends = append(ends, moved{len(data) - len(p), len(out)})
	}
	if len(p) > 0 {
		out = append(out, rules.Text(p)...)
	}
	remap := func(off int) int {
		for i := len(ends) - 1; i >= 0; i-- {
			if e := ends[i]; off >= e.old {
				return min(e.new+(off-e.old), len(out))
			}
		}
		return off
	}
	return out, remap
}

// maskCompressed masks a compressed gRPC message of the stream's
// grpc-encoding; one of an encoding it does not know is reported.
func maskCompressed(msg []byte, encoding string, rules wire.MaskRules) []byte {
	if encoding != "gzip" {
		rules.Skip(fmt.Sprintf("a gRPC message compressed with grpc-encoding %q", encoding))
		return msg
	}
	zr, err := gzip.NewReader(bytes.NewReader(msg))
	if err != nil {
		rules.Skip("a gzip gRPC message: " + err.Error())
		return msg
	}
	plain, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil || len(plain) > maxDecoded {
		rules.Skip("a gzip gRPC message that does not decode whole")
		return msg
	}
	masked := maskMessage(plain, rules)
	if bytes.Equal(masked, plain) {
		return msg
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write(masked) // into memory: cannot fail
	_ = zw.Close()
	return b.Bytes()
}

// maskMessage masks one gRPC message: protobuf (see maskProto), or, when
// it is no protobuf message but text (application/grpc+json), JSON by the
// rules' paths and text by their patterns.
func maskMessage(msg []byte, rules wire.MaskRules) []byte {
	if out, ok := walkProto(msg, rules, 0); ok {
		if bytes.Equal(out, msg) {
			return msg
		}
		return out
	}
	if printable(msg) {
		out := rules.Text(rules.JSON(msg))
		if !bytes.Equal(out, msg) {
			return out
		}
	}
	return msg
}

// walkProto masks the string fields of a protobuf message read without
// its schema, as wire/protobuf decodes it: a length-delimited field that
// is printable UTF-8 is a string (the rules' patterns apply), else a
// nested message when it parses whole as one, else bytes (kept); lengths
// are re-encoded. ok is false for bytes that are not a message (groups,
// deprecated, are not followed either).
func walkProto(b []byte, rules wire.MaskRules, depth int) ([]byte, bool) {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag>>3 == 0 {
			return nil, false
		}
		out, b = append(out, b[:n]...), b[n:]
		switch tag & 7 {
		case 0: // varint
			_, n := binary.Uvarint(b)
			if n <= 0 {
				return nil, false
			}
			out, b = append(out, b[:n]...), b[n:]
		case 1: // fixed64
			if len(b) < 8 {
				return nil, false
			}
			out, b = append(out, b[:8]...), b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return nil, false
			}
			out, b = append(out, b[:4]...), b[4:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return nil, false
			}
			v := b[n : n+int(l)]
			b = b[n+int(l):]
			mv := v
			switch {
			case printable(v):
				mv = rules.Text(v)
			case len(v) > 0 && depth < maxDepth:
				if nested, ok := walkProto(v, rules, depth+1); ok {
					mv = nested
				}
			}
			out = binary.AppendUvarint(out, uint64(len(mv)))
			out = append(out, mv...)
		default: // groups (deprecated) and invalid wire types: not followed
			return nil, false
		}
	}
	return out, true
}

// printable: valid UTF-8 with no control characters but tab and newlines.
func printable(x []byte) bool {
	if !utf8.Valid(x) {
		return false
	}
	for _, r := range string(x) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}
