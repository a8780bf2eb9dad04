package protobuf

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// maxDepth bounds the nesting tried when bytes might be a message.
const maxDepth = 32

// DecodeRaw decodes a message without its schema. Keys are field numbers;
// a field seen more than once is a list. Varints are unsigned numbers,
// fixed32 and fixed64 are shown as unsigned numbers too (their float
// reading needs the schema), length-delimited fields are a nested message
// when they parse whole as one, else a string when they are printable
// UTF-8, else {"base64": …}. Bytes that are not a message are an error
// naming the offset.
func DecodeRaw(b []byte) (map[string]any, error) {
	m, err := decodeRaw(b, 0)
	if err != nil {
		return nil, fmt.Errorf("protobuf: %w", err)
	}
	return m, nil
}

func decodeRaw(b []byte, depth int) (map[string]any, error) {
	out := map[string]any{}
	off := 0
	for off < len(b) {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return nil, fmt.Errorf("offset %d: bad tag: %w", off, protowire.ParseError(n))
		}
		at := off
		off += n
		var v any
		switch typ {
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b[off:])
			if n < 0 {
				return nil, fmt.Errorf("offset %d: field %d: %w", at, num, protowire.ParseError(n))
			}
			v, off = json.Number(strconv.FormatUint(x, 10)), off+n
		case protowire.Fixed32Type:
			x, n := protowire.ConsumeFixed32(b[off:])
			if n < 0 {
				return nil, fmt.Errorf("offset %d: field %d: %w", at, num, protowire.ParseError(n))
			}
			v, off = json.Number(strconv.FormatUint(uint64(x), 10)), off+n
		case protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(b[off:])
			if n < 0 {
				return nil, fmt.Errorf("offset %d: field %d: %w", at, num, protowire.ParseError(n))
			}
			v, off = json.Number(strconv.FormatUint(x, 10)), off+n
		case protowire.BytesType:
			x, n := protowire.ConsumeBytes(b[off:])
			if n < 0 {
				return nil, fmt.Errorf("offset %d: field %d: %w", at, num, protowire.ParseError(n))
			}
			v, off = bytesValue(x, depth), off+n
		case protowire.StartGroupType:
			x, n := protowire.ConsumeGroup(num, b[off:])
			if n < 0 {
				return nil, fmt.Errorf("offset %d: group %d: %w", at, num, protowire.ParseError(n))
			}
			g, err := decodeRaw(x, depth+1)
			if err != nil {
				return nil, fmt.Errorf("offset %d: group %d: %w", at, num, err)
			}
			v, off = g, off+n
		default:
			return nil, fmt.Errorf("offset %d: field %d has wire type %d", at, num, typ)
		}
		k := strconv.Itoa(int(num))
		switch prev := out[k].(type) {
		case nil:
			out[k] = v
		case []any:
			out[k] = append(prev, v)
		default:
			out[k] = []any{prev, v}
		}
	}
	return out, nil
}

// bytesValue reads a length-delimited field: a message if it parses whole
// as one (and is not empty), a string if printable, base64 otherwise.
func bytesValue(x []byte, depth int) any {
	if len(x) > 0 && depth < maxDepth && !printable(x) {
		if m, err := decodeRaw(x, depth+1); err == nil {
			return m
		}
	}
	if printable(x) {
		return string(x)
	}
	if len(x) > 0 && depth < maxDepth {
		if m, err := decodeRaw(x, depth+1); err == nil {
			return m
		}
	}
	return map[string]any{"base64": base64.StdEncoding.EncodeToString(x)}
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

// Schema names the fields of gRPC methods' messages. Package
// wire/protobuf/descriptors implements it from descriptors; this package
// stays light (protowire only) so that the agent, which decodes by field
// number, links nothing more.
type Schema interface {
	// DecodeMethod decodes b, a request message of the gRPC method at path
	// ("/pkg.Service/Method"; a response message when response is true),
	// by field name. known is false when the schema does not know the
	// method.
	DecodeMethod(path string, response bool, b []byte) (tree map[string]any, known bool, err error)
}
